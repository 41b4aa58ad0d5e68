//! Fused Longstaff–Schwartz regression build on the GPU (`cuda/regression.cu`).
//!
//! For each outer path `l` of a batch, one kernel forms
//! `A_l = (1/c_l) Σ_m ψ(S_m) ψ(S_m)^T` (lower triangle, column-major `n x n`: the layout
//! of [`crate::SymmetricBatch`]) and `b_l = (1/c_l) Σ_m ψ(S_m) y_m` over the inner paths
//! `m` that enter the regression (payoff `> 0` when `itm_only`, else all of them), `c_l`
//! their number, directly from the inner states at the exercise date and the discounted
//! cash flows `y`. The design matrix `Ψ` is never written to global memory: chunks of
//! paths are staged in shared memory and the lower triangle of `[ψ; y]^T [ψ; y]` is
//! accumulated in registers by one of two kernels:
//!
//! * **tensor cores** (f64, the default where it fits, [`RegressionConfig::tensor_cores`]):
//!   one warp per regression forms the f64 MMA fragments of `Ψ` straight from the staged
//!   states (`ψ = 0` for paths that do not enter) and accumulates the blocks that touch
//!   the lower triangle with the FP64 tensor cores: `mma.sync.m16n8k8` `16 x 8` blocks, 8
//!   paths per step, on sm_90 and later ([`tensor_core_step`]; 6 instructions per 8 paths
//!   at `n = 30`), else `mma.sync.m8n8k4` `8 x 8` blocks, 4 paths per step (20 per 8
//!   paths). Both add each entry's products in path order as fused multiply-adds (measured:
//!   the same bits). The sums' order and rounding are the tensor cores', so `A` and `b`
//!   differ from the CPU's sums:
//!   each entry by at most about `(c_l + 1) eps (1/c_l) Σ_m |ψ_i| |ψ_j|` (`y` for `ψ_j`
//!   in `b`; to first order: two summation bounds `γ_c ≈ c eps / 2`, one for each order,
//!   and the two roundings of the scaling), which `kernels/tests/gpu_paths.rs` checks
//!   entry by entry.
//! * **tiles** (f32, or `tensor_cores: false`): preparing warps form the `ψ` rows in
//!   shared memory and every tile thread accumulates a `4 x 4` tile. Each entry is summed
//!   over the entering paths in increasing `m`, from zero, with one rounded product and
//!   one rounded add per path in the working precision `T`; `ψ` is evaluated in `f64`
//!   and rounded to `T`, as is `y`; the sums are scaled by `1/c_l` computed in `T`. This
//!   is the CPU engine's arithmetic, so the GPU sums equal it bitwise (unless
//!   [`RegressionConfig::fma`] is set).
//!
//! Outer paths with no entering path get `A = 0`, `b = 0`, count 0. The upper triangle
//! of `A` is not written.

use super::module::{compile_cubin, prelude_source, source_file};
use super::solver::GpuReal;
use super::GpuError;
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use std::marker::PhantomData;
use std::sync::Arc;

const REGRESSION_CU: &str = include_str!("../../cuda/regression.cu");

/// What the option's payoff is written on.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuUnderlying {
    /// `S^i`.
    Asset(usize),
    /// `Σ w_i S^i` over `(asset index, weight)`, summed in this order.
    Basket(Vec<(usize, f64)>),
    /// `max_i S^i` over the listed assets.
    Max(Vec<usize>),
}

/// Call or put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuOptionKind {
    Call,
    Put,
}

/// The payoff that decides which inner paths are in the money.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPayoff {
    pub underlying: GpuUnderlying,
    pub kind: GpuOptionKind,
    pub strike: f64,
}

impl GpuPayoff {
    /// The payoff for the asset prices `s` (all assets), in the kernel's arithmetic.
    pub fn value(&self, s: &[f64]) -> f64 {
        let level = match &self.underlying {
            GpuUnderlying::Asset(i) => s[*i],
            GpuUnderlying::Basket(w) => w.iter().fold(0.0, |acc, &(i, wi)| acc + wi * s[i]),
            GpuUnderlying::Max(v) => v.iter().fold(f64::NEG_INFINITY, |acc, &i| acc.max(s[i])),
        };
        match self.kind {
            GpuOptionKind::Call => (level - self.strike).max(0.0),
            GpuOptionKind::Put => (self.strike - level).max(0.0),
        }
    }

    /// (kind code, asset indices, weights) as the kernel reads them.
    fn tables(&self) -> (i32, Vec<i32>, Vec<f64>) {
        match &self.underlying {
            GpuUnderlying::Asset(i) => (0, vec![*i as i32], vec![1.0]),
            GpuUnderlying::Basket(w) => (
                1,
                w.iter().map(|&(i, _)| i as i32).collect(),
                w.iter().map(|&(_, x)| x).collect(),
            ),
            GpuUnderlying::Max(v) => (2, v.iter().map(|&i| i as i32).collect(), vec![0.0; v.len()]),
        }
    }

