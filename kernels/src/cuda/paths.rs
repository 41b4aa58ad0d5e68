//! Path generation on the GPU with the CPU engine's random numbers and dynamics
//! (`cuda/paths.cu`): Philox4x32-10 keyed by the 64-bit seed, counter
//! `[block, inner_path, date, outer_path]` (`inner_path = u32::MAX` for an outer path),
//! Box–Muller in single precision on the words (the CPU's `rng::box_muller`), four normals
//! per Philox block, and the exact GBM step `S_i <- S_i exp(drift_i + vol_i (C z)_i)`.
//!
//! Raw Philox words and normals are bitwise those of the CPU (Box–Muller uses only
//! IEEE-rounded f32 `+`, `*`, fused multiply-add and square root); states differ from the
//! CPU's only through `exp` (the kernels' own branch-free version, within an ulp of the
//! CPU's libm), the rest of the arithmetic being rounded identically (`--fmad=false`,
//! IEEE division and square root).
//!
//! With [`PathsOptions::antithetic`] the inner paths come in antithetic pairs (the CPU
//! engine's `simulation.antithetic`): inner path `2j + 1` is driven by the negated normals
//! of inner path `2j`'s stream.
//!
//! Markets of at most [`FIXED_MAX_ASSETS`] assets with finite parameters get kernels
//! compiled for them (`inner_paths_fixed`, `outer_paths_fixed`): `d`, the drifts, the
//! volatilities and the correlation factor are constants of the module, the step is
//! unrolled over the assets, and the states leave through coalesced block-wide copies.
//! They do the generic kernels' operations in the same order, so their results are the
//! same bits.
//!
//! Layouts (`f64` buffers, row-major):
//! - outer paths: `out[(l * (steps + 1) + k) * d + i]`, `k = 0` the spots;
//! - inner paths from the states at exposure date `k`: the block of `inner * d` doubles at
//!   `out[(l * steps + s) * inner * d ..]` holds the states of outer path `l` at date
//!   `k + 1 + s` (the place of the CPU engine's `[l][s][mm][i]`), as two planes of 32-bit
//!   words: word `mm * d + i` of the block is the high word (sign, exponent, top 20 bits
//!   of the significand) of asset `i` of inner path `mm`, word `inner * d + mm * d + i`
//!   its low word. The regression basis reads the high words alone
//!   ([`crate::basis::high_word`]); the regression build reads the low words too, for the
//!   payoffs it stores, and the exercise update reads the high words and those payoffs
//!   ([`states_to_planes`] and [`planes_to_states`] convert on the host). With the payoff
//!   plane ([`PathsOptions::payoff_plane`]) the low words are not stored: words
//!   `inner * d + 2 mm` and `+ 1` of the block hold the payoff of inner path `mm` (a
//!   double), and the regression build reads that instead.

use super::module::{compile_cubin, source_file};
use super::regression::{GpuPayoff, GpuUnderlying};
use super::GpuError;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The two-plane form of inner states (module doc): each block of `block` doubles of
/// `states` (one outer path at one date, `block = inner * d`) becomes its `block` high
/// words followed by its `block` low words, in the same `8 * block` bytes (words in
/// device order, little-endian: the low half of a double is its first word). The
/// doubles are carried by their bits.
///
/// # Panics
/// If `block` is 0 or does not divide `states.len()`.
pub fn states_to_planes(states: &[f64], block: usize) -> Vec<f64> {
    assert!(
        block > 0 && states.len().is_multiple_of(block),
        "states: blocks of {block}"
    );
    let mut out = Vec::with_capacity(states.len());
    let mut words = vec![0u32; 2 * block];
    for b in states.chunks_exact(block) {
        for (e, x) in b.iter().enumerate() {
            let bits = x.to_bits();
            words[e] = (bits >> 32) as u32;
            words[block + e] = bits as u32;
        }
        push_words(&mut out, &words);
    }
    out
}

/// Appends `words` (an even count) to `out` as the doubles that hold them in memory: word
/// `2 k` the low half of double `k`, word `2 k + 1` its high half (little-endian).
fn push_words(out: &mut Vec<f64>, words: &[u32]) {
    out.extend(
        words
            .chunks_exact(2)
            .map(|w| f64::from_bits(u64::from(w[1]) << 32 | u64::from(w[0]))),
    );
}

/// The states of blocks of `m` inner paths of `d` assets (`states`: whole blocks of
/// `m * d` doubles) in the payoff-plane layout ([`PathsOptions::payoff_plane`]): per
/// block the `m * d` high words, then `payoff` of each inner path's `d` prices (doubles,
/// in the place of the low words), the rest of the block zero.
///
/// # Panics
/// If `payoff_plane_fits(d, m)` does not hold or the blocks are not whole.
pub fn states_to_payoff_planes(
    states: &[f64],
    m: usize,
    d: usize,
    payoff: impl Fn(&[f64]) -> f64,
) -> Vec<f64> {
    let block = m * d;
    assert!(payoff_plane_fits(d, m), "payoff plane: {m} x {d}");
    assert!(
        states.len().is_multiple_of(block),
        "states: blocks of {block}"
    );
    let mut out = Vec::with_capacity(states.len());
    let mut words = vec![0u32; 2 * block];
    for b in states.chunks_exact(block) {
        words.fill(0);
        for (e, x) in b.iter().enumerate() {
            words[e] = (x.to_bits() >> 32) as u32;
        }
        for (mm, row) in b.chunks_exact(d).enumerate() {
            let bits = payoff(row).to_bits();
            words[block + 2 * mm] = bits as u32;
            words[block + 2 * mm + 1] = (bits >> 32) as u32;
        }
        push_words(&mut out, &words);
    }
    out
}

