//! Kernels of the nested Monte Carlo engine on the GPU (`cuda/engine.cu`): cash flows at
//! maturity, European values, the Longstaff–Schwartz exercise update (fallback means and
//! the next step's discounted cash flows fused in), the selection of the systems to
//! solve, per-step solver statistics, position values at the exposure dates, and the
//! exposure statistics (EE, EPE, ENE, the PFE order statistics, CVA and `V_0` with their
//! standard errors). With [`super::paths`], [`super::regression`] and [`super::solver`]
//! they make the application's GPU engine.
//!
//! Arithmetic follows the CPU engine operation by operation (`--fmad=false`, sums over
//! inner paths in path order from zero), so results differ from the CPU's only through
//! CUDA's transcendental functions in the paths and, where a solver takes another
//! branch, through the solves. The exposure statistics sum over outer paths in another
//! (fixed) order than `exposure::estimate`, so they agree with it to rounding; the PFE
//! order statistics are exact.
//!
//! Inner states are read as a view at one date with element `(l, mm, i)` at
//! `states[l * stride + mm * d + i]`; cash flows `(l, mm)` at `cash[l * m + mm]`; outer
//! states `(l, k, i)` at `outer[l * outer_stride + k * d + i]`. The per-outer-path
//! kernels run one warp per outer path over tiles of 32 inner paths staged in shared
//! memory with coalesced loads; the exercise update by default runs as a stream of such
//! tiles over ranges of outer paths on a few warps per SM.