    /// The payoff as CUDA C, with the operations of `engine_payoff` (`engine.cu`) and of
    /// [`Self::value`] in their order, so the same bits: `(level, gap)`, the level `S_i`,
    /// the basket `((0.0 + w_0 S_i0) + w_1 S_i1) + ...` or the maximum
    /// `fmax(..fmax(-inf, S_i0)..)`, and the gap `level - K` (call) or `K - level` (put),
    /// whose `fmax(gap, 0.0)` is the payoff. `price(i)` writes the price of asset `i`,
    /// `weight(w)` a basket weight (an exact constant), `strike` the strike. Shared by the
    /// build kernels' `payoff_value` and the path kernel's `paths_payoff`
    /// ([`super::paths::payoff_value_source`]).
    pub(crate) fn c_expression(
        &self,
        price: impl Fn(usize) -> String,
        weight: impl Fn(f64) -> String,
        strike: &str,
    ) -> (String, String) {
        let level = match &self.underlying {
            GpuUnderlying::Asset(i) => price(*i),
            GpuUnderlying::Basket(w) => w.iter().fold("0.0".to_string(), |acc, &(i, wi)| {
                format!("({acc} + {} * {})", weight(wi), price(i))
            }),
            GpuUnderlying::Max(v) => v.iter().fold(
                "__longlong_as_double(0xfff0000000000000LL)".to_string(),
                |acc, &i| format!("fmax({acc}, {})", price(i)),
            ),
        };
        let gap = match self.kind {
            GpuOptionKind::Call => format!("level - {strike}"),
            GpuOptionKind::Put => format!("{strike} - level"),
        };
        (level, gap)
    }

    /// The device function `double payoff_value(const unsigned* hi, const unsigned* lo,
    /// double strike)` of the build kernels: [`Self::c_expression`] of the asset prices
    /// `state_join(hi, lo, i)` (the inner states' two planes of words, `prelude.cu`),
    /// weights as exact bit patterns, the strike passed in.
    fn value_source(&self) -> String {
        let (level, gap) = self.c_expression(
            |i| format!("state_join(hi, lo, {i})"),
            |w| format!("__longlong_as_double(0x{:016x}LL)", w.to_bits()),
            "strike",
        );
        format!(
            "__device__ __forceinline__ double payoff_value(const unsigned* hi, const unsigned* lo, double strike) {{\n    const double level = {level};\n    return fmax({gap}, 0.0);\n}}\n"
        )
    }

    fn max_asset(&self) -> Option<usize> {
        match &self.underlying {
            GpuUnderlying::Asset(i) => Some(*i),
            GpuUnderlying::Basket(w) => w.iter().map(|&(i, _)| i).max(),
            GpuUnderlying::Max(v) => v.iter().copied().max(),
        }
    }
}

pub use crate::basis::BasisTables;

/// Everything that fixes one compiled regression kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct RegressionSpec {
    pub basis: BasisTables,
    pub payoff: GpuPayoff,
    /// Only in-the-money paths enter (else all).
    pub itm_only: bool,
    /// Assets per state `d`.
    pub assets: usize,
    /// Inner paths per outer path `m`.
    pub inner_paths: usize,
    /// The states come with the payoff plane of the path kernel
    /// ([`super::paths::PathsOptions::payoff_plane`]: the payoffs in the place of the low
    /// words), which the build copies instead of evaluating the payoff. Needs
    /// [`super::paths::payoff_plane_fits`]`(assets, inner_paths)`.
    pub payoff_plane: bool,
}

/// Launch shape of the build kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegressionConfig {
    /// Regressions per block (`None`: chosen for the most regressions, then blocks,
    /// resident per SM).
    pub regressions_per_block: Option<usize>,
    /// Inner paths staged per chunk: a power of two, at most 32 (one lane per path of a
    /// preparing warp).
    pub paths_per_chunk: usize,
    /// Stage buffers of raw states per preparing warp: `stages - 1` chunks are being
    /// copied while one is prepared (2 to 8).
    pub stages: usize,
    /// Fused multiply-adds in the accumulation (faster, no longer bitwise the CPU's).
    pub fma: bool,
    /// The tile threads load the next path's tile-row values before the current path's
    /// products (same arithmetic, in the same order).
    pub prefetch: bool,
    /// f64 builds on the FP64 tensor cores (not bitwise the CPU's sums; see the module
    /// docs) where the basis fits ([`tensor_cores_fit`]) and the device has them
    /// (sm_80 or later); f32 builds and other bases use the tile kernel whatever this
    /// says. With it, `paths_per_chunk`, `fma` and
    /// `prefetch` are not used (chunks of 32 paths), `regressions_per_block` is warps
    /// per block and `stages` counts chunks of 32 paths.
    pub tensor_cores: bool,
    /// Paths per tensor-core step, 4 or 8 (`None`: [`tensor_core_step`] for the device;
    /// 8 is refused below sm_90).
    pub tensor_core_step: Option<usize>,
}

impl Default for RegressionConfig {
    /// `paths_per_chunk` [`DEFAULT_PATHS_PER_CHUNK`], `stages` [`DEFAULT_STAGES`], the
    /// block shape chosen per device, no FMA, no prefetch, tensor cores on.
    fn default() -> Self {
        Self {
            regressions_per_block: None,
            paths_per_chunk: DEFAULT_PATHS_PER_CHUNK,
            stages: DEFAULT_STAGES,
            fma: false,
            prefetch: false,
            tensor_cores: true,
            tensor_core_step: None,
        }
    }
}