/// The inverse of [`states_to_planes`]: the doubles of each block of `block`.
///
/// # Panics
/// If `block` is 0 or does not divide `planes.len()`.
pub fn planes_to_states(planes: &[f64], block: usize) -> Vec<f64> {
    assert!(
        block > 0 && planes.len().is_multiple_of(block),
        "planes: blocks of {block}"
    );
    let mut out = Vec::with_capacity(planes.len());
    let mut words = vec![0u32; 2 * block];
    for b in planes.chunks_exact(block) {
        for (w, x) in words.chunks_exact_mut(2).zip(b) {
            let bits = x.to_bits();
            w[0] = bits as u32;
            w[1] = (bits >> 32) as u32;
        }
        out.extend(
            (0..block)
                .map(|e| f64::from_bits(u64::from(words[e]) << 32 | u64::from(words[block + e]))),
        );
    }
    out
}

const PATHS_CU: &str = include_str!("../../cuda/paths.cu");

/// `inner_path` counter word of an outer path's stream.
pub const OUTER_STREAM: u32 = u32::MAX;

/// Largest number of assets for which the market is compiled into the kernels.
pub const FIXED_MAX_ASSETS: usize = 32;

/// Threads per block of the fixed kernels (`PATHS_BLOCK`). Beside the engine's kernels
/// (H200, basket29 f64, thirty-fourth session): 32 threads ran as 64 (100k 0.355-0.356 s
/// both, 1M 3.757 against 3.744 s), 128 threads 1.5-2% slower.
const FIXED_BLOCK: usize = 64;

/// Largest |z| of a Box–Muller normal here (above `sqrt(-2 ln u1)` with `u1 >= 2^-33`,
/// 6.7637, and its f32 rounding).
const NORMAL_MAX: f64 = 6.772;

/// Whether some exp argument `drift_i + vol_i (C z)_i` can leave the kernels' fast exp's
/// range (|x| < 708): then the module is compiled with `PATHS_EXP_FALLBACK` (CUDA's exp
/// there). Bound: `|drift_i| + |vol_i| sum_k |C_ik| NORMAL_MAX`.
fn needs_exp_fallback(market: &MarketSteps) -> bool {
    let d = market.drift.len();
    (0..d).any(|i| {
        let row: f64 = match market.factor {
            Some(f) => f[i * d..=i * d + i].iter().map(|c| c.abs()).sum(),
            None => 1.0,
        };
        let bound = market.drift[i].abs() + market.vol[i].abs() * row * NORMAL_MAX;
        bound.is_nan() || bound >= 700.0
    })
}

/// The market's one-step transition, as plain slices (length `d`, the factor `d x d`).
#[derive(Debug, Clone, Copy)]
pub struct MarketSteps<'a> {
    /// Prices at `t_0`.
    pub spots: &'a [f64],
    /// `(r - q_i - σ_i²/2) Δt` per asset.
    pub drift: &'a [f64],
    /// `σ_i sqrt(Δt)` per asset.
    pub vol: &'a [f64],
    /// Row-major lower-triangular `C` with `C C^T = ρ`; `None` for independent assets.
    pub factor: Option<&'a [f64]>,
}

/// The full CUDA source of the path module (no defines: the generic kernels only).
pub fn paths_source() -> String {
    source_file("paths.cu", PATHS_CU)
}

/// `v` as an exact C hexadecimal floating literal (`v` finite).
fn c_literal(v: f64) -> String {
    let bits = v.to_bits();
    let sign = if bits >> 63 == 1 { "-" } else { "" };
    let exponent = ((bits >> 52) & 0x7ff) as i64;
    let mantissa = bits & ((1u64 << 52) - 1);
    match (exponent, mantissa) {
        (0, 0) => format!("{sign}0.0"),
        (0, m) => format!("{sign}0x0.{m:013x}p-1022"),
        (e, m) => format!("{sign}0x1.{m:013x}p{:+}", e - 1023),
    }
}

fn c_array(name: &str, values: &[f64]) -> String {
    let body: Vec<String> = values.iter().map(|&v| c_literal(v)).collect();
    format!(
        "__constant__ double {name}[{}] = {{{}}};\n",
        values.len(),
        body.join(", ")
    )
}

/// The device function `double paths_payoff(const double* xs, int ld)` of the fixed
/// inner-path kernel: the payoff of the asset prices `xs[i * ld]`, with the operations of
/// `engine_payoff` (engine.cu) in its order, so the same bits: the level `S_i`, the
/// basket `((0 + w_0 S_i0) + w_1 S_i1) + ...` or the maximum `fmax(..fmax(-inf, S_i0)..)`,
/// then `fmax(level - K, 0)` (call) or `fmax(K - level, 0)` (put); weights and strike as
/// exact hexadecimal literals. `None` for a non-finite strike or weight.
pub fn payoff_value_source(payoff: &GpuPayoff) -> Option<String> {
    if let GpuUnderlying::Basket(w) = &payoff.underlying {
        if !w.iter().all(|(_, x)| x.is_finite()) {
            return None;
        }
    }
    if !payoff.strike.is_finite() {
        return None;
    }
    let (level, gap) = payoff.c_expression(
        |i| format!("xs[{i} * ld]"),
        |w| format!("({})", c_literal(w)),
        &format!("({})", c_literal(payoff.strike)),
    );
    Some(format!(
        "__device__ __forceinline__ double paths_payoff(const double* xs, int ld) {{
    const double level = {level};
    return fmax({gap}, 0.0);
}}
"
    ))
}

/// Whether `market` gets the fixed kernels: at most [`FIXED_MAX_ASSETS`] assets, finite
/// parameters.
fn fixed_market(market: &MarketSteps) -> bool {
    let d = market.spots.len();
    let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
    d > 0
        && d <= FIXED_MAX_ASSETS
        && finite(market.drift)
        && finite(market.vol)
        && market.factor.is_none_or(finite)
}