use super::module::compile_cubin;
use super::regression::{BasisTables, GpuOptionKind, GpuPayoff, GpuUnderlying};
use super::solver::{GpuReal, GpuReport};
use super::GpuError;
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The CUDA driver API of `cudarc` used by these launchers (device buffers, views,
/// streams, errors), re-exported for callers that own the buffers.
pub use cudarc::driver;

const ENGINE_CU: &str = include_str!("../../cuda/engine.cu");

/// Threads per block of every engine kernel.
const BLOCK: u32 = 256;

/// The full CUDA source of the engine module (no defines): `prelude.cu` and
/// `engine.cu`, the embedded copies or those in the directory `CVA_CUDA_SOURCE_DIR` names
/// when that is set (the development hook of [`super::module`]).
pub fn engine_source() -> String {
    super::module::prelude_source() + &super::module::source_file("engine.cu", ENGINE_CU)
}

fn grid(threads: usize) -> Result<LaunchConfig, GpuError> {
    let blocks = threads.div_ceil(BLOCK as usize);
    if blocks > i32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "{threads} threads in one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (blocks.max(1) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A payoff on the device: kind code, call/put, strike and the (asset, weight) table.
#[derive(Debug)]
pub struct DevicePayoff {
    kind: i32,
    put: i32,
    strike: f64,
    assets: CudaSlice<i32>,
    weights: CudaSlice<f64>,
    len: i32,
    /// One past the largest asset index read.
    max_asset: usize,
}

impl DevicePayoff {
    /// Uploads `payoff`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for an empty underlying, driver errors.
    pub fn new(stream: &Arc<CudaStream>, payoff: &GpuPayoff) -> Result<Self, GpuError> {
        let (kind, assets, weights): (i32, Vec<i32>, Vec<f64>) = match &payoff.underlying {
            GpuUnderlying::Asset(i) => (0, vec![*i as i32], vec![1.0]),
            GpuUnderlying::Basket(w) => (
                1,
                w.iter().map(|&(i, _)| i as i32).collect(),
                w.iter().map(|&(_, x)| x).collect(),
            ),
            GpuUnderlying::Max(v) => (2, v.iter().map(|&i| i as i32).collect(), vec![0.0; v.len()]),
        };
        if assets.is_empty() {
            return Err(GpuError::Invalid("payoff on no asset".into()));
        }
        let max_asset = assets.iter().map(|&a| a as usize).max().unwrap_or(0) + 1;
        Ok(Self {
            kind,
            put: i32::from(payoff.kind == GpuOptionKind::Put),
            strike: payoff.strike,
            len: assets.len() as i32,
            assets: stream.clone_htod(&assets)?,
            weights: stream.clone_htod(&weights)?,
            max_asset,
        })
    }
}

/// A regression basis on the device, as the exercise kernel reads it: for basis function
/// `k >= 1`, its parent and the market asset and `1 / S_0` of its new variable.
#[derive(Debug)]
pub struct DeviceBasis {
    n: usize,
    parent: CudaSlice<i32>,
    var_asset: CudaSlice<i32>,
    var_inv: CudaSlice<f64>,
    max_asset: usize,
    /// Every parent is the constant function (degree <= 1: `psi_k = x_{var[k]}`).
    flat: bool,
}

impl DeviceBasis {
    /// Uploads `basis`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for a basis outside `1..=64` functions, driver errors.
    pub fn new(stream: &Arc<CudaStream>, basis: &BasisTables) -> Result<Self, GpuError> {
        let n = basis.len();
        if n == 0 || n > crate::MAX_N {
            return Err(GpuError::Invalid(format!(
                "basis size {n} outside 1..={}",
                crate::MAX_N
            )));
        }
        let parent: Vec<i32> = basis.parent.iter().map(|&p| p as i32).collect();
        let var_asset: Vec<i32> = basis.var.iter().map(|&v| basis.assets[v] as i32).collect();
        let var_inv: Vec<f64> = basis.var.iter().map(|&v| basis.inv_spot[v]).collect();
        Ok(Self {
            n,
            parent: stream.clone_htod(&parent)?,
            var_asset: stream.clone_htod(&var_asset)?,
            var_inv: stream.clone_htod(&var_inv)?,
            max_asset: basis.assets.iter().max().map_or(0, |&a| a + 1),
            flat: basis.parent.iter().all(|&p| p == 0),
        })
    }

    /// Number of basis functions `n`.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// Inner states of `c` outer paths at one date: outer path `l` owns the block of `m * d`
/// doubles at `l * stride`, held as two planes of 32-bit words (the high words of
/// element `(mm, i)` at word `mm * d + i` of the block, the low words `m * d` words
/// further: [`super::paths::states_to_planes`]), as the path kernels store them.
#[derive(Debug, Clone, Copy)]
pub struct StateView<'a, 'b> {
    pub states: &'a CudaView<'b, f64>,
    pub stride: usize,
    /// Outer paths.
    pub c: usize,
    /// Inner paths per outer path.
    pub m: usize,
    /// Assets per state.
    pub d: usize,
}

impl StateView<'_, '_> {
    fn check(&self, payoff_assets: usize) -> Result<(), GpuError> {
        if self.c == 0 || self.m == 0 {
            return Ok(());
        }
        let need = (self.c - 1) * self.stride + self.m * self.d;
        if self.states.len() < need || payoff_assets > self.d {
            return Err(GpuError::Invalid(format!(
                "inner states: {} elements (need {need}), assets {} (need {payoff_assets})",
                self.states.len(),
                self.d
            )));
        }
        if self.m > i32::MAX as usize || self.d > i32::MAX as usize {
            return Err(GpuError::Invalid("too many inner paths or assets".into()));
        }
        Ok(())
    }
}

/// Shared memory a block of the warp-per-outer-path kernels may use.
const MAX_SHARED_BYTES: usize = 48 * 1024;

/// Threads per block of the exposure statistics kernels (`ENGINE_STATS_THREADS`).
const STATS_THREADS: u32 = 256;
/// Blocks per date of the statistics sums and of the radix select histograms, and
/// blocks of the Welford pass: fixed, so that the summation order (and the result) does
/// not depend on the device.
const STATS_BLOCKS: u32 = 120;

/// Most tile buffers per warp: 2, or `CVA_GPU_ENGINE_TILE_BUFFERS` (1 or 2; a timing
/// override).
fn tile_buffers_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("CVA_GPU_ENGINE_TILE_BUFFERS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(2, |v| v.clamp(1, 2))
    })
}

/// Geometry of the streaming exercise kernel (`engine_exercise_stream_*`): blocks per
/// multiprocessor (0: the kernel is not used), warps per block, tile buffers per warp.
#[derive(Debug, Clone, Copy)]
struct ExerciseStream {
    blocks_per_sm: usize,
    warps: usize,
    bufs: usize,
}

/// The default: 2 blocks of 8 warps per SM, 2 buffers per warp (16 warps and about 140 KB
/// of shared memory per SM at basket29). Measured on an H200 (benches/RESULTS.md,
/// thirty-fourth session, calls 5-6: basket29 f64, with the chunk buffers' allocation and
/// release out of the run): 100k 0.357-0.362 s against 0.363-0.368 with 2 blocks of 4
/// warps (the eighth session's choice), 1M 3.758 against 3.817 s; the exercise alone
/// 0.057 against 0.074 s. 4 blocks of 4 warps ran the same; 12 (2,6,2) about the same at
/// 100k; 20 and 24 warps no better; 3 buffers, or one warp per outer path (`0`, 0.42 s),
/// slower.
const EXERCISE_STREAM_DEFAULT: ExerciseStream = ExerciseStream {
    blocks_per_sm: 2,
    warps: 8,
    bufs: 2,
};

/// The streaming exercise kernel's geometry: the default, or
/// `CVA_GPU_EXERCISE_STREAM=<blocks per SM>[,<warps per block>[,<buffers per warp>]]`
/// (development switch; `0`: the warp-per-outer-path kernel `engine_exercise_*`).
fn exercise_stream() -> ExerciseStream {
    static S: std::sync::OnceLock<ExerciseStream> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        let Ok(var) = std::env::var("CVA_GPU_EXERCISE_STREAM") else {
            return EXERCISE_STREAM_DEFAULT;
        };
        let v: Vec<usize> = var
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect();
        let d = EXERCISE_STREAM_DEFAULT;
        ExerciseStream {
            blocks_per_sm: v.first().copied().unwrap_or(d.blocks_per_sm).min(8),
            warps: v.get(1).copied().unwrap_or(d.warps).clamp(1, 16),
            bufs: v.get(2).copied().unwrap_or(d.bufs).clamp(2, 8),
        }
    })
}

/// Launch geometry of a warp-per-outer-path kernel with `extra` scratch doubles per warp
/// besides its tile buffers of 32 inner paths (`32 * ds` doubles each, `ds = d | 1`):
/// two buffers where they fit (the next tile's copy in flight while the warp works on
/// the current one), else one, else none.
#[derive(Debug, Clone, Copy)]
struct WarpTiles {
    warps: usize,
    /// Row stride of the tile in shared memory.
    ds: i32,
    /// Doubles of one tile buffer; 0 where even one warp's single tile does not fit in
    /// shared memory (the rows are then read from global memory).
    tile: i32,
    /// Tile buffers per warp (0, 1 or 2).
    bufs: i32,
    /// Doubles of shared memory per warp (the buffers, then `extra` rounded up to even,
    /// so that every warp's share starts 16-byte aligned).
    per_warp: i32,
}