impl RegressionConfig {
    /// The tile kernel (no tensor cores) with `paths_per_chunk` paths per chunk, `stages`
    /// stage buffers, FMA and prefetch as given, the block shape chosen per device.
    pub fn tiles(paths_per_chunk: usize, stages: usize, fma: bool, prefetch: bool) -> Self {
        Self {
            paths_per_chunk,
            stages,
            fma,
            prefetch,
            tensor_cores: false,
            ..Self::default()
        }
    }

    /// The f64 tensor-core kernel with `stages` chunks of 32 paths and
    /// `regressions_per_block` warps per block (`None`: chosen per device).
    pub fn tensor_cores(stages: usize, regressions_per_block: Option<usize>) -> Self {
        Self {
            stages,
            regressions_per_block,
            tensor_cores: true,
            ..Self::default()
        }
    }

    /// The default configuration with the tuning overrides of the environment applied:
    /// `CVA_GPU_BUILD_PATHS_PER_CHUNK`, `CVA_GPU_BUILD_STAGES`,
    /// `CVA_GPU_BUILD_REGRESSIONS_PER_BLOCK` (integers), `CVA_GPU_BUILD_PREFETCH` and
    /// `CVA_GPU_BUILD_TENSOR_CORES` (`0` or `1`; `0` gives the bitwise tile kernel) and
    /// `CVA_GPU_BUILD_TC_STEP` (`4` or `8`, paths per tensor-core step), for timing and
    /// checking runs of `cva run`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] naming the variable if one is set to something that does
    /// not parse (values out of range are refused by [`GpuRegression::new`]).
    pub fn from_env() -> Result<Self, GpuError> {
        let env = |name: &str, default: usize| -> Result<usize, GpuError> {
            match std::env::var(name) {
                Err(_) => Ok(default),
                Ok(v) => v.trim().parse().map_err(|_| {
                    GpuError::Invalid(format!("{name} = `{v}`: expected a non-negative integer"))
                }),
            }
        };
        let flag = |name: &str, default: bool| -> Result<bool, GpuError> {
            match env(name, usize::from(default))? {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(GpuError::Invalid(format!(
                    "{name} = {other}: expected 0 or 1"
                ))),
            }
        };
        let d = Self::default();
        let g = env("CVA_GPU_BUILD_REGRESSIONS_PER_BLOCK", 0)?;
        let k = env("CVA_GPU_BUILD_TC_STEP", 0)?;
        Ok(Self {
            tensor_core_step: (k > 0).then_some(k),
            regressions_per_block: (g > 0).then_some(g),
            paths_per_chunk: env("CVA_GPU_BUILD_PATHS_PER_CHUNK", d.paths_per_chunk)?,
            stages: env("CVA_GPU_BUILD_STAGES", d.stages)?,
            prefetch: flag("CVA_GPU_BUILD_PREFETCH", d.prefetch)?,
            tensor_cores: flag("CVA_GPU_BUILD_TENSOR_CORES", d.tensor_cores)?,
            ..d
        })
    }
}

/// Paths per chunk of the default configuration.
pub const DEFAULT_PATHS_PER_CHUNK: usize = 16;

/// Stage buffers of the default configuration.
pub const DEFAULT_STAGES: usize = 2;

/// Geometry and resources of a compiled build kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct RegressionLaunch {
    pub n: usize,
    pub regressions_per_block: usize,
    pub paths_per_chunk: usize,
    pub stages: usize,
    pub block_threads: u32,
    pub shared_bytes: usize,
    pub registers: i32,
    pub local_bytes: i32,
    pub blocks_per_sm: u32,
    pub fma: bool,
    /// The tensor-core kernel (regressions per block = warps per block, 32 paths per
    /// chunk).
    pub tensor_cores: bool,
    /// Paths per tensor-core step (4: `mma.m8n8k4`, 8: `mma.m16n8k8`); 0 for the tile
    /// kernel.
    pub tensor_core_step: usize,
}

/// Paths per chunk of the tensor-core kernel (one lane per path for the payoff).
pub const TENSOR_CORE_CHUNK: usize = 32;

/// Registers per thread the tensor-core kernel is held to (at least): its accumulators
/// take `4 NB (NB + 1) / 2` (40 for `n <= 31`), the chains `3 NB deg`.
const TENSOR_CORE_REGISTER_BUDGET: usize = 128;

/// Registers per thread that the tensor-core kernel's accumulators and per-lane chains may
/// take (`tensor_cores_fit`, `tensor_core_step`): the rest of the budget above is the
/// staging, addressing and payoff code's.
const TENSOR_CORE_DATA_REGISTERS: usize = 96;

/// Column blocks of 8 of the augmented `(n+1) x (n+1)` matrix (`NB` of the tensor-core
/// kernel).
fn column_blocks(n: usize) -> usize {
    (n + 1).div_ceil(8)
}