/// Whether [`GpuPaths::with_options`] can compile the payoff plane
/// ([`PathsOptions::payoff_plane`]) for `market` and `payoff` and the inner kernels can
/// store it for `inner` inner paths: the fixed kernels, the payoff compiled in, and
/// [`payoff_plane_fits`].
pub fn payoff_plane_possible(market: &MarketSteps, payoff: &GpuPayoff, inner: usize) -> bool {
    payoff_plane_fits(market.spots.len(), inner)
        && fixed_market(market)
        && payoff_value_source(payoff).is_some()
}

/// The path module for `market` and `seed`: the fixed kernels compiled for them (defines,
/// the Philox key words of `seed` and the market's constants, then `cuda/paths.cu`) when
/// the market has at most [`FIXED_MAX_ASSETS`] assets and finite parameters, else `None`
/// (generic kernels). The fixed kernels draw from the compiled-in key (their `seed`
/// argument is not read): constant keys fold into the Philox rounds' XORs.
pub fn paths_source_fixed(market: &MarketSteps, seed: u64) -> Option<String> {
    if !fixed_market(market) {
        return None;
    }
    let d = market.spots.len();
    let mut src = format!(
        "#define PATHS_D {d}\n#define PATHS_FACTOR {}\n#define PATHS_BLOCK {FIXED_BLOCK}\n\
         #define PATHS_KEY0 {:#010x}u\n#define PATHS_KEY1 {:#010x}u\n",
        u32::from(market.factor.is_some()),
        seed as u32,
        (seed >> 32) as u32
    );
    src += &c_array("C_DRIFT", market.drift);
    src += &c_array("C_VOL", market.vol);
    if let Some(f) = market.factor {
        src += &c_array("C_FACTOR", f);
    }
    Some(src + &paths_source())
}

/// Path generator on one device: the compiled module and the market on the device.
/// All work is queued on the stream given to [`GpuPaths::new`].
#[derive(Debug)]
pub struct GpuPaths {
    stream: Arc<CudaStream>,
    philox: CudaFunction,
    normals: CudaFunction,
    sqrt_check: CudaFunction,
    exp_step: CudaFunction,
    outer: CudaFunction,
    inner: CudaFunction,
    seed: u64,
    d: usize,
    spots: CudaSlice<f64>,
    drift: CudaSlice<f64>,
    vol: CudaSlice<f64>,
    factor: Option<CudaSlice<f64>>,
    shared_optin: usize,
    /// The market is compiled in: `inner` and `outer` are the fixed kernels.
    fixed: bool,
    /// A maturity payoff is compiled into the fixed inner kernel
    /// ([`GpuPaths::inner_paths_paying`]).
    pays: bool,
    /// Inner paths in antithetic pairs ([`PathsOptions::antithetic`]).
    antithetic: bool,
    /// The payoff plane ([`PathsOptions::payoff_plane`]).
    payoff_plane: bool,
}

/// How [`GpuPaths::with_options`] compiles the path module.
#[derive(Debug, Clone, Copy)]
pub struct PathsOptions<'a> {
    /// Compile the market into the kernels when it qualifies (module doc); `false` always
    /// gives the generic kernels.
    pub allow_fixed: bool,
    /// A maturity payoff for [`GpuPaths::inner_paths_paying`] (fixed kernels only).
    pub payoff: Option<&'a GpuPayoff>,
    /// Antithetic inner paths, as the CPU engine's `simulation.antithetic`: inner path
    /// `2j + 1` of every (outer path, date) takes the negated normals of inner path `2j`
    /// (from `2j`'s stream). The inner kernels then need an even number of inner paths.
    /// In the fixed kernel the two threads of a pair share the Philox and Box–Muller work.
    pub antithetic: bool,
    /// The payoff plane (needs `payoff`, the fixed kernels and `d >= 2`; the inner
    /// kernels then need `inner * d` even, [`payoff_plane_fits`]): every stored step of
    /// the inner kernels keeps the states' high words and, in the place of their low
    /// words, the payoff of each inner path (module doc). For a portfolio of one American
    /// position, whose regression build and exercise read nothing else.
    pub payoff_plane: bool,
}

/// Whether `d` assets and `inner` inner paths allow the payoff plane
/// ([`PathsOptions::payoff_plane`]): the `inner` payoffs (doubles) fit in the place of the
/// `inner * d` low words, 8-byte aligned.
pub fn payoff_plane_fits(d: usize, inner: usize) -> bool {
    d >= 2 && (inner * d).is_multiple_of(2)
}

impl Default for PathsOptions<'_> {
    fn default() -> Self {
        Self {
            allow_fixed: true,
            payoff: None,
            antithetic: false,
            payoff_plane: false,
        }
    }
}

/// One thread per path: blocks of `block` threads, `smem` bytes of dynamic shared memory.
fn launch_1d(threads_needed: usize, block: usize, smem: usize) -> Result<LaunchConfig, GpuError> {
    let grid = threads_needed.div_ceil(block);
    if grid > i32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "{threads_needed} paths in one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (grid as u32, 1, 1),
        block_dim: (block as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    })
}

/// The cash flows of an American position at its maturity date, written by
/// [`GpuPaths::inner_paths_paying`] instead of the last step's states: for inner path
/// `mm` of outer path `l`, `cash[l * inner + mm]` = the payoff, `cash_date[..] = date`
/// and, with `next_df = Some(df)`, `y[..] = payoff * df` (the first regression step's
/// discounted cash flows), exactly as `EngineKernels::cash_init` writes them.
#[derive(Debug)]
pub struct MaturityCash<'a, 'b> {
    pub date: u32,
    pub next_df: Option<f64>,
    pub cash: &'a mut CudaViewMut<'b, f64>,
    pub cash_date: &'a mut CudaViewMut<'b, u32>,
    pub y: &'a mut CudaViewMut<'b, f64>,
}