impl WarpTiles {
    fn new(d: usize, extra: usize) -> Self {
        let ds = d | 1;
        let extra = extra.next_multiple_of(2);
        let tile = 32 * ds;
        for bufs in [2, 1].into_iter().filter(|&b| b <= tile_buffers_limit()) {
            let staged = (bufs * tile + extra) * 8;
            if staged <= MAX_SHARED_BYTES {
                return Self {
                    warps: (MAX_SHARED_BYTES / staged).clamp(1, 4),
                    ds: ds as i32,
                    tile: tile as i32,
                    bufs: bufs as i32,
                    per_warp: (bufs * tile + extra) as i32,
                };
            }
        }
        Self {
            warps: 4,
            ds: ds as i32,
            tile: 0,
            bufs: 0,
            per_warp: extra as i32,
        }
    }

    /// One warp per outer path, `c` outer paths.
    fn config(&self, c: usize) -> Result<LaunchConfig, GpuError> {
        let blocks = c.div_ceil(self.warps);
        if blocks > i32::MAX as usize {
            return Err(GpuError::Invalid(format!("{c} outer paths in one launch")));
        }
        Ok(LaunchConfig {
            grid_dim: (blocks.max(1) as u32, 1, 1),
            block_dim: (32 * self.warps as u32, 1, 1),
            shared_mem_bytes: (self.warps * self.per_warp as usize * 8) as u32,
        })
    }
}

/// Counts of one regression step as the device writes them (`engine_step_summary`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepRecord {
    /// Selected systems (alive, `counts >= n`), all solved.
    pub systems: u64,
    /// Systems per [`crate::Method`] code.
    pub per_method: [u64; 3],
    /// Systems per [`crate::Status`] code.
    pub per_status: [u64; 4],
    pub discarded_eigenvalues: u64,
    /// Alive outer paths with `0 < counts < n`.
    pub too_few_paths: u64,
    /// Largest residual of the systems of status Ok (0 if none, NaN if one is NaN).
    pub max_residual: f64,
}

/// Words of one [`StepRecord`] on the device.
pub const STEP_RECORD_WORDS: usize = 12;

impl StepRecord {
    /// Decodes `STEP_RECORD_WORDS` words.
    pub fn from_words(w: &[u64]) -> Self {
        Self {
            systems: w[0],
            per_method: [w[1], w[2], w[3]],
            per_status: [w[4], w[5], w[6], w[7]],
            discarded_eigenvalues: w[8],
            too_few_paths: w[9],
            max_residual: if w[11] != 0 {
                f64::NAN
            } else {
                f64::from_bits(w[10])
            },
        }
    }
}

/// What [`EngineKernels::exposure_statistics`] brings back.
#[derive(Debug, Clone, PartialEq)]
pub struct ExposureSums {
    /// Per date: `(Σ P, Σ P^+, Σ P^-)` over the outer paths.
    pub sums: Vec<[f64; 3]>,
    /// Per date: the two requested order statistics of `P^+` (ascending ranks).
    pub order_statistics: Vec<[f64; 2]>,
    /// Welford state `(n, mean, M2)` of the CVA per outer path.
    pub cva: [f64; 3],
    /// Welford state `(n, mean, M2)` of `P_v`, `v` the `value_date` asked for.
    pub value: [f64; 3],
}

/// The compiled engine module on one stream.
#[derive(Debug)]
pub struct EngineKernels {
    stream: Arc<CudaStream>,
    cash_init: CudaFunction,
    european: CudaFunction,
    exercise_f64: CudaFunction,
    exercise_f32: CudaFunction,
    exercise_stream_f64: CudaFunction,
    exercise_stream_f32: CudaFunction,
    /// Multiprocessors and opt-in shared memory per block of the device.
    multiprocessors: usize,
    shared_optin: usize,
    select_f64: CudaFunction,
    select_f32: CudaFunction,
    step_summary: CudaFunction,
    american_value: CudaFunction,
    pay_maturing: CudaFunction,
    stats_sums: CudaFunction,
    stats_sums_final: CudaFunction,
    stats_welford: CudaFunction,
    stats_welford_final: CudaFunction,
    select_histogram: CudaFunction,
    select_pick: CudaFunction,
}

/// Pushes the payoff arguments `(int kind, int put, double strike, const int* ua, const
/// double* uw, int nu)`.
fn payoff_args<'a>(l: &mut cudarc::driver::LaunchArgs<'a>, p: &'a DevicePayoff) {
    l.arg(&p.kind)
        .arg(&p.put)
        .arg(&p.strike)
        .arg(&p.assets)
        .arg(&p.weights)
        .arg(&p.len);
}

/// The arguments both exercise kernels take after the payoff's, from `itm_only` to the
/// discount table (`int, int, const int*, const int*, const double*, int, const real*,
/// const EngineReport*, const unsigned char*, const unsigned*, const double*`).
struct ExerciseInputs<'a, T: GpuReal> {
    itm: i32,
    n: i32,
    basis: &'a DeviceBasis,
    flat: i32,
    x: &'a CudaView<'a, T>,
    reports: &'a CudaView<'a, GpuReport>,
    alive: &'a CudaView<'a, u8>,
    counts: &'a CudaView<'a, u32>,
    discount: &'a CudaView<'a, f64>,
}