/// Whether a basis of `n` functions with chains of at most `deg` factors fits the
/// tensor-core kernel: `NB = ceil((n + 1) / 8)` column blocks, whose `NB (NB + 1) / 2`
/// accumulator blocks (4 registers each) and per-lane chains (`3 NB deg` registers)
/// take at most 96 registers (so `n <= 31` with chains of up to 4 factors, `n <= 39`
/// with up to 2).
pub fn tensor_cores_fit(n: usize, deg: usize) -> bool {
    let nb = column_blocks(n);
    4 * (nb * (nb + 1) / 2) + 3 * nb * deg <= TENSOR_CORE_DATA_REGISTERS
}

/// Tiles of the lower triangle of the augmented `(n+1) x (n+1)` matrix.
fn tiles(n: usize) -> usize {
    let tb = (n + 1).div_ceil(4);
    tb * (tb + 1) / 2
}

/// Threads of a block of `g` regressions of `n` basis functions and `p` paths per chunk:
/// the preparing warps (one lane per staged path, `g * p`) and the tile warps (one
/// thread per tile, `g * tiles(n)`), each rounded up to whole warps.
fn block_threads(n: usize, g: usize, p: usize) -> usize {
    ((g * p).div_ceil(32) + (g * tiles(n)).div_ceil(32)) * 32
}

/// Registers per thread the build kernel is held to (at least): blocks of `threads`
/// are compiled for `65536 / (threads * REGISTER_BUDGET)` resident blocks per SM. 80 is
/// what the f64 kernel needs without spilling in its hot loops (the 4 x 4 tile and its
/// operands); 96 gave blocks of 352 threads (8 regressions of 8 paths) one block per SM.
const REGISTER_BUDGET: usize = 80;

/// Resident blocks of `threads` per SM the kernel is compiled for (`MIN_BLOCKS`).
fn min_blocks(threads: usize) -> usize {
    (65536 / (threads * REGISTER_BUDGET)).clamp(1, 2048 / threads)
}

/// The CUDA source of the build kernel: the defines (with `D = assets`), the payoff's
/// entry test ([`GpuPayoff`], compiled in), then `cuda/regression.cu`. `g` regressions of `n` basis
/// functions (longest chain `deg`) per block, `p` paths per chunk (a power of two, at
/// most 32), `stages` stage buffers (`stages - 1` chunks copied ahead); the block has
/// `ceil(g p / 32) + ceil(g tiles / 32)` warps.
pub fn regression_source(
    f64: bool,
    n: usize,
    deg: usize,
    (g, p, stages): (usize, usize, usize),
    (fma, prefetch): (bool, bool),
    payoff: &GpuPayoff,
    assets: usize,
) -> String {
    let threads = block_threads(n, g, p);
    let (real_f64, min_blocks, use_fma) = (u32::from(f64), min_blocks(threads), u32::from(fma));
    let prefetch = u32::from(prefetch);
    format!(
        "#define REAL_F64 {real_f64}\n#define N {n}\n#define DEG {deg}\n#define G {g}\n#define P {p}\n#define STAGES {stages}\n#define THREADS {threads}\n#define MIN_BLOCKS {min_blocks}\n#define USE_FMA {use_fma}\n#define TILE_PREFETCH {prefetch}\n#define D {assets}\n#define TENSOR_CORES 0\n{}{}{}",
        prelude_source(),
        payoff.value_source(),
        source_file("regression.cu", REGRESSION_CU)
    )
}

/// Paths per step of the tensor-core build on a device of compute capability `major`:
/// 8 (one `mma.m16n8k8.f64` per 16 x 8 block, sm_90 and later) where its accumulators
/// (`8` registers for each of the `NR (NR + 1)` blocks, `NR = ceil(NB / 2)`, one fewer for
/// odd `NB`) and chains take at most 96 registers (`n <= 31` with chains of up to 4
/// factors), else 4 (`mma.m8n8k4.f64`).
pub fn tensor_core_step(n: usize, deg: usize, major: i32) -> usize {
    let nb = column_blocks(n);
    let nr = nb.div_ceil(2);
    let blocks = nr * (nr + 1) - usize::from(2 * nr > nb);
    if major >= 9 && 8 * blocks + 3 * nb * deg <= TENSOR_CORE_DATA_REGISTERS {
        8
    } else {
        4
    }
}

/// The CUDA source of the f64 tensor-core build kernel: `w` regressions (one warp each)
/// per block, `stages` stage buffers of 32 paths (`stages - 1` chunks copied ahead),
/// compiled for `min_blocks` resident blocks per SM, `k` paths per tensor-core step
/// ([`tensor_core_step`]: 8 needs sm_90); basis of `n` functions (longest chain `deg`),
/// `assets` assets per state, the payoff's entry test compiled in.
pub fn regression_source_tensor_cores(
    n: usize,
    deg: usize,
    (w, stages, min_blocks, k): (usize, usize, usize, usize),
    payoff: &GpuPayoff,
    assets: usize,
) -> String {
    let threads = 32 * w;
    format!(
        "#define REAL_F64 1\n#define N {n}\n#define DEG {deg}\n#define W {w}\n#define G {w}\n#define P {TENSOR_CORE_CHUNK}\n#define STAGES {stages}\n#define THREADS {threads}\n#define MIN_BLOCKS {min_blocks}\n#define USE_FMA 1\n#define TILE_PREFETCH 0\n#define D {assets}\n#define TENSOR_CORES 1\n#define TC_K {k}\n{}{}{}",
        prelude_source(),
        payoff.value_source(),
        source_file("regression.cu", REGRESSION_CU)
    )
}