impl GpuPaths {
    /// Compiles `cuda/paths.cu` for the stream's device and uploads the market.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] on inconsistent lengths, compile or driver errors.
    pub fn new(
        stream: &Arc<CudaStream>,
        market: &MarketSteps,
        seed: u64,
    ) -> Result<Self, GpuError> {
        Self::with_options(stream, market, seed, PathsOptions::default())
    }

    /// As [`GpuPaths::new`], with `payoff` compiled into the fixed inner kernel so that
    /// [`GpuPaths::inner_paths_paying`] can write the cash flows at maturity instead of
    /// the last step's states ([`GpuPaths::pays_at_maturity`] says whether it could:
    /// not for markets that get the generic kernels).
    ///
    /// # Errors
    /// As [`GpuPaths::new`].
    pub fn with_maturity_payoff(
        stream: &Arc<CudaStream>,
        market: &MarketSteps,
        seed: u64,
        payoff: &GpuPayoff,
    ) -> Result<Self, GpuError> {
        Self::with_options(
            stream,
            market,
            seed,
            PathsOptions {
                payoff: Some(payoff),
                ..PathsOptions::default()
            },
        )
    }

    /// Whether [`GpuPaths::inner_paths_paying`] is available.
    pub fn pays_at_maturity(&self) -> bool {
        self.pays
    }

    /// As [`GpuPaths::new`], but always with the generic kernels (`d`, drift, vol and
    /// factor read at run time), whatever the number of assets: the reference the
    /// fixed kernels are tested against.
    ///
    /// # Errors
    /// As [`GpuPaths::new`].
    pub fn new_generic(
        stream: &Arc<CudaStream>,
        market: &MarketSteps,
        seed: u64,
    ) -> Result<Self, GpuError> {
        Self::with_options(
            stream,
            market,
            seed,
            PathsOptions {
                allow_fixed: false,
                ..PathsOptions::default()
            },
        )
    }

    /// Whether the market is compiled into the kernels (see the module doc).
    pub fn is_fixed(&self) -> bool {
        self.fixed
    }

    /// The path module compiled as `options` says (the constructors above are its
    /// common cases).
    ///
    /// # Errors
    /// As [`GpuPaths::new`].
    pub fn with_options(
        stream: &Arc<CudaStream>,
        market: &MarketSteps,
        seed: u64,
        options: PathsOptions,
    ) -> Result<Self, GpuError> {
        let PathsOptions {
            allow_fixed,
            payoff,
            antithetic,
            payoff_plane,
        } = options;
        let d = market.spots.len();
        if d == 0 || market.drift.len() != d || market.vol.len() != d {
            return Err(GpuError::Invalid(format!(
                "market: {} spots, {} drifts, {} vols",
                d,
                market.drift.len(),
                market.vol.len()
            )));
        }
        if let Some(f) = market.factor {
            if f.len() != d * d {
                return Err(GpuError::Invalid(format!(
                    "correlation factor has {} entries, expected {}",
                    f.len(),
                    d * d
                )));
            }
        }
        let ctx: &Arc<CudaContext> = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        let fixed_src = if allow_fixed {
            paths_source_fixed(market, seed)
        } else {
            None
        };
        let fixed = fixed_src.is_some();
        let payoff_src = payoff.filter(|_| fixed).and_then(payoff_value_source);
        let pays = payoff_src.is_some();
        let mut src = match (fixed_src, payoff_src) {
            (Some(f), Some(p)) => format!("#define PATHS_PAYOFF 1\n{p}{f}"),
            (Some(f), None) => f,
            (None, _) => paths_source(),
        };
        if needs_exp_fallback(market) {
            src = format!("#define PATHS_EXP_FALLBACK 1\n{src}");
        }
        if antithetic {
            src = format!("#define PATHS_ANTITHETIC 1\n{src}");
        }
        if payoff_plane {
            if !pays || d < 2 {
                return Err(GpuError::Invalid(format!(
                    "payoff plane: needs a payoff compiled into the fixed kernels and at \
                     least 2 assets (fixed: {fixed}, payoff: {pays}, d = {d})"
                )));
            }
            src = format!("#define PATHS_PAYOFF_PLANE 1\n{src}");
        }
        let cubin = compile_cubin(&src, "paths.cu", &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        let (outer_name, inner_name) = if fixed {
            ("outer_paths_fixed", "inner_paths_fixed")
        } else {
            ("outer_paths", "inner_paths")
        };
        let shared_optin = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?
        .max(0) as usize;
        Ok(Self {
            stream: stream.clone(),
            philox: module.load_function("philox_blocks")?,
            normals: module.load_function("normal_draws")?,
            sqrt_check: module.load_function("sqrt_pos_f32_mismatches")?,
            exp_step: module.load_function("exp_step_values")?,
            outer: module.load_function(outer_name)?,
            inner: module.load_function(inner_name)?,
            seed,
            d,
            spots: stream.clone_htod(market.spots)?,
            drift: stream.clone_htod(market.drift)?,
            vol: stream.clone_htod(market.vol)?,
            factor: market.factor.map(|f| stream.clone_htod(f)).transpose()?,
            shared_optin,
            fixed,
            pays,
            antithetic,
            payoff_plane,
        })
    }

    /// Whether the inner kernels store the payoff plane ([`PathsOptions::payoff_plane`]).
    pub fn payoff_plane(&self) -> bool {
        self.payoff_plane
    }

    /// Number of assets.
    pub fn assets(&self) -> usize {
        self.d
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Launch of a generic path kernel over `threads_needed` threads: block size and
    /// dynamic shared bytes (one column of `2 d` doubles of scratch per thread, `d`
    /// without a factor); raises the kernel's shared limit when more than 48 KiB are
    /// needed.
    fn geometry(&self, f: &CudaFunction, threads_needed: usize) -> Result<LaunchConfig, GpuError> {
        let per_thread = if self.factor.is_some() { 2 } else { 1 } * self.d * 8;
        let mut block = 128usize;
        while block > 32 && block * per_thread > 48 * 1024 {
            block /= 2;
        }
        let smem = block * per_thread;
        if smem > self.shared_optin {
            return Err(GpuError::SharedMemory {
                kernel: "paths".into(),
                needed: smem,
                limit: self.shared_optin,
            });
        }
        if smem > 48 * 1024 {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )?;
        }
        launch_1d(threads_needed, block, smem)
    }

    /// Launch of a fixed kernel (`FIXED_BLOCK` threads, static shared memory) over
    /// `threads_needed` threads.
    fn fixed_config(threads_needed: usize) -> Result<LaunchConfig, GpuError> {
        launch_1d(threads_needed, FIXED_BLOCK, 0)
    }

    /// The market arguments of a generic kernel: drift, vol (d doubles each), then the
    /// factor (d * d) or `null`.
    fn push_market<'a>(&'a self, l: &mut LaunchArgs<'a>, null: &'a u64) {
        l.arg(&self.drift).arg(&self.vol);
        match &self.factor {
            Some(f) => l.arg(f),
            None => l.arg(null),
        };
    }