impl<'a, T: GpuReal> ExerciseInputs<'a, T> {
    fn push(&'a self, l: &mut cudarc::driver::LaunchArgs<'a>) {
        l.arg(&self.itm)
            .arg(&self.n)
            .arg(&self.basis.parent)
            .arg(&self.basis.var_asset)
            .arg(&self.basis.var_inv)
            .arg(&self.flat)
            .arg(self.x)
            .arg(self.reports)
            .arg(self.alive)
            .arg(self.counts)
            .arg(self.discount);
    }
}

/// The leading arguments of the warp-per-outer-path kernels (`engine_cash_init`,
/// `engine_european`, `engine_exercise_*`), as the kernels take them.
struct TileArgs {
    stride: i64,
    c: i64,
    m: i32,
    d: i32,
    g: WarpTiles,
}

impl TileArgs {
    /// For `view`, with `extra` scratch doubles per warp besides the tiles.
    fn new(view: &StateView, extra: usize) -> Self {
        Self {
            stride: view.stride as i64,
            c: view.c as i64,
            m: view.m as i32,
            d: view.d as i32,
            g: WarpTiles::new(view.d, extra),
        }
    }

    /// Pushes `states, stride, c, m, d, ds, tile, bufs, per_warp`, then the payoff's
    /// arguments (`payoff_args`).
    fn push<'a>(
        &'a self,
        l: &mut cudarc::driver::LaunchArgs<'a>,
        states: &'a CudaView<'_, f64>,
        payoff: &'a DevicePayoff,
    ) {
        l.arg(states)
            .arg(&self.stride)
            .arg(&self.c)
            .arg(&self.m)
            .arg(&self.d)
            .arg(&self.g.ds)
            .arg(&self.g.tile)
            .arg(&self.g.bufs)
            .arg(&self.g.per_warp);
        payoff_args(l, payoff);
    }
}