/// The build kernel for one basis, payoff and shape, compiled for one precision.
#[derive(Debug)]
pub struct GpuRegression<T: GpuReal> {
    stream: Arc<CudaStream>,
    function: CudaFunction,
    spec: RegressionSpec,
    launch: RegressionLaunch,
    chain_asset: CudaSlice<i32>,
    chain_inv: CudaSlice<f64>,
    payoff_kind: i32,
    under_asset: CudaSlice<i32>,
    under_weight: CudaSlice<f64>,
    under_len: i32,
    _real: PhantomData<T>,
}

impl<T: GpuReal> GpuRegression<T> {
    /// Compiles the kernel for `spec` on the stream's device and uploads its tables.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for an empty basis, `n > 64`, asset indices `>= d` or a bad
    /// shape; [`GpuError::SharedMemory`] if a block does not fit; compile and driver
    /// errors.
    pub fn new(
        stream: &Arc<CudaStream>,
        spec: &RegressionSpec,
        config: RegressionConfig,
    ) -> Result<Self, GpuError> {
        let n = spec.basis.len();
        let d = spec.assets;
        if n == 0 || n > crate::MAX_N {
            return Err(GpuError::Invalid(format!(
                "basis size {n} outside 1..={}",
                crate::MAX_N
            )));
        }
        if spec.basis.assets.iter().any(|&a| a >= d)
            || spec.payoff.max_asset().is_none_or(|a| a >= d)
        {
            return Err(GpuError::Invalid(format!(
                "an asset index is outside 0..{d} (or none given)"
            )));
        }
        if spec.payoff_plane && !super::paths::payoff_plane_fits(d, spec.inner_paths) {
            return Err(GpuError::Invalid(format!(
                "payoff plane: {} inner paths of {d} assets (needs d >= 2 and inner * d even)",
                spec.inner_paths
            )));
        }
        let p = config.paths_per_chunk;
        if !p.is_power_of_two() || p > 32 {
            return Err(GpuError::Invalid(format!(
                "paths per chunk {p}: a power of two up to 32"
            )));
        }
        let st = config.stages;
        if !(2..=8).contains(&st) {
            return Err(GpuError::Invalid(format!("stages {st}: 2 to 8")));
        }
        let nt = tiles(n);
        let es = if T::IS_F64 { 8 } else { 4 };
        let nep = (n + 1).div_ceil(4) * 4;
        let (chain_asset, chain_inv, deg) = spec.basis.chains();
        let (payoff_kind, ua, uw) = spec.payoff.tables();
        let nu = ua.len();
        // psi[2][g][p][nep] (double-buffered), states[st][g][p][d] and y[st][g][p] (stage
        // buffers), 32 junk values per preparing warp, counts[2][g], totals[g], compacted
        // path indices[g][p].
        let shared = |g: usize| {
            2 * g * p * nep * es
                + (st * g * p * d + st * g * p) * 8
                + (g * p).div_ceil(32) * 32 * es
                + (3 * g + g * p) * 4
        };
        let ctx = stream.context();
        let optin = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            .max(0) as usize;
        let sm_shared = ctx
            .attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            )?
            .max(0) as usize;
        let (major, minor) = ctx.compute_capability()?;
        // mma.sync m8n8k4 f64 needs sm_80 or later.
        let tensor_cores =
            config.tensor_cores && T::IS_F64 && tensor_cores_fit(n, deg) && major >= 8;
        let (g, p, threads, smem, src, step) = if tensor_cores {
            // Per warp: states[st][32][d] and y[st][32].
            // (With the payoff plane: the high words, the payoffs and y.)
            let per_path = if spec.payoff_plane {
                4 * d + 16
            } else {
                8 * (d + 1)
            };
            let shared_tc = |w: usize| w * st * TENSOR_CORE_CHUNK * per_path;
            // Resident blocks of w warps per SM: shared memory (1 kB reserved per
            // block), the register budget, 64 warps.
            let blocks_tc = |w: usize| {
                (sm_shared / (shared_tc(w) + 1024))
                    .min(65536 / (32 * w * TENSOR_CORE_REGISTER_BUDGET))
                    .min(64 / w)
                    .min(32)
            };
            let w = match config.regressions_per_block {
                Some(w) => w,
                None => {
                    // The most warps (= regressions) resident per SM, then the most
                    // blocks. For f64, n = 30, d = 29, 2 stages: 5 warps, 3 blocks.
                    let mut best: Option<((usize, usize), usize)> = None;
                    for w in 1..=32usize {
                        if shared_tc(w) > optin {
                            break;
                        }
                        let blocks = blocks_tc(w);
                        let key = (w * blocks, blocks);
                        if best.is_none_or(|b| key > b.0) {
                            best = Some((key, w));
                        }
                    }
                    best.map_or(1, |b| b.1)
                }
            };
            if w == 0 || w > 32 {
                return Err(GpuError::Invalid(format!(
                    "{w} regressions (warps) per block: 1 to 32"
                )));
            }
            let smem = shared_tc(w);
            if smem > optin {
                return Err(GpuError::SharedMemory {
                    kernel: format!("regression_build (tensor cores) n={n} W={w} S={st}"),
                    needed: smem,
                    limit: optin,
                });
            }
            let k = match config.tensor_core_step {
                None => tensor_core_step(n, deg, major),
                Some(k) if k == 4 || (k == 8 && major >= 9) => k,
                Some(k) => {
                    return Err(GpuError::Invalid(format!(
                        "tensor-core step of {k} paths: 4, or 8 on sm_90 and later"
                    )))
                }
            };
            let src = regression_source_tensor_cores(
                n,
                deg,
                (w, st, blocks_tc(w).max(1), k),
                &spec.payoff,
                d,
            );
            (w, TENSOR_CORE_CHUNK, 32 * w, smem, src, k)
        } else {
            let g = match config.regressions_per_block {
                Some(g) => g,
                None => {
                    // The most regressions resident per SM (blocks estimated from the
                    // shared memory, 1 kB reserved per block, and the register budget),
                    // then the most blocks (blocks wait at their barriers
                    // independently: on the H100, f64 n = 30, the round-2 kernel built
                    // 17.6 M/s with 3 blocks of 4 against 15.9 for 2 of 6), then the
                    // best ratio of tile threads to tile-warp threads, then fewer per
                    // block; at most 512 threads per block. For f64, n = 30, P = 16 this
                    // is G = 7, 2 blocks (14 resident).
                    let mut best: Option<((usize, usize), f64, usize)> = None;
                    for g in 1..=128usize {
                        let threads = block_threads(n, g, p);
                        if threads > 512 || shared(g) > optin {
                            break;
                        }
                        let blocks = (sm_shared / (shared(g) + 1024))
                            .min(min_blocks(threads))
                            .min(32);
                        let key = (
                            (g * blocks, blocks),
                            (g * nt) as f64 / ((g * nt).div_ceil(32) * 32) as f64,
                        );
                        if best.is_none_or(|b| key.0 > b.0 || key.0 == b.0 && key.1 > b.1 + 1e-9) {
                            best = Some((key.0, key.1, g));
                        }
                    }
                    best.map_or(1, |b| b.2)
                }
            };
            let threads = block_threads(n, g, p);
            if g == 0 || threads > 1024 {
                return Err(GpuError::Invalid(format!(
                    "{g} regressions of {nt} tiles per block"
                )));
            }
            let smem = shared(g);
            if smem > optin {
                return Err(GpuError::SharedMemory {
                    kernel: format!("regression_build n={n} G={g} P={p}"),
                    needed: smem,
                    limit: optin,
                });
            }
            let src = regression_source(
                T::IS_F64,
                n,
                deg,
                (g, p, st),
                (config.fma, config.prefetch),
                &spec.payoff,
                d,
            );
            (g, p, threads, smem, src, 0)
        };
        // The payoffs staged as doubles in the low words' stage buffers: 8-byte aligned
        // where a stage's buffer (g p d words) has an even size.
        if spec.payoff_plane && !tensor_cores && !(g * p * d).is_multiple_of(2) {
            return Err(GpuError::Invalid(format!(
                "payoff plane: stage buffers of {g} x {p} x {d} words (an even size needed)"
            )));
        }
        let src = if spec.payoff_plane {
            format!("#define PAYOFF_PLANE 1\n{src}")
        } else {
            src
        };
        let cubin = compile_cubin(&src, "regression.cu", &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        let name = if T::IS_F64 {
            "regression_build_f64"
        } else {
            "regression_build_f32"
        };
        let function = module.load_function(name)?;
        if smem > 48 * 1024 {
            function.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )?;
        }
        let blocks_per_sm =
            function.occupancy_max_active_blocks_per_multiprocessor(threads as u32, smem, None)?;
        let launch = RegressionLaunch {
            n,
            regressions_per_block: g,
            paths_per_chunk: p,
            stages: st,
            block_threads: threads as u32,
            shared_bytes: smem,
            registers: function.num_regs()?,
            local_bytes: function.local_size_bytes()?,
            blocks_per_sm,
            fma: config.fma && !tensor_cores,
            tensor_cores,
            tensor_core_step: step,
        };
        Ok(Self {
            stream: stream.clone(),
            function,
            spec: spec.clone(),
            launch,
            chain_asset: stream.clone_htod(&chain_asset)?,
            chain_inv: stream.clone_htod(&chain_inv)?,
            payoff_kind,
            under_asset: stream.clone_htod(&ua)?,
            under_weight: stream.clone_htod(&uw)?,
            under_len: nu as i32,
            _real: PhantomData,
        })
    }

    pub fn launch_info(&self) -> &RegressionLaunch {
        &self.launch
    }

    pub fn spec(&self) -> &RegressionSpec {
        &self.spec
    }

    /// Builds the `batch` regressions. Inputs: `states`, the inner states of outer path
    /// `l` in the block of `m * d` doubles at `l * path_stride`, held as two planes of
    /// 32-bit words (high words, then low words: [`super::paths::states_to_planes`]), as
    /// [`super::paths::GpuPaths::inner_paths`] stores them (the view starting at step
    /// `j - k - 1` with `path_stride = steps * m * d`), or with the payoffs in the place
    /// of the low words ([`RegressionSpec::payoff_plane`]); `y`, the discounted cash flow of
    /// `(l, mm)` at `y[l * m + mm]`. Outputs: `a` (`batch * n * n`, lower triangles), `b`
    /// (`batch * n`), `counts` (`batch`, the number of entering paths) and `payoff`
    /// (`batch * m`: the payoff of every inner path at `l * m + mm`, the bits of
    /// [`GpuPayoff::value`], entering or not; the exercise update reads it).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        &self,
        states: &CudaView<f64>,
        path_stride: usize,
        y: &CudaView<f64>,
        batch: usize,
        a: &mut CudaViewMut<T>,
        b: &mut CudaViewMut<T>,
        counts: &mut CudaViewMut<u32>,
        payoff: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        self.build_active(states, path_stride, y, batch, (a, b, counts, payoff), None)
    }

    /// [`build`](Self::build) with a hint: where `active` (`batch` bytes) is given, the
    /// tensor-core kernel skips the outer paths with `active[l] == 0` and writes nothing
    /// for them (the tile kernel builds them all). The engine passes the outer paths that
    /// take part (the fused walk's fallback: few of them).
    ///
    /// # Errors
    /// As [`build`](Self::build); also a short `active`.
    #[allow(clippy::type_complexity)]
    pub fn build_active(
        &self,
        states: &CudaView<f64>,
        path_stride: usize,
        y: &CudaView<f64>,
        batch: usize,
        (a, b, counts, payoff): (
            &mut CudaViewMut<T>,
            &mut CudaViewMut<T>,
            &mut CudaViewMut<u32>,
            &mut CudaViewMut<f64>,
        ),
        active: Option<&CudaView<u8>>,
    ) -> Result<(), GpuError> {
        if active.is_some_and(|v| v.len() < batch) {
            return Err(GpuError::Invalid(
                "regression build: active too short".into(),
            ));
        }
        let (n, m, d) = (self.launch.n, self.spec.inner_paths, self.spec.assets);
        if batch == 0 {
            return Ok(());
        }
        let states_need = (batch - 1) * path_stride + m * d;
        if states.len() < states_need
            || y.len() < batch * m
            || a.len() < batch * n * n
            || b.len() < batch * n
            || counts.len() < batch
            || payoff.len() < batch * m
        {
            return Err(GpuError::Invalid(format!(
                "regression build of {batch}: states {} (need {states_need}), y {}, a {}, b {}, counts {}, payoff {}",
                states.len(),
                y.len(),
                a.len(),
                b.len(),
                counts.len(),
                payoff.len()
            )));
        }
        let g = self.launch.regressions_per_block;
        let grid = batch.div_ceil(g);
        if grid > i32::MAX as usize || m > i32::MAX as usize {
            return Err(GpuError::Invalid(format!(
                "batch {batch} too large for one launch"
            )));
        }
        let (stride_arg, batch_arg, m_arg, d_arg) =
            (path_stride as i64, batch as i64, m as i32, d as i32);
        let put = i32::from(self.spec.payoff.kind == GpuOptionKind::Put);
        let itm = i32::from(self.spec.itm_only);
        let strike = self.spec.payoff.strike;
        let mut l = self.stream.launch_builder(&self.function);
        l.arg(states)
            .arg(&stride_arg)
            .arg(y)
            .arg(a)
            .arg(b)
            .arg(counts)
            .arg(payoff)
            .arg(&batch_arg)
            .arg(&m_arg)
            .arg(&d_arg)
            .arg(&self.chain_asset)
            .arg(&self.chain_inv)
            .arg(&self.payoff_kind)
            .arg(&put)
            .arg(&strike)
            .arg(&self.under_asset)
            .arg(&self.under_weight)
            .arg(&self.under_len)
            .arg(&itm);
        let null = 0u64;
        match active {
            Some(v) => l.arg(v),
            None => l.arg(&null),
        };
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (self.launch.block_threads, 1, 1),
            shared_mem_bytes: self.launch.shared_bytes as u32,
        };
        // SAFETY: the argument list matches `regression_build_{f32,f64}` in
        // regression.cu, compiled for `T` (const double*, long long, const double*,
        // real*, real*, unsigned*, double*, long long, int, int, const int*, const
        // double*, int, int, double, const int*, const double*, int, int, const unsigned
        // char* (active: `batch` bytes, checked, or a null pointer)). Every buffer
        // was checked above to hold what the kernel indexes for `batch` regressions
        // (states up to (batch-1)*path_stride + m*d doubles, read as 2*m*d words per
        // block, y batch*m, a batch*n*n, b batch*n, counts batch, payoff batch*m);
        // the tables were uploaded with the lengths compiled in (N*DEG) or passed (nu);
        // the block size and dynamic shared memory are the ones the kernel was compiled
        // and sized for (THREADS, `shared`). Outputs are written only, inputs read only.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_and_quadratic_tables() {
        let b = BasisTables::monomials(1, &[0, 2], &[2.0, 1.0, 4.0]);
        assert_eq!(b.len(), 3);
        let (asset, inv, deg) = b.chains();
        assert_eq!(deg, 1);
        assert_eq!(asset, vec![-1, 0, 2]);
        assert_eq!(inv, vec![0.0, 0.5, 0.25]);
        let q = BasisTables::monomials(2, &[0, 1], &[1.0, 1.0]);
        // 1, x0, x1, x0^2, x0 x1, x1^2
        let (asset, _, deg) = q.chains();
        assert_eq!(deg, 2);
        assert_eq!(asset, vec![-1, -1, 0, -1, 1, -1, 0, 0, 0, 1, 1, 1]);
        assert_eq!(tiles(30), 36);
        assert_eq!(tiles(3), 1);
    }

    #[test]
    fn source_defines() {
        let put = GpuPayoff {
            underlying: GpuUnderlying::Max(vec![0, 1, 2]),
            kind: GpuOptionKind::Put,
            strike: 1.0,
        };
        let src = regression_source(false, 30, 1, (6, 16, 3), (true, false), &put, 29);
        assert!(src.starts_with(
            "#define REAL_F64 0\n#define N 30\n#define DEG 1\n#define G 6\n#define P 16\n#define STAGES 3\n#define THREADS 320\n#define MIN_BLOCKS 2\n#define USE_FMA 1\n#define TILE_PREFETCH 0\n#define D 29\n"
        ));
    }

    #[test]
    fn payoffs() {
        let s = [1.0, 3.0, 2.0];
        let put = |u| GpuPayoff {
            underlying: u,
            kind: GpuOptionKind::Put,
            strike: 2.5,
        };
        assert_eq!(put(GpuUnderlying::Asset(0)).value(&s), 1.5);
        assert_eq!(put(GpuUnderlying::Max(vec![0, 2])).value(&s), 0.5);
        assert_eq!(
            put(GpuUnderlying::Basket(vec![(1, 0.5), (2, 0.25)])).value(&s),
            0.5
        );
    }

    /// Compiles the kernel for a few shapes (needs libnvrtc, no GPU: ignored on CI).
    #[test]
    #[ignore = "needs NVRTC (libnvrtc)"]
    fn regression_kernel_compiles() {
        crate::cuda::assert_nvrtc_present();
        let payoffs = [
            GpuUnderlying::Asset(0),
            GpuUnderlying::Basket(vec![(0, 0.5), (1, 0.25)]),
            GpuUnderlying::Max(vec![0, 1, 0]),
        ]
        .map(|underlying| GpuPayoff {
            underlying,
            kind: GpuOptionKind::Call,
            strike: 1.0,
        });
        for (case, (n, deg, g, p, st)) in [
            (30, 1, 8, 16, 3),
            (10, 2, 32, 16, 2),
            (64, 1, 1, 32, 4),
            (1, 1, 4, 8, 3),
            (2, 1, 3, 1, 8),
        ]
        .into_iter()
        .enumerate()
        {
            let payoff = &payoffs[case % payoffs.len()];
            // With and without the payoff plane (the define GpuRegression::new prepends).
            for plane in ["", "#define PAYOFF_PLANE 1\n"] {
                for f64 in [false, true] {
                    for fma in [false, true] {
                        let src = plane.to_string()
                            + &regression_source(f64, n, deg, (g, p, st), (fma, fma), payoff, 5);
                        if let Err(e) = compile_cubin(&src, "regression.cu", "sm_90") {
                            panic!("{plane}{e}");
                        }
                    }
                }
                if tensor_cores_fit(n, deg) {
                    for k in [4, tensor_core_step(n, deg, 9)] {
                        let src = plane.to_string()
                            + &regression_source_tensor_cores(
                                n,
                                deg,
                                (g.min(32), st, 1, k),
                                payoff,
                                5,
                            );
                        if let Err(e) = compile_cubin(&src, "regression.cu", "sm_90") {
                            panic!("{plane}tensor cores n={n} step {k}: {e}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tensor_core_fit() {
        assert!(tensor_cores_fit(30, 1));
        assert!(tensor_cores_fit(31, 4));
        assert!(tensor_cores_fit(39, 2));
        assert!(!tensor_cores_fit(31, 5));
        assert!(!tensor_cores_fit(39, 3));
        assert!(!tensor_cores_fit(47, 1));
        assert!(!tensor_cores_fit(64, 1));
        // 8 paths per step on sm_90 where its 16 x 8 blocks fit: n = 30 (NB = 4: 6
        // blocks), n = 21 (NB = 3: 5); n = 39 (NB = 5: 11 blocks) keeps 4.
        assert_eq!(tensor_core_step(30, 1, 9), 8);
        assert_eq!(tensor_core_step(21, 2, 9), 8);
        assert_eq!(tensor_core_step(30, 1, 8), 4);
        assert_eq!(tensor_core_step(39, 2, 9), 4);
        let put = GpuPayoff {
            underlying: GpuUnderlying::Asset(0),
            kind: GpuOptionKind::Put,
            strike: 1.0,
        };
        let src = regression_source_tensor_cores(30, 1, (5, 2, 3, 8), &put, 29);
        assert!(src.starts_with("#define REAL_F64 1\n#define N 30\n#define DEG 1\n#define W 5\n"));
        assert!(src.contains("#define THREADS 160\n#define MIN_BLOCKS 3\n"));
        assert!(src.contains("#define TENSOR_CORES 1\n"));
    }
}