    /// Simulates outer paths `first_path .. first_path + paths` over `steps` steps into
    /// `out` (`paths * (steps + 1) * d` elements, layout in the module doc).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if `out` is too short, driver errors.
    pub fn outer_paths(
        &self,
        first_path: u32,
        paths: usize,
        steps: usize,
        out: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        let need = paths * (steps + 1) * self.d;
        if out.len() < need {
            return Err(GpuError::Invalid(format!(
                "outer paths need {need} elements, got {}",
                out.len()
            )));
        }
        if paths == 0 {
            return Ok(());
        }
        let (paths_arg, steps_arg, d_arg) = (paths as i64, steps as i32, self.d as i32);
        if self.fixed {
            let cfg = Self::fixed_config(paths)?;
            let mut l = self.stream.launch_builder(&self.outer);
            l.arg(&self.seed)
                .arg(&first_path)
                .arg(&paths_arg)
                .arg(&steps_arg)
                .arg(&self.spots)
                .arg(out);
            // SAFETY: the argument list matches `outer_paths_fixed` in paths.cu (u64,
            // u32, i64, i32, spots: d doubles, out: checked above to hold
            // paths*(steps+1)*d doubles), compiled with PATHS_D = d and PATHS_BLOCK =
            // FIXED_BLOCK threads (its shared memory is static); threads with index >=
            // paths return before any access.
            unsafe { l.launch(cfg) }?;
            return Ok(());
        }
        let cfg = self.geometry(&self.outer, paths)?;
        let null = 0u64;
        let mut l = self.stream.launch_builder(&self.outer);
        l.arg(&self.seed)
            .arg(&first_path)
            .arg(&paths_arg)
            .arg(&steps_arg)
            .arg(&d_arg)
            .arg(&self.spots);
        self.push_market(&mut l, &null);
        l.arg(out);
        // SAFETY: the argument list matches `outer_paths` in paths.cu (u64, u32, i64,
        // i32, i32, then five pointers: spots, drift, vol, d-element device arrays;
        // factor, d*d elements or null; out, checked above to hold paths*(steps+1)*d
        // doubles). Threads with index >= paths return before any access, and the
        // dynamic shared memory is block * (1 or 2) * d doubles as the kernel indexes it.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Simulates `inner` inner paths of `steps` steps for each of `outer` outer paths
    /// (global indices `first_outer + l`) from their states at exposure date `date`:
    /// outer path `l` starts at `start[l * start_stride .. + d]`. Output layout in the
    /// module doc (`outer * steps * inner * d` elements). In a module compiled with
    /// [`PathsOptions::antithetic`], inner path `2j + 1` takes the negated normals of `2j`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short or, in an antithetic module, `inner`
    /// is odd; driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn inner_paths(
        &self,
        first_outer: u32,
        date: u32,
        start: &CudaView<f64>,
        start_stride: usize,
        outer: usize,
        inner: usize,
        steps: usize,
        out: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        self.inner_impl(
            first_outer,
            date,
            start,
            start_stride,
            (outer, inner, steps),
            out,
            None,
        )
    }