impl EngineKernels {
    /// Compiles `cuda/engine.cu` for the stream's device.
    ///
    /// # Errors
    /// Compile and driver errors.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, GpuError> {
        let ctx = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        let source = format!(
            "#define ENGINE_STREAM_BUFS {}\n{}",
            exercise_stream().bufs,
            engine_source()
        );
        let cubin = compile_cubin(&source, "engine.cu", &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        let attr = |a| -> Result<usize, GpuError> { Ok(ctx.attribute(a)?.max(0) as usize) };
        Ok(Self {
            stream: stream.clone(),
            cash_init: module.load_function("engine_cash_init")?,
            european: module.load_function("engine_european")?,
            exercise_f64: module.load_function("engine_exercise_f64")?,
            exercise_f32: module.load_function("engine_exercise_f32")?,
            exercise_stream_f64: module.load_function("engine_exercise_stream_f64")?,
            exercise_stream_f32: module.load_function("engine_exercise_stream_f32")?,
            multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            shared_optin: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?,
            select_f64: module.load_function("engine_select_f64")?,
            select_f32: module.load_function("engine_select_f32")?,
            step_summary: module.load_function("engine_step_summary")?,
            american_value: module.load_function("engine_american_value")?,
            pay_maturing: module.load_function("engine_pay_maturing")?,
            stats_sums: module.load_function("engine_stats_sums")?,
            stats_sums_final: module.load_function("engine_stats_sums_final")?,
            stats_welford: module.load_function("engine_stats_welford")?,
            stats_welford_final: module.load_function("engine_stats_welford_final")?,
            select_histogram: module.load_function("engine_select_histogram")?,
            select_pick: module.load_function("engine_select_pick")?,
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// `cash[l * m + mm] = payoff(state(l, mm))`, `cash_date = date`; with
    /// `next_date = Some(j)` also `y = cash * discount[date - j]` (the first regression
    /// step's discounted cash flows). `discount[s] = e^{-r s dt}` must cover `date - j`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn cash_init(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        date: u32,
        next_date: Option<u32>,
        discount: &CudaView<f64>,
        cash: &mut CudaViewMut<f64>,
        cash_date: &mut CudaViewMut<u32>,
        y: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset)?;
        let total = view.c * view.m;
        let next = next_date.map_or(-1, |j| j as i32);
        if cash.len() < total
            || cash_date.len() < total
            || y.len() < total
            || next_date.is_some_and(|j| j > date || (date - j) as usize >= discount.len())
        {
            return Err(GpuError::Invalid("cash init: buffer too short".into()));
        }
        if total == 0 {
            return Ok(());
        }
        let t = TileArgs::new(&view, 0);
        let mut l = self.stream.launch_builder(&self.cash_init);
        t.push(&mut l, view.states, payoff);
        l.arg(&date)
            .arg(&next)
            .arg(discount)
            .arg(cash)
            .arg(cash_date)
            .arg(y);
        // SAFETY: the arguments match `engine_cash_init` in engine.cu (const double*,
        // long long, long long, int, int, int, int, int, int, int, int, double, const
        // int*, const double*, int, unsigned, int, const double*, double*, unsigned*,
        // double*).
        // The states hold (c-1)*stride + m*d elements and every payoff asset index is
        // < d (`view.check`); the payoff tables hold `len` entries; cash, cash_date and y
        // hold c*m (checked); discount covers date - next_date (checked); the shared
        // memory is warps * per_warp doubles, each warp's share holding its `bufs` tile
        // buffers of 32 * ds doubles (16-byte aligned: per_warp is even); warps >= c
        // return first.
        unsafe { l.launch(t.g.config(view.c)?) }?;
        Ok(())
    }

    /// Where `alive[l]`: `values[l] += q * df * (Σ_mm payoff(state(l, mm))) / m`, the
    /// sum in path order (a European position at its maturity date, the view's date).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn european(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        alive: &CudaView<u8>,
        (q, df): (f64, f64),
        values: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset)?;
        if alive.len() < view.c || values.len() < view.c {
            return Err(GpuError::Invalid("european: buffer too short".into()));
        }
        if view.c == 0 || view.m == 0 {
            return Ok(());
        }
        let t = TileArgs::new(&view, 0);
        let mut l = self.stream.launch_builder(&self.european);
        t.push(&mut l, view.states, payoff);
        l.arg(alive).arg(&q).arg(&df).arg(values);
        // SAFETY: the arguments match `engine_european` (const double*, long long, long
        // long, int, int, int, int, int, int, int, int, double, const int*, const
        // double*, int, const unsigned char*, double, double, double*); states and payoff as
        // checked by `view.check`, alive and values hold c (checked); shared memory as
        // in `cash_init`; warps >= c return first.
        unsafe { l.launch(t.g.config(view.c)?) }?;
        Ok(())
    }

    /// The exercise update at exercise date `date` (see `engine_exercise_impl` in
    /// `engine.cu`): the coefficients of outer path `l` are `x[l * n ..]` (precision `T`)
    /// where it is alive with `counts >= n` and `reports[l]` says Ok; otherwise, where it
    /// is alive with `counts > 0`, the continuation is the mean of `y` over its
    /// regression paths. With `next_date = Some(j)`, `y` is then overwritten with the
    /// discounted cash flows at `j` (the next step's input). `payoffs` (`c * m`) holds
    /// the payoff of every inner path at `l * m + mm`, as the regression build of this
    /// date stored it ([`super::regression::GpuRegression::build`]).
    ///
    /// Runs the streaming kernel `engine_exercise_stream_*` (a grid of a few blocks per
    /// SM whose warps stream the tiles of a range of outer paths, so that the path kernel
    /// on the other stream keeps most of each SM) where its shared memory fits, else the
    /// warp-per-outer-path kernel; both give the same bits. The basis reads the states'
    /// high words alone ([`crate::basis::high_word`]): both kernels read those and
    /// `payoffs` (the other kernel copies both planes of its tiles).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn exercise<T: GpuReal>(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        itm_only: bool,
        basis: &DeviceBasis,
        x: &CudaView<T>,
        reports: &CudaView<GpuReport>,
        alive: &CudaView<u8>,
        counts: &CudaView<u32>,
        payoffs: &CudaView<f64>,
        discount: &CudaView<f64>,
        (date, next_date): (u32, Option<u32>),
        y: &mut CudaViewMut<f64>,
        cash: &mut CudaViewMut<f64>,
        cash_date: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset.max(basis.max_asset))?;
        let (c, m, n) = (view.c, view.m, basis.n);
        if x.len() < c * n
            || payoffs.len() < c * m
            || reports.len() < c
            || alive.len() < c
            || counts.len() < c
            || y.len() < c * m
            || cash.len() < c * m
            || cash_date.len() < c * m
            || next_date.is_some_and(|j| j > date)
        {
            return Err(GpuError::Invalid("exercise: buffer too short".into()));
        }
        if c == 0 || m == 0 {
            return Ok(());
        }
        let next = next_date.map_or(-1, |j| j as i32);
        let inputs = ExerciseInputs {
            itm: i32::from(itm_only),
            n: n as i32,
            basis,
            flat: i32::from(basis.flat),
            x,
            reports,
            alive,
            counts,
            discount,
        };
        if let Some(cfg) = self.exercise_stream_config(&view, n, discount.len())? {
            let (stride, c64, m32, d32) = (view.stride as i64, c as i64, m as i32, view.d as i32);
            let ds = (view.d | 1) as i32;
            let n_discount = discount.len() as i32;
            let f = if T::IS_F64 {
                &self.exercise_stream_f64
            } else {
                &self.exercise_stream_f32
            };
            let mut l = self.stream.launch_builder(f);
            l.arg(view.states)
                .arg(&stride)
                .arg(&c64)
                .arg(&m32)
                .arg(&d32)
                .arg(&ds);
            inputs.push(&mut l);
            l.arg(&n_discount)
                .arg(&date)
                .arg(&next)
                .arg(y)
                .arg(cash)
                .arg(cash_date)
                .arg(payoffs);
            // SAFETY: the arguments match `engine_exercise_stream_{f64,f32}` for `T` (const
            // double*, long long, long long, int, int, int, then int, int, const int*,
            // const int*, const double*, int, const real*, const
            // EngineReport*, const unsigned char*, const unsigned*, const double*, int,
            // unsigned, int, double*, double*, unsigned*, const double*), checked as for
            // the kernel below (payoffs holds c*m, checked); the discount table
            // (n_discount entries) and the basis tables are copied into the shared memory
            // `exercise_stream_config` sized, with the warps' slots after them.
            unsafe { l.launch(cfg) }?;
            return Ok(());
        }
        let t = TileArgs::new(&view, n);
        let f = if T::IS_F64 {
            &self.exercise_f64
        } else {
            &self.exercise_f32
        };
        let mut l = self.stream.launch_builder(f);
        t.push(&mut l, view.states, payoff);
        inputs.push(&mut l);
        l.arg(&date)
            .arg(&next)
            .arg(y)
            .arg(cash)
            .arg(cash_date)
            .arg(payoffs);
        // SAFETY: the arguments match `engine_exercise_{f64,f32}` for `T` (const double*,
        // long long, long long, int, int, int, int, int, int, int, int, double, const int*,
        // const double*, int, int, int, const int*, const int*, const double*, int,
        // const real*, const EngineReport*, const unsigned char*, const unsigned*, const
        // double*, unsigned, int, double*, double*, unsigned*, const double*; payoffs
        // holds c*m, checked). States, payoff and basis
        // asset indices are checked by `view.check`; the basis tables hold n <= 64
        // entries (ENGINE_MAX_N, the local array; `DeviceBasis::new`); x holds c*n, the
        // per-path arrays c, y and the cash flows c*m elements (checked); GpuReport is
        // the 16-byte EngineReport; the cash dates lie in date..=maturity, and discount
        // covers every offset from next_date (the caller's contract, as for the
        // regression build); shared memory per warp is the tile buffers plus n doubles
        // of beta (`WarpTiles::new(d, n)`); warps >= c return first.
        unsafe { l.launch(t.g.config(c)?) }?;
        Ok(())
    }

    /// The launch of the streaming exercise kernel, or `None` where it is not switched on
    /// (`CVA_GPU_EXERCISE_STREAM`) or its shared memory would not fit.
    fn exercise_stream_config(
        &self,
        view: &StateView,
        n: usize,
        n_discount: usize,
    ) -> Result<Option<LaunchConfig>, GpuError> {
        let s = exercise_stream();
        if s.blocks_per_sm == 0 {
            return Ok(None);
        }
        let ds = view.d | 1;
        // Doubles: discount, var_inv; ints: var_asset, parent.
        let tables = (n_discount + 2 * n).next_multiple_of(2);
        // Per buffer: 32 rows of ds high words, then 32 payoffs, 32 cash flows, 32 dates.
        let per_warp = s.bufs * (16 * ds + 80) + n.next_multiple_of(2);
        let bytes = (tables + s.warps * per_warp) * 8;
        if bytes > self.shared_optin || n_discount > i32::MAX as usize {
            return Ok(None);
        }
        if bytes > 48 * 1024 {
            for f in [&self.exercise_stream_f64, &self.exercise_stream_f32] {
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )?;
            }
        }
        let blocks = (self.multiprocessors * s.blocks_per_sm)
            .min(view.c.div_ceil(s.warps))
            .max(1);
        Ok(Some(LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (32 * s.warps as u32, 1, 1),
            shared_mem_bytes: bytes as u32,
        }))
    }

    /// The systems `l < c` that are not solved (not `alive[l]`, or `counts[l] < n`)
    /// become `A = I`, `b = 0` in `a` (`c * n * n`, column-major) and `b` (`c * n`).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn select<T: GpuReal>(
        &self,
        n: usize,
        alive: &CudaView<u8>,
        counts: &CudaView<u32>,
        a: &mut CudaViewMut<T>,
        b: &mut CudaViewMut<T>,
    ) -> Result<(), GpuError> {
        let c = counts.len();
        if alive.len() < c || a.len() < c * n * n || b.len() < c * n || n > i32::MAX as usize {
            return Err(GpuError::Invalid("select: buffer too short".into()));
        }
        if c == 0 {
            return Ok(());
        }
        let (c_arg, n_arg) = (c as i64, n as i32);
        let f = if T::IS_F64 {
            &self.select_f64
        } else {
            &self.select_f32
        };
        let mut l = self.stream.launch_builder(f);
        l.arg(alive)
            .arg(counts)
            .arg(&c_arg)
            .arg(&n_arg)
            .arg(a)
            .arg(b);
        // SAFETY: the arguments match `engine_select_{f64,f32}` for `T` (const unsigned
        // char*, const unsigned*, long long, int, real*, real*); alive and counts hold c,
        // a c*n*n and b c*n elements (checked); one warp per system, warps >= c return
        // first.
        unsafe { l.launch(grid(32 * c)?) }?;
        Ok(())
    }

    /// Adds the counts of one regression step to `record` (`STEP_RECORD_WORDS` words,
    /// zeroed before the first call; see [`StepRecord`]) and writes `residual[l]`: the
    /// residual (as f32) of selected system `l`, NaN where it has none or is not selected
    /// (with `keep`, only the selected systems' entries are written: a second summary of
    /// the same step over other outer paths).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn step_summary(
        &self,
        n: usize,
        reports: &CudaView<GpuReport>,
        alive: &CudaView<u8>,
        counts: &CudaView<u32>,
        record: &mut CudaViewMut<u64>,
        residual: &mut CudaViewMut<f32>,
        keep: bool,
    ) -> Result<(), GpuError> {
        let c = counts.len();
        if reports.len() < c
            || alive.len() < c
            || residual.len() < c
            || record.len() < STEP_RECORD_WORDS
            || n > i32::MAX as usize
        {
            return Err(GpuError::Invalid("step summary: buffer too short".into()));
        }
        if c == 0 {
            return Ok(());
        }
        let (c_arg, n_arg, keep_arg) = (c as i64, n as i32, i32::from(keep));
        let mut l = self.stream.launch_builder(&self.step_summary);
        l.arg(reports)
            .arg(alive)
            .arg(counts)
            .arg(&c_arg)
            .arg(&n_arg)
            .arg(record)
            .arg(residual)
            .arg(&keep_arg);
        // SAFETY: the arguments match `engine_step_summary` (const EngineReport*, const
        // unsigned char*, const unsigned*, long long, int, unsigned long long*, float*,
        // int);
        // reports, alive, counts and residual hold c elements, record 12 words
        // (checked); blocks of 256 threads (>= 12, the record's writers); threads >= c
        // only take part in the block's reduction.
        unsafe { l.launch(grid(c)?) }?;
        Ok(())
    }

    /// The value at exposure date `date` of an American position (quantity `q`) on the
    /// outer paths where `alive[l]`: continuation `Σ_mm cash * discount[cash_date - date]
    /// / m` (path order), exercise where `allow_exercise` and the payoff at the outer
    /// state is positive and at least the continuation (then `alive[l] = 0` and
    /// `*exercises += 1`); `values[l] += q * value`. `outer` is the view of the outer
    /// states at `date`: `(l, i)` at `outer[l * outer_stride + i]`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn american_value(
        &self,
        (cash, cash_date): (&CudaView<f64>, &CudaView<u32>),
        discount: &CudaView<f64>,
        (date, m): (u32, usize),
        (outer, outer_stride, d): (&CudaView<f64>, usize, usize),
        payoff: &DevicePayoff,
        (q, allow_exercise): (f64, bool),
        alive: &mut CudaViewMut<u8>,
        values: &mut CudaViewMut<f64>,
        exercises: &mut CudaViewMut<u64>,
    ) -> Result<(), GpuError> {
        let c = values.len();
        if cash.len() < c * m
            || cash_date.len() < c * m
            || alive.len() < c
            || exercises.is_empty()
            || payoff.max_asset > d
            || (c > 0 && outer.len() < (c - 1) * outer_stride + d)
            || m > i32::MAX as usize
        {
            return Err(GpuError::Invalid("american value: buffer too short".into()));
        }
        if c == 0 || m == 0 {
            return Ok(());
        }
        let g = WarpTiles {
            warps: 8,
            ds: 1,
            tile: 0,
            bufs: 0,
            per_warp: 0,
        };
        let (c_arg, m_arg, os) = (c as i64, m as i32, outer_stride as i64);
        let allow = i32::from(allow_exercise);
        let mut l = self.stream.launch_builder(&self.american_value);
        l.arg(cash)
            .arg(cash_date)
            .arg(discount)
            .arg(&date)
            .arg(&c_arg)
            .arg(&m_arg)
            .arg(outer)
            .arg(&os);
        payoff_args(&mut l, payoff);
        l.arg(&q).arg(&allow).arg(alive).arg(values).arg(exercises);
        // SAFETY: the arguments match `engine_american_value` (const double*, const
        // unsigned*, const double*, unsigned, long long, int, const double*, long long,
        // int, int, double, const int*, const double*, int, double, int, unsigned char*,
        // double*, unsigned long long*); cash and cash_date hold c*m, alive and values c,
        // exercises 1 element, the outer view (c-1)*outer_stride + d with every payoff
        // asset < d (checked); discount covers the offsets of the cash dates from `date`
        // (the caller's contract); no shared memory; warps >= c return first.
        unsafe { l.launch(g.config(c)?) }?;
        Ok(())
    }

    /// A position (quantity `q`) maturing at the outer view's date: where `alive[l]`,
    /// `values[l] += q * payoff(outer state)`; then `alive[l] = 0` for every `l`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn pay_maturing(
        &self,
        (outer, outer_stride, d): (&CudaView<f64>, usize, usize),
        payoff: &DevicePayoff,
        q: f64,
        alive: &mut CudaViewMut<u8>,
        values: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        let c = values.len();
        if alive.len() < c
            || payoff.max_asset > d
            || (c > 0 && outer.len() < (c - 1) * outer_stride + d)
        {
            return Err(GpuError::Invalid("pay maturing: buffer too short".into()));
        }
        if c == 0 {
            return Ok(());
        }
        let (c_arg, os) = (c as i64, outer_stride as i64);
        let mut l = self.stream.launch_builder(&self.pay_maturing);
        l.arg(outer).arg(&os).arg(&c_arg);
        payoff_args(&mut l, payoff);
        l.arg(&q).arg(alive).arg(values);
        // SAFETY: the arguments match `engine_pay_maturing` (const double*, long long,
        // long long, int, int, double, const int*, const double*, int, double, unsigned
        // char*, double*); the outer view holds (c-1)*outer_stride + d with every payoff
        // asset < d, alive and values c elements (checked); threads >= c return first.
        unsafe { l.launch(grid(c)?) }?;
        Ok(())
    }

    /// Exposure statistics of `netted[k * m0 + l]`, `k < dates`, `l < m0`: per date the
    /// sums of `P`, `P^+`, `P^-` and the order statistics `ranks[k]` (0-based, ascending)
    /// of `P^+` (exact: radix select on the bits); the Welford states of the CVA per
    /// outer path `X_l = Σ_{k >= 1} lgd * df[k] * P_k^+ * dp[k]` and of `P_v`,
    /// `v = value_date` (the values the portfolio value at `t_0` is estimated from). Only
    /// these numbers are copied back.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for inconsistent lengths, `value_date >= dates` or `m0` above
    /// `u32::MAX`, driver errors.
    pub fn exposure_statistics(
        &self,
        netted: &CudaView<f64>,
        (m0, dates, value_date): (usize, usize, usize),
        (lgd, df, dp): (f64, &[f64], &[f64]),
        ranks: &[[u64; 2]],
    ) -> Result<ExposureSums, GpuError> {
        if m0 == 0
            || dates == 0
            || value_date >= dates
            || netted.len() < m0 * dates
            || df.len() != dates
            || dp.len() != dates
            || ranks.len() != dates
            || ranks.iter().flatten().any(|&r| r as usize >= m0)
            || m0 > u32::MAX as usize
            || dates > u16::MAX as usize
        {
            return Err(GpuError::Invalid(
                "exposure statistics: bad arguments".into(),
            ));
        }
        let s = &self.stream;
        let m0_arg = m0 as i64;
        let dates_arg = dates as i32;
        let per_date = LaunchConfig {
            grid_dim: (STATS_BLOCKS, dates as u32, 1),
            block_dim: (STATS_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let blocks_arg = STATS_BLOCKS as i32;

        // Sums.
        let mut partial = s.alloc_zeros::<f64>(STATS_BLOCKS as usize * dates * 3)?;
        let mut sums = s.alloc_zeros::<f64>(dates * 3)?;
        let mut l = s.launch_builder(&self.stats_sums);
        l.arg(netted).arg(&m0_arg).arg(&mut partial);
        // SAFETY: matches `engine_stats_sums` (const double*, long long, double*);
        // netted holds dates*m0 (checked), partial gridDim.x*dates*3; block size is
        // ENGINE_STATS_THREADS (the shared arrays' length).
        unsafe { l.launch(per_date) }?;
        let mut l = s.launch_builder(&self.stats_sums_final);
        l.arg(&partial)
            .arg(&blocks_arg)
            .arg(&dates_arg)
            .arg(&mut sums);
        // SAFETY: matches `engine_stats_sums_final` (const double*, int, int, double*);
        // partial holds blocks*dates*3 and sums dates*3; threads >= dates*3 return.
        unsafe { l.launch(grid(dates * 3)?) }?;

        // Welford states.
        let df_dev = s.clone_htod(df)?;
        let dp_dev = s.clone_htod(dp)?;
        let mut wpartial = s.alloc_zeros::<f64>(STATS_BLOCKS as usize * 6)?;
        let mut welford = s.alloc_zeros::<f64>(6)?;
        let value_date_arg = value_date as i32;
        let mut l = s.launch_builder(&self.stats_welford);
        l.arg(netted)
            .arg(&m0_arg)
            .arg(&dates_arg)
            .arg(&value_date_arg)
            .arg(&lgd)
            .arg(&df_dev)
            .arg(&dp_dev)
            .arg(&mut wpartial);
        // SAFETY: matches `engine_stats_welford` (const double*, long long, int, int,
        // double, const double*, const double*, double*); netted holds dates*m0 and
        // value_date < dates (checked), df and dp dates, wpartial blocks*6 doubles; block
        // size ENGINE_STATS_THREADS.
        unsafe {
            l.launch(LaunchConfig {
                grid_dim: (STATS_BLOCKS, 1, 1),
                block_dim: (STATS_THREADS, 1, 1),
                shared_mem_bytes: 0,
            })
        }?;
        let mut l = s.launch_builder(&self.stats_welford_final);
        l.arg(&wpartial).arg(&blocks_arg).arg(&mut welford);
        // SAFETY: matches `engine_stats_welford_final` (const double*, int, double*);
        // wpartial holds blocks*6, welford 6 doubles; one thread works.
        unsafe { l.launch(LaunchConfig::for_num_elems(1)) }?;

        // Order statistics of P^+: 8 passes of 8 bits.
        let state_h: Vec<u64> = ranks.iter().flat_map(|r| [0, 0, r[0], r[1]]).collect();
        let mut state = s.clone_htod(&state_h)?;
        let mut hist = s.alloc_zeros::<u32>(dates * 512)?;
        for pass in 0..8 {
            let shift = 56 - 8 * pass;
            let mask: u64 = if pass == 0 { 0 } else { !0u64 << (shift + 8) };
            let mut l = s.launch_builder(&self.select_histogram);
            l.arg(netted)
                .arg(&m0_arg)
                .arg(&state)
                .arg(&shift)
                .arg(&mask)
                .arg(&mut hist);
            // SAFETY: matches `engine_select_histogram` (const double*, long long, const
            // unsigned long long*, int, unsigned long long, unsigned*); netted holds
            // dates*m0, state dates*4 words, hist dates*512 (zeroed, and zeroed again by
            // every pick); gridDim.y = dates.
            unsafe { l.launch(per_date) }?;
            let mut l = s.launch_builder(&self.select_pick);
            l.arg(&mut state).arg(&mut hist).arg(&shift);
            // SAFETY: matches `engine_select_pick` (unsigned long long*, unsigned*, int);
            // one block per date, state dates*4 words, hist dates*512.
            unsafe {
                l.launch(LaunchConfig {
                    grid_dim: (dates as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
            }?;
        }
        let sums_h = s.clone_dtoh(&sums)?;
        let welford_h = s.clone_dtoh(&welford)?;
        let state_h = s.clone_dtoh(&state)?;
        Ok(ExposureSums {
            sums: sums_h.chunks(3).map(|c| [c[0], c[1], c[2]]).collect(),
            order_statistics: state_h
                .chunks(4)
                .map(|w| [f64::from_bits(w[0]), f64::from_bits(w[1])])
                .collect(),
            cva: [welford_h[0], welford_h[1], welford_h[2]],
            value: [welford_h[3], welford_h[4], welford_h[5]],
        })
    }
}

#[cfg(test)]
mod tests {
    /// Compiles the engine module (needs libnvrtc, no GPU: ignored on CI).
    #[test]
    #[ignore = "needs NVRTC (libnvrtc)"]
    fn engine_kernel_compiles() {
        crate::cuda::assert_nvrtc_present();
        if let Err(e) = super::compile_cubin(&super::engine_source(), "engine.cu", "sm_90") {
            panic!("{e}");
        }
    }
}