    /// As [`GpuPaths::inner_paths`], except that the last step (date `date + steps`) is
    /// not stored in `out`: its payoff goes to `pay` instead (see [`MaturityCash`]).
    /// The other steps are the same bits as [`GpuPaths::inner_paths`] writes.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if no payoff is compiled in
    /// ([`GpuPaths::pays_at_maturity`]) or a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn inner_paths_paying(
        &self,
        first_outer: u32,
        date: u32,
        start: &CudaView<f64>,
        start_stride: usize,
        (outer, inner, steps): (usize, usize, usize),
        out: &mut CudaViewMut<f64>,
        pay: MaturityCash,
    ) -> Result<(), GpuError> {
        if !self.pays {
            return Err(GpuError::Invalid(
                "inner paths: no maturity payoff compiled in".into(),
            ));
        }
        let total = outer * inner;
        if pay.cash.len() < total
            || pay.cash_date.len() < total
            || (pay.next_df.is_some() && pay.y.len() < total)
        {
            return Err(GpuError::Invalid(
                "inner paths: cash flow buffers too short".into(),
            ));
        }
        self.inner_impl(
            first_outer,
            date,
            start,
            start_stride,
            (outer, inner, steps),
            out,
            Some(pay),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn inner_impl(
        &self,
        first_outer: u32,
        date: u32,
        start: &CudaView<f64>,
        start_stride: usize,
        (outer, inner, steps): (usize, usize, usize),
        out: &mut CudaViewMut<f64>,
        pay: Option<MaturityCash>,
    ) -> Result<(), GpuError> {
        let d = self.d;
        let need = outer * steps * inner * d;
        if out.len() < need {
            return Err(GpuError::Invalid(format!(
                "inner paths need {need} elements, got {}",
                out.len()
            )));
        }
        if outer == 0 || inner == 0 || steps == 0 {
            return Ok(());
        }
        if self.payoff_plane && !payoff_plane_fits(d, inner) {
            return Err(GpuError::Invalid(format!(
                "payoff plane: {inner} inner paths of {d} assets (inner * d must be even)"
            )));
        }
        if self.antithetic && inner % 2 != 0 {
            return Err(GpuError::Invalid(format!(
                "antithetic inner paths: {inner} is odd (pairs needed)"
            )));
        }
        if start.len() < (outer - 1) * start_stride + d {
            return Err(GpuError::Invalid(format!(
                "start states: {} elements for {outer} paths of stride {start_stride}",
                start.len()
            )));
        }
        if inner > i32::MAX as usize || steps > i32::MAX as usize {
            return Err(GpuError::Invalid("too many inner paths or steps".into()));
        }
        let (outer_arg, inner_arg, steps_arg, d_arg, stride_arg) = (
            outer as i64,
            inner as i32,
            steps as i32,
            d as i32,
            start_stride as i64,
        );
        if self.fixed {
            let cfg = Self::fixed_config(outer * inner)?;
            let null = 0u64;
            let pay_step: i32 = if pay.is_some() { steps_arg - 1 } else { -1 };
            let (pay_date, pay_df) = pay
                .as_ref()
                .map_or((0u32, 0.0f64), |p| (p.date, p.next_df.unwrap_or(0.0)));
            let mut l = self.stream.launch_builder(&self.inner);
            l.arg(&self.seed)
                .arg(&first_outer)
                .arg(&date)
                .arg(&outer_arg)
                .arg(&inner_arg)
                .arg(&steps_arg)
                .arg(start)
                .arg(&stride_arg)
                .arg(out)
                .arg(&pay_step)
                .arg(&pay_date)
                .arg(&pay_df);
            match pay {
                Some(p) => {
                    l.arg(p.cash).arg(p.cash_date);
                    if p.next_df.is_some() {
                        l.arg(p.y);
                    } else {
                        l.arg(&null);
                    }
                }
                None => {
                    l.arg(&null).arg(&null).arg(&null);
                }
            }
            // SAFETY: the argument list matches `inner_paths_fixed` in paths.cu (u64,
            // u32, u32, i64, i32, i32, start pointer, i64, out, i32, u32, f64, cash,
            // cash_date, y: pointers or null), compiled with PATHS_D = d and PATHS_BLOCK
            // = FIXED_BLOCK threads (static shared memory). `start` holds
            // (outer-1)*start_stride + d elements and `out` outer*steps*inner*d (both
            // checked above); pay_step >= 0 only with a payoff compiled in (`self.pays`,
            // checked by `inner_paths_paying`), and then cash and cash_date hold
            // outer*inner elements, y too or it is null (checked there); threads >=
            // outer*inner read and write nothing but still reach every barrier, and the
            // paying step returns on every thread of the block at once.
            unsafe { l.launch(cfg) }?;
            return Ok(());
        }
        debug_assert!(pay.is_none(), "a maturity payoff needs the fixed kernels");
        let cfg = self.geometry(&self.inner, outer * inner)?;
        let null = 0u64;
        let mut l = self.stream.launch_builder(&self.inner);
        l.arg(&self.seed)
            .arg(&first_outer)
            .arg(&date)
            .arg(&outer_arg)
            .arg(&inner_arg)
            .arg(&steps_arg)
            .arg(&d_arg)
            .arg(start)
            .arg(&stride_arg);
        self.push_market(&mut l, &null);
        l.arg(out);
        // SAFETY: the argument list matches `inner_paths` in paths.cu (u64, u32, u32,
        // i64, i32, i32, i32, start pointer, i64, drift, vol, factor or null, out).
        // `start` holds (outer-1)*start_stride + d elements and `out`
        // outer*steps*inner*d (both checked above); threads >= outer*inner return first;
        // the dynamic shared memory matches the kernel's indexing.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Raw Philox4x32-10 blocks on the device (for tests): `out[q] = philox(ctr[q], key[q])`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] on length mismatch, driver errors.
    pub fn philox_blocks(
        &self,
        ctr: &[[u32; 4]],
        key: &[[u32; 2]],
    ) -> Result<Vec<[u32; 4]>, GpuError> {
        if ctr.len() != key.len() {
            return Err(GpuError::Invalid(
                "counters and keys differ in length".into(),
            ));
        }
        let count = ctr.len();
        if count == 0 {
            return Ok(Vec::new());
        }
        let c: Vec<u32> = ctr.iter().flatten().copied().collect();
        let k: Vec<u32> = key.iter().flatten().copied().collect();
        let c_dev = self.stream.clone_htod(&c)?;
        let k_dev = self.stream.clone_htod(&k)?;
        let mut o_dev: CudaSlice<u32> =
            self.stream.clone_htod(&vec![0xdead_beef_u32; 4 * count])?;
        let count_arg = count as i64;
        let mut l = self.stream.launch_builder(&self.philox);
        l.arg(&c_dev).arg(&k_dev).arg(&mut o_dev).arg(&count_arg);
        // SAFETY: `philox_blocks(const unsigned*, const unsigned*, unsigned*, long long)`;
        // ctr has 4*count words, key 2*count, out 4*count; threads >= count return.
        unsafe { l.launch(LaunchConfig::for_num_elems(count as u32)) }?;
        let o = self.stream.clone_dtoh(&o_dev)?;
        Ok(o.chunks_exact(4)
            .map(|w| [w[0], w[1], w[2], w[3]])
            .collect())
    }

    /// How many of the floats with bit patterns `lo..hi` the branch-free square root of the
    /// Box–Muller transform (`sqrt_pos_f32` in paths.cu) rounds differently from the
    /// IEEE square root (`__fsqrt_rn`), one thread per float (for tests: it must be 0
    /// over Box–Muller's range).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for `hi < lo`, driver errors.
    pub fn sqrt_pos_f32_mismatches(&self, lo: u32, hi: u32) -> Result<u64, GpuError> {
        let n = hi.checked_sub(lo).ok_or_else(|| {
            GpuError::Invalid(format!("bit range {lo:#x}..{hi:#x} is empty or reversed"))
        })?;
        let mut count: CudaSlice<u64> = self.stream.clone_htod(&[0u64])?;
        let n_arg = i64::from(n);
        let mut l = self.stream.launch_builder(&self.sqrt_check);
        l.arg(&lo).arg(&n_arg).arg(&mut count);
        // SAFETY: `sqrt_pos_f32_mismatches(unsigned, long long, unsigned long long*)`;
        // count holds one counter, threads q >= n return.
        unsafe { l.launch(LaunchConfig::for_num_elems(n)) }?;
        Ok(self.stream.clone_dtoh(&count)?[0])
    }

    /// `exp_step(x[q])`, the exponential of the GBM step (for tests: compared with the
    /// CPU's `exp` for |x| < 708; outside that range the module's fallback, if compiled in,
    /// takes CUDA's `exp`).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for more than `u32::MAX` values, driver errors.
    pub fn exp_step(&self, x: &[f64]) -> Result<Vec<f64>, GpuError> {
        self.elementwise(&self.exp_step, x)
    }

    /// `out[q] = f(x[q])` by one of the module's element-wise test kernels
    /// (`exp_step_values`: `(const double* x, double* out, long long n)`,
    /// one thread per value), on a NaN-poisoned output.
    fn elementwise(&self, kernel: &CudaFunction, x: &[f64]) -> Result<Vec<f64>, GpuError> {
        if x.is_empty() {
            return Ok(Vec::new());
        }
        let threads = u32::try_from(x.len())
            .map_err(|_| GpuError::Invalid(format!("{} values in one launch", x.len())))?;
        let x_dev = self.stream.clone_htod(x)?;
        let mut o_dev: CudaSlice<f64> = self.stream.clone_htod(&vec![f64::NAN; x.len()])?;
        let n = x.len() as i64;
        let mut l = self.stream.launch_builder(kernel);
        l.arg(&x_dev).arg(&mut o_dev).arg(&n);
        // SAFETY: `kernel(const double*, double*, long long)` (the callers above); both
        // buffers hold `n` doubles and threads q >= n return.
        unsafe { l.launch(LaunchConfig::for_num_elems(threads)) }?;
        Ok(self.stream.clone_dtoh(&o_dev)?)
    }

    /// The first `count` normals of the stream `(seed, outer, date, inner)` (for tests).
    ///
    /// # Errors
    /// Driver errors.
    pub fn normals(
        &self,
        outer: u32,
        date: u32,
        inner: u32,
        count: usize,
    ) -> Result<Vec<f64>, GpuError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut o_dev: CudaSlice<f64> = self.stream.clone_htod(&vec![f64::NAN; count])?;
        let count_arg = count as i64;
        let mut l = self.stream.launch_builder(&self.normals);
        l.arg(&self.seed)
            .arg(&outer)
            .arg(&date)
            .arg(&inner)
            .arg(&mut o_dev)
            .arg(&count_arg);
        // SAFETY: `normal_draws(u64, u32, u32, u32, double*, long long)`; out holds
        // `count` doubles and thread q writes only draws 4q..4q+3 below `count`.
        unsafe { l.launch(LaunchConfig::for_num_elems(count.div_ceil(4) as u32)) }?;
        Ok(self.stream.clone_dtoh(&o_dev)?)
    }
}

#[cfg(test)]
mod tests {
    /// Blocks of 3 x 5 and of 1 x 1 doubles with special values (signed zeros,
    /// subnormals, infinities, NaN with a payload in the low word only) survive the round
    /// trip bit for bit, and the words sit where the kernels look for them.
    #[test]
    fn state_planes_round_trip() {
        let specials = [
            0.0,
            -0.0,
            f64::MIN_POSITIVE / 3.0,
            1.0,
            1.0 + f64::EPSILON,
            -2.5,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::from_bits(0xfff8_0000_dead_beef),
            0.1,
            std::f64::consts::PI,
            1e-300,
            -7.0e200,
        ];
        for block in [15, 1, 5] {
            let states: Vec<f64> = (0..3 * 15).map(|k| specials[(7 * k + 3) % 15]).collect();
            let planes = super::states_to_planes(&states, block);
            assert_eq!(planes.len(), states.len());
            let words: Vec<u32> = planes
                .iter()
                .flat_map(|x| [x.to_bits() as u32, (x.to_bits() >> 32) as u32])
                .collect();
            for (k, x) in states.iter().enumerate() {
                let (b, e) = (k / block, k % block);
                assert_eq!(
                    words[2 * b * block + e],
                    (x.to_bits() >> 32) as u32,
                    "high word {k}"
                );
                assert_eq!(
                    words[2 * b * block + block + e],
                    x.to_bits() as u32,
                    "low word {k}"
                );
            }
            let back = super::planes_to_states(&planes, block);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&back), bits(&states), "block {block}");
        }
    }

    #[test]
    fn exp_fallback_only_for_large_increments() {
        let (spots, drift) = (vec![100.0; 2], vec![-1e-3; 2]);
        let factor = [1.0, 0.0, 0.6, 0.8];
        let market = |vol: &[f64], factor: Option<&[f64]>| {
            super::needs_exp_fallback(&super::MarketSteps {
                spots: &spots,
                drift: &drift,
                vol,
                factor,
            })
        };
        assert!(!market(&[0.3, 0.5], None));
        assert!(!market(&[0.3, 50.0], Some(&factor)));
        assert!(market(&[0.3, 80.0], Some(&factor)));
        assert!(market(&[0.3, f64::NAN], None));
    }

    /// Compiles the path module, the fixed kernels with and without the exp fallback
    /// (needs libnvrtc, no GPU: ignored on CI, which has neither).
    #[test]
    #[ignore = "needs NVRTC (libnvrtc)"]
    fn paths_kernel_compiles() {
        crate::cuda::assert_nvrtc_present();
        if let Err(e) = super::compile_cubin(&super::paths_source(), "paths.cu", "sm_90") {
            panic!("{e}");
        }
        let d = 5;
        let mut factor = vec![0.0; d * d];
        for i in 0..d {
            factor[i * d..i * d + i + 1].fill(0.5);
        }
        let (spots, drift, vol) = (vec![100.0; d], vec![-1e-3; d], vec![0.1; d]);
        for f in [None, Some(factor.as_slice())] {
            let market = super::MarketSteps {
                spots: &spots,
                drift: &drift,
                vol: &vol,
                factor: f,
            };
            let src =
                super::paths_source_fixed(&market, 0x0123_4567_89ab_cdef).expect("fixed kernels");
            for src in [src.clone(), format!("#define PATHS_EXP_FALLBACK 1\n{src}")] {
                if let Err(e) = super::compile_cubin(&src, "paths.cu", "sm_90") {
                    panic!("{e}");
                }
            }
            // With each kind of maturity payoff compiled in, and with the payoff plane.
            for payoff in payoffs() {
                let pay = super::payoff_value_source(&payoff).expect("finite payoff");
                let src = format!("#define PATHS_PAYOFF 1\n{pay}{src}");
                for src in [src.clone(), format!("#define PATHS_PAYOFF_PLANE 1\n{src}")] {
                    if let Err(e) = super::compile_cubin(&src, "paths.cu", "sm_90") {
                        panic!("{payoff:?}: {e}");
                    }
                }
            }
        }
    }

    fn payoffs() -> Vec<super::GpuPayoff> {
        use crate::cuda::regression::{GpuOptionKind, GpuPayoff, GpuUnderlying};
        let mut v = Vec::new();
        for kind in [GpuOptionKind::Call, GpuOptionKind::Put] {
            for underlying in [
                GpuUnderlying::Asset(3),
                GpuUnderlying::Basket(vec![(0, 0.25), (4, -0.1), (2, 1.0 / 3.0)]),
                GpuUnderlying::Max(vec![1, 0, 4]),
                GpuUnderlying::Max(vec![]),
            ] {
                v.push(GpuPayoff {
                    underlying,
                    kind,
                    strike: 0.95,
                });
            }
        }
        v
    }

    #[test]
    fn payoff_source_has_exact_constants_and_refuses_non_finite_ones() {
        use crate::cuda::regression::{GpuOptionKind, GpuPayoff, GpuUnderlying};
        let basket_put = GpuPayoff {
            underlying: GpuUnderlying::Basket(vec![(0, 0.25), (4, -0.1)]),
            kind: GpuOptionKind::Put,
            strike: 0.95,
        };
        let src = super::payoff_value_source(&basket_put).expect("finite");
        assert!(src.contains(&super::c_literal(0.95)), "{src}");
        assert!(src.contains(&super::c_literal(-0.1)), "{src}");
        assert!(src.contains("xs[4 * ld]"), "{src}");
        assert!(src.contains(&format!("fmax(({}) - level, 0.0)", super::c_literal(0.95))));
        let max_call = GpuPayoff {
            underlying: GpuUnderlying::Max(vec![2, 1]),
            kind: GpuOptionKind::Call,
            strike: 1.0,
        };
        let src = super::payoff_value_source(&max_call).expect("finite");
        assert!(
            src.contains(
                "fmax(fmax(__longlong_as_double(0xfff0000000000000LL), xs[2 * ld]), xs[1 * ld])"
            ),
            "{src}"
        );
        for strike in [f64::NAN, f64::INFINITY] {
            let p = GpuPayoff {
                strike,
                ..max_call.clone()
            };
            assert!(super::payoff_value_source(&p).is_none());
        }
        let p = GpuPayoff {
            underlying: GpuUnderlying::Basket(vec![(0, f64::NAN)]),
            ..basket_put
        };
        assert!(super::payoff_value_source(&p).is_none());
    }

    #[test]
    fn exact_hexadecimal_literals() {
        assert_eq!(super::c_literal(1.0), "0x1.0000000000000p+0");
        assert_eq!(super::c_literal(-0.0), "-0.0");
        assert_eq!(super::c_literal(0.75), "0x1.8000000000000p-1");
        assert_eq!(
            super::c_literal(f64::MIN_POSITIVE / 2.0),
            "0x0.8000000000000p-1022"
        );
        assert_eq!(
            super::c_literal(std::f64::consts::PI),
            "0x1.921fb54442d18p+1"
        );
    }
}
