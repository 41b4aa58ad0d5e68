//! The nested Monte Carlo engine on one CUDA GPU: the CPU engine ([`crate::engine`])
//! step for step, with the outer and inner paths, cash flows, regression matrices,
//! solves, position values and exposure statistics kept in device memory.
//!
//! Per chunk of outer paths (sized from the device's free memory, halved on
//! out-of-memory; the buffers serve every chunk: [`GpuEngine::new`] allocates them
//! beside its NVRTC compiles, and the engine keeps them between runs): outer paths on the
//! device ([`GpuPaths`]); per exposure date `t_k`: the payoffs of the positions maturing
//! at `t_k`, the inner paths ([`GpuPaths::inner_paths`], the CPU's Philox streams and
//! layout), the European values, and for each American position the Longstaff–Schwartz
//! backward induction: cash flows at maturity, then per exercise date `j` the fused build
//! of `A`, `b` and the path counts ([`GpuRegression`]) from the discounted cash flows
//! `y`, the systems not to solve (not alive, or `counts < n`) replaced by `A = I`,
//! `b = 0`, the batched solve of all of them on the device
//! ([`GpuBatchSolver::solve_batched_gpu`], the scenario's strategy and parameters, the
//! escalation memory rule per position and exercise date as on the CPU), the step's
//! solver statistics reduced on the device, and the exercise update (fallback means and
//! the next step's `y` fused in); finally the value at `t_k` (continuation or exercise
//! along the outer path) added to the netted values, which stay on the device. Nothing
//! crosses the bus per regression step (but the escalating solver's reads of its list
//! lengths, see `GpuBatchSolver`): once per exposure date the steps' counts come
//! back (for the memory rule and `solver_stats.parquet`), once per chunk the residuals
//! (for the residual quantiles of `solver_stats.parquet`), and at the end the exposure
//! statistics are reduced on the device ([`estimate_on_device`]) and only the profile
//! comes back.
//!
//! Arithmetic follows the CPU engine (same sums in the same order, no FMA; the solver
//! kernels use FMA and agree with the CPU's solutions to rounding); states
//! differ from the CPU's by an ulp or two through CUDA's `exp`, `log`, `sin`, `cos`,
//! which can flip a rare exercise decision or solver branch: results agree with the
//! CPU's to far below the Monte Carlo error, not bitwise. The exposure statistics sum
//! over outer paths in another (fixed) order than [`exposure::estimate`].
//!
//! The path kernels run on a stream of their own, one exposure date ahead: the inner
//! paths of `t_{k+1}` (compute-bound) are generated while the engine stream runs the
//! regression steps of `t_k` (bound by the bandwidth of reading the states back), into
//! the other of two buffer sets (`ChunkBuffers`), ordered by events (the context does no
//! event tracking); the engine stream has the device's greatest priority, so that its
//! kernels' blocks are dispatched first and the path kernels fill the rest of the
//! device. The same kernels on the same inputs: the results are the same bits as with
//! one stream (`CVA_GPU_PATHS_STREAM=0`).
//!
//! Phase timings come from CUDA events between the launches (device time, including
//! the host's gaps between them), per stream: the paths phase overlaps the others, so
//! the phases add up to more than the wall time. `CVA_GPU_PROFILE=1` also prints them
//! per piece.
//!
//! The fused walk ([`GpuWalk`], the default where it serves; `CVA_GPU_WALK=0` turns it
//! off): for an American position it serves,
//! each exposure date's regression steps run as one kernel, one block per outer path
//! (build, solve and exercise with the states in shared memory), instead of the pipeline
//! above; the outer paths it flags (a system that fails `L D L^T`'s acceptance test after
//! a refinement step) then run through the pipeline, from the cash flows it left
//! untouched, with the build limited to them.
//!
//! Development switches (environment, read at start-up): `CVA_GPU_PROFILE=1` (above),
//! `CVA_GPU_WALK=0` (no fused walk: the pipeline for every position),
//! `CVA_GPU_PATHS_STREAM=0` (one stream), `CVA_GPU_DOUBLE=<piece>` (that piece launched
//! twice, for measuring its energy: [`GpuEngine::launches`]), `CVA_GPU_PAYOFF_PLANE=0`
//! (the low words stored where the payoff plane would replace them).

use crate::basis::BasisFunctions;
use crate::engine::{NestedSimulation, PhaseTimings, Progress, RegressionStepStats};
use crate::exposure::{self, CvaEstimate, DateFactors};
use crate::model::correlation_factor;
use crate::scenario::{OptionKind, Scenario, Style, Underlying};
use cva_kernels::cuda::engine::driver::{
    sys::{CUevent_flags, CUresult},
    CudaContext, CudaEvent, CudaSlice, CudaStream, CudaView, DriverError, PinnedHostSlice,
};
use cva_kernels::cuda::engine::{
    DeviceBasis, DevicePayoff, EngineKernels, StateView, StepRecord, STEP_RECORD_WORDS,
};
use cva_kernels::cuda::paths::{
    payoff_plane_possible, GpuPaths, MarketSteps, MaturityCash, PathsOptions,
};
use cva_kernels::cuda::regression::{
    BasisTables, GpuOptionKind, GpuPayoff, GpuRegression, GpuUnderlying, RegressionConfig,
    RegressionSpec,
};
use cva_kernels::cuda::walk::{GpuWalk, WalkOutputs, WalkShape, WALK_MAX_STEPS};
use cva_kernels::cuda::{GpuBatchSolver, GpuError, GpuOptions, GpuReal, GpuReport};
use cva_kernels::{BatchSummary, Method, Strategy};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Share of the device's free memory a chunk may use (the rest: solver workspaces,
/// fragmentation). Smaller chunks map less memory before the device starts and shorten
/// the first date's head and the last date's tail of the run; more chunks cost a
/// synchronisation and a commit each. Measured on an H100, basket29 f64 (benches/RESULTS.md,
/// "Thirteenth session, round 3"): 100k outer paths 0.663 s at 0.6 (3 chunks), 0.607 at 0.4,
/// 0.585 at 0.3 (6 chunks), 0.578 at 0.2, 0.609 at 0.1 (16 chunks); 1M 5.57 s at 0.6,
/// 5.53 at 0.3. 0.85 was slower still (ninth session). Re-measured in the twenty-fifth
/// session (100k: 0.2 within 1% of 0.3, 0.45 and up 4-29% slower; 1M: 0.45-0.6 1% faster).
/// With the buffers allocated at start-up and kept (thirty-fourth session, H200): 0.6 runs
/// 1.5% (100k) and 1.1% (1M) faster than 0.3, but its buffers take twice as long to
/// release when the engine is dropped (about 0.04 s at 0.3, 100k), more than the run gains.
const MEMORY_SHARE: f64 = 0.3;

/// [`MEMORY_SHARE`], or the development override `CVA_GPU_MEMORY_SHARE` (a number in
/// (0, 1]; anything else is ignored), for re-measuring the chunk size.
fn memory_share() -> f64 {
    std::env::var("CVA_GPU_MEMORY_SHARE")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s <= 1.0)
        .unwrap_or(MEMORY_SHARE)
}

struct American<T: GpuReal> {
    position: usize,
    n: usize,
    regression: GpuRegression<T>,
    basis: DeviceBasis,
    /// The fused walk ([`GpuWalk`]) where it serves the position (see [`walk_shape`]):
    /// it then runs the regression steps of each exposure date whose steps all start at
    /// `L D L^T` (the memory rule), and the pipeline runs those of the outer paths it
    /// flags.
    walk: Option<GpuWalk>,
}

/// The fused walk's shape for an American position with basis `basis`, or why the
/// pipeline serves it instead. The walk serves f64, the escalating strategy, the payoff
/// plane, a linear basis and the shapes of [`WalkShape::check`]; `CVA_GPU_WALK=0` turns
/// it off (the pipeline everywhere). Measured on an H200 (benches/RESULTS.md,
/// fifty-second session) for basket29 at 100,000 outer paths: 0.0733 s for the 3.6 M
/// regressions on one stream, 0.2193-0.2195 s of wall time with the path stream beside
/// it against the pipeline's 0.249 s (at 1,000,000: 2.218-2.224 s against 2.600 s).
fn walk_shape<T: GpuReal>(
    scenario: &Scenario,
    basis: &BasisTables,
    payoff_plane: bool,
) -> Result<WalkShape, String> {
    let sim = &scenario.simulation;
    if std::env::var_os("CVA_GPU_WALK").is_some_and(|v| v == "0") {
        return Err("off (CVA_GPU_WALK=0)".into());
    }
    if !T::IS_F64 {
        return Err("f32 precision".into());
    }
    if sim.strategy != Strategy::Escalating {
        return Err(format!("strategy {:?}", sim.strategy));
    }
    if !payoff_plane {
        return Err("no payoff plane".into());
    }
    if basis.parent.iter().skip(1).any(|&p| p != 0) {
        return Err("not a linear basis".into());
    }
    if scenario.exposure_dates > WALK_MAX_STEPS {
        return Err(format!(
            "{} exposure dates (the walk takes at most {WALK_MAX_STEPS} steps)",
            scenario.exposure_dates
        ));
    }
    let shape = WalkShape {
        d: scenario.market.assets.len(),
        m: sim.inner_paths,
        n: basis.len(),
        itm_only: sim.itm_only,
        assets: basis.var[1..].iter().map(|&v| basis.assets[v]).collect(),
        inv_spot: basis.var[1..].iter().map(|&v| basis.inv_spot[v]).collect(),
    };
    shape.check()?;
    Ok(shape)
}

/// The GPU engine after start-up: device context, compiled kernels, tables uploaded.
pub struct GpuEngine<T: GpuReal> {
    solver: GpuBatchSolver,
    paths: GpuPaths,
    kernels: EngineKernels,
    /// One per position of the portfolio.
    payoffs: Vec<DevicePayoff>,
    americans: Vec<American<T>>,
    /// The one American position whose cash flows at maturity the inner-path kernel
    /// writes instead of its last states (`GpuPaths::inner_paths_paying`): set when it is
    /// the only American position and the only position maturing at the last maturity
    /// date, so that nothing else reads those states and nothing else uses the cash
    /// buffers, and the market has the fixed path kernels.
    pays_at_maturity: Option<usize>,
    /// Test hook `CVA_GPU_TEST_OOM_ABOVE=<c>`: a chunk of more than `c` outer paths fails
    /// with the driver's out-of-memory error after queueing its second date's inner paths
    /// (work of both streams in flight), as a real one would in the solver's workspaces.
    test_oom_above: Option<usize>,
    /// Development switch `CVA_GPU_DOUBLE=paths|build|solve|exercise`: the piece that
    /// [`GpuEngine::launches`] launches twice per step.
    doubled: Option<String>,
    /// `discount[s] = e^{-r s dt}`, `s = 0..=N`, and its device copy.
    discount: Vec<f64>,
    discount_dev: CudaSlice<f64>,
    /// What a chunk's buffers hold.
    shape: ChunkShape,
    /// The chunk buffers: allocated at start-up, beside the NVRTC compiles; taken by
    /// [`GpuEngine::simulate`] for as many outer paths and put back at its end for the
    /// next run (`None` while a run holds them, or where they did not fit at start-up);
    /// released with the engine.
    kept: std::sync::Mutex<Option<KeptBuffers<T>>>,
    startup: std::time::Duration,
}

/// The phase a piece of device work is timed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Paths,
    Build,
    Solve,
    Exposure,
    /// The engine stream waiting (for the path stream, or idle while the host works between
    /// dates): in the profile only, booked to no phase.
    Wait,
}

/// Device timings from CUDA events recorded between the pieces of work: each mark
/// closes the interval since the previous one and books it to a phase (and, with
/// `CVA_GPU_PROFILE=1`, to a named piece, printed to stderr at the end). Intervals are
/// read at [`PhaseClock::flush`], once per exposure date.
struct PhaseClock {
    ctx: Arc<CudaContext>,
    events: Vec<CudaEvent>,
    /// `marks[i]` closes the interval from `events[i]` to `events[i + 1]`.
    marks: Vec<(Phase, &'static str)>,
    profile: Option<Vec<(&'static str, f64, usize)>>,
}

impl PhaseClock {
    fn new(ctx: &Arc<CudaContext>) -> Self {
        Self {
            ctx: ctx.clone(),
            events: Vec::new(),
            marks: Vec::new(),
            profile: std::env::var_os("CVA_GPU_PROFILE")
                .is_some_and(|v| v != "0")
                .then(Vec::new),
        }
    }

    fn record(&mut self, i: usize, stream: &CudaStream) -> Result<(), GpuError> {
        if self.events.len() <= i {
            self.events
                .push(self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?);
        }
        self.events[i].record(stream)?;
        Ok(())
    }

    /// Starts a new interval now (what was marked and not flushed is dropped).
    fn start(&mut self, stream: &CudaStream) -> Result<(), GpuError> {
        self.marks.clear();
        self.record(0, stream)
    }

    /// Starts a new interval now: with marks pending, by closing the interval since the
    /// last one as waiting time (`name` in the profile, in no phase), so that the marks
    /// of several intervals can wait for one flush.
    fn restart(&mut self, stream: &CudaStream, name: &'static str) -> Result<(), GpuError> {
        if self.marks.is_empty() {
            self.start(stream)
        } else {
            self.mark(stream, Phase::Wait, name)
        }
    }

    /// Closes the interval since the last mark as `phase` (`name` in the profile).
    fn mark(
        &mut self,
        stream: &CudaStream,
        phase: Phase,
        name: &'static str,
    ) -> Result<(), GpuError> {
        self.record(self.marks.len() + 1, stream)?;
        self.marks.push((phase, name));
        Ok(())
    }

    /// Waits for the marked work and books the intervals into `timings`.
    fn flush(&mut self, timings: &mut PhaseTimings) -> Result<(), GpuError> {
        let n = self.marks.len();
        if n == 0 {
            return Ok(());
        }
        for (i, &(phase, name)) in self.marks.iter().enumerate() {
            let ms = f64::from(self.events[i].elapsed_ms(&self.events[i + 1])?);
            let d = std::time::Duration::from_secs_f64(ms.max(0.0) * 1e-3);
            match phase {
                Phase::Paths => timings.paths += d,
                Phase::Build => timings.regression_build += d,
                Phase::Solve => timings.solve += d,
                Phase::Exposure => timings.exposure += d,
                Phase::Wait => {}
            }
            if let Some(p) = &mut self.profile {
                match p.iter_mut().find(|e| e.0 == name) {
                    Some(e) => {
                        e.1 += ms * 1e-3;
                        e.2 += 1;
                    }
                    None => p.push((name, ms * 1e-3, 1)),
                }
            }
        }
        self.events.swap(0, n);
        self.marks.clear();
        Ok(())
    }

    /// Books host time that no event measures (allocations), in the profile only.
    fn host(&mut self, name: &'static str, since: Instant) {
        if let Some(p) = &mut self.profile {
            let secs = since.elapsed().as_secs_f64();
            match p.iter_mut().find(|e| e.0 == name) {
                Some(e) => {
                    e.1 += secs;
                    e.2 += 1;
                }
                None => p.push((name, secs, 1)),
            }
        }
    }

    fn print(&self) {
        if let Some(p) = &self.profile {
            let total: f64 = p.iter().map(|e| e.1).sum();
            eprintln!("GPU engine profile (CUDA events): {total:.4} s in all");
            for (name, s, n) in p {
                eprintln!("  {name:<32} {s:>9.4} s {n:>7} intervals");
            }
        }
    }
}

/// Per-step statistics of one chunk, merged into the run's only when the chunk succeeded.
#[derive(Default)]
struct ChunkOutput {
    /// `(exposure date, exercise date, summary, too few paths)` per regression step of the
    /// chunk, in launch order: step `s`'s residuals are `[s * c..(s + 1) * c]` of
    /// `ChunkBuffers::residuals_host` (NaN: none), copied when the chunk completes.
    steps: Vec<(usize, usize, BatchSummary, usize)>,
    timings: PhaseTimings,
    outer_exercises: usize,
    /// Outer paths (summed over dates and positions) the fused walk flagged and the
    /// pipeline ran again.
    walk_flagged: usize,
}

/// The device buffers of a chunk of `c` outer paths (allocated once, reused by every
/// chunk).
struct ChunkBuffers<T: GpuReal> {
    c: usize,
    /// `[l][k][i]`, `k = 0..=N`.
    outer: CudaSlice<f64>,
    /// Inner states `[l][s][mm][i]` over the dates after `t_k` (each `[l][s]` block as
    /// two planes of words, see `cva_kernels::cuda::paths`), and the cash flows, their
    /// dates and the discounted cash flows `y` of the backward induction: set `k % 2` for
    /// exposure date `t_k`, so that the inner paths of `t_{k+1}` (path stream) are
    /// generated while the engine stream works on those of `t_k`. Set 1 serves odd `k`
    /// only, whose inner paths span one date fewer.
    inner: [CudaSlice<f64>; 2],
    cash: [CudaSlice<f64>; 2],
    cash_date: [CudaSlice<u32>; 2],
    y: [CudaSlice<f64>; 2],
    a: CudaSlice<T>,
    b: CudaSlice<T>,
    x: CudaSlice<T>,
    reports: CudaSlice<GpuReport>,
    counts: CudaSlice<u32>,
    /// `[l * m + mm]`: the payoff of every inner path at the regression step's date, as
    /// the build stores it for the exercise update that follows.
    payoffs: CudaSlice<f64>,
    /// `[p * c + l]`: position `p` alive on outer path `l`.
    alive: CudaSlice<u8>,
    /// One [`StepRecord`] per regression step of the chunk.
    records: CudaSlice<u64>,
    /// The fused walk's outputs: the outer paths it solved and those it flagged (`[l]`,
    /// masks), entering-path counts and reports `[s * c + l]` per step `s` of an exposure
    /// date, and the number flagged.
    walk_walked: CudaSlice<u8>,
    walk_fallback: CudaSlice<u8>,
    walk_counts: CudaSlice<u32>,
    walk_reports: CudaSlice<GpuReport>,
    walk_flagged: CudaSlice<u32>,
    /// `[step * c + l]`: residuals of the steps of the chunk, and a page-locked host
    /// copy.
    residuals: CudaSlice<f32>,
    residuals_host: PinnedHostSlice<f32>,
    exercises: CudaSlice<u64>,
}

/// What the chunk buffers of a scenario hold, from the scenario and its American
/// positions' `(position, basis size)`: enough to size and allocate them without the
/// compiled engine (so that start-up can allocate them beside the NVRTC compiles).
#[derive(Debug, Clone)]
struct ChunkShape {
    n_dates: usize,
    m: usize,
    d: usize,
    positions: usize,
    /// The largest basis size (1 without American positions).
    nmax: usize,
    /// Regression steps of a chunk: per American position maturing at `t_mi`,
    /// `mi - k - 1` at each exposure date `k < mi` with an inner stage.
    cap: usize,
    /// Dates the inner paths of one exposure date span at most, over the even dates
    /// (buffer set 0) and the odd ones (set 1).
    set_steps: [usize; 2],
    /// Regression steps of one position at one exposure date, at most (the walk's
    /// per-step buffers).
    walk_steps: usize,
}

impl ChunkShape {
    fn new(scenario: &Scenario, americans: &[(usize, usize)]) -> Self {
        let nmax = americans.iter().map(|&(_, n)| n).max().unwrap_or(1);
        let stages: Vec<(usize, usize)> = scenario.inner_stages().collect();
        let cap = americans
            .iter()
            .map(|&(p, _)| {
                let mi = scenario.portfolio[p].maturity_index;
                stages
                    .iter()
                    .filter(|&&(k, _)| k < mi)
                    .map(|&(k, _)| mi - k - 1)
                    .sum::<usize>()
            })
            .sum::<usize>()
            .max(1);
        let set_steps = [0, 1].map(|set| {
            stages
                .iter()
                .filter(|&&(k, _)| k % 2 == set)
                .map(|&(_, steps)| steps)
                .max()
                .unwrap_or(0)
        });
        Self {
            n_dates: scenario.exposure_dates,
            m: scenario.simulation.inner_paths,
            d: scenario.market.assets.len(),
            positions: scenario.portfolio.len(),
            nmax,
            cap,
            set_steps,
            walk_steps: scenario.exposure_dates.max(1),
        }
    }

    /// Device bytes per outer path of a chunk, with `es` bytes per element of the
    /// systems.
    fn bytes_per_path(&self, es: usize) -> usize {
        let (m, d, nmax) = (self.m, self.d, self.nmax);
        (self.set_steps[0] + self.set_steps[1]) * m * d * 8
            + (self.n_dates + 1) * d * 8
            + 2 * m * (8 + 4 + 8)
            + m * 8
            + (nmax * nmax + 2 * nmax) * es
            + std::mem::size_of::<GpuReport>()
            + 4
            + self.positions
            + self.cap * 8
            + self.walk_steps * (4 + std::mem::size_of::<GpuReport>())
            + 2
            + 64
    }

    /// Outer paths per chunk for `m0` outer paths with `free` bytes of device memory
    /// free: [`memory_share`] of it, at most 512 MiB of residuals on the host, and chunks
    /// of equal size (the smallest buffers for the fewest chunks).
    fn chunk_size(&self, free: usize, m0: usize, es: usize) -> usize {
        let residual_bytes = self.cap * 4;
        let most = ((free as f64 * memory_share()) as usize / self.bytes_per_path(es))
            .min((512 << 20) / residual_bytes)
            .clamp(1, m0.max(1));
        m0.max(1).div_ceil(m0.max(1).div_ceil(most))
    }

    /// The buffers of a chunk of `c` outer paths, allocated on `stream` (then
    /// synchronized: the path stream uses them too).
    fn buffers<T: GpuReal>(
        &self,
        stream: &Arc<CudaStream>,
        c: usize,
    ) -> Result<ChunkBuffers<T>, GpuError> {
        let (n_dates, m, d, nmax, cap, [steps0, steps1]) = (
            self.n_dates,
            self.m,
            self.d,
            self.nmax,
            self.cap,
            self.set_steps,
        );
        // SAFETY (both): plain f64 storage; every element a kernel reads was written by
        // `GpuPaths::inner_paths` for the same exposure date first.
        let inner = [
            unsafe { stream.alloc((c * steps0 * m * d).max(1)) }?,
            unsafe { stream.alloc((c * steps1 * m * d).max(1)) }?,
        ];
        let buffers = ChunkBuffers {
            c,
            outer: stream.alloc_zeros(c * (n_dates + 1) * d)?,
            inner,
            cash: [stream.alloc_zeros(c * m)?, stream.alloc_zeros(c * m)?],
            cash_date: [stream.alloc_zeros(c * m)?, stream.alloc_zeros(c * m)?],
            y: [stream.alloc_zeros(c * m)?, stream.alloc_zeros(c * m)?],
            a: stream.alloc_zeros(c * nmax * nmax)?,
            b: stream.alloc_zeros(c * nmax)?,
            x: stream.alloc_zeros(c * nmax)?,
            reports: stream.alloc_zeros(c)?,
            counts: stream.alloc_zeros(c)?,
            payoffs: stream.alloc_zeros(c * m)?,
            alive: stream.alloc_zeros(self.positions.max(1) * c)?,
            records: stream.alloc_zeros(cap * STEP_RECORD_WORDS)?,
            walk_walked: stream.alloc_zeros(c)?,
            walk_fallback: stream.alloc_zeros(c)?,
            walk_counts: stream.alloc_zeros(self.walk_steps * c)?,
            walk_reports: stream.alloc_zeros(self.walk_steps * c)?,
            walk_flagged: stream.alloc_zeros(1)?,
            residuals: stream.alloc_zeros(cap * c)?,
            // SAFETY: plain f32 storage, read only after a copy into it has completed
            // (`chunk` synchronizes the stream first); flags 0: cached, for reading on
            // the host.
            residuals_host: unsafe { stream.context().alloc_pinned_with_flags(cap * c, 0) }?,
            exercises: stream.alloc_zeros(1)?,
        };
        stream.synchronize()?;
        Ok(buffers)
    }
}

/// Chunk buffers kept by the engine between runs of `m0` outer paths (in chunks of
/// `buffers.c` outer paths).
struct KeptBuffers<T: GpuReal> {
    m0: usize,
    buffers: ChunkBuffers<T>,
}

/// The summary of a step, as [`BatchSummary::from_reports`] over its reports with the
/// solver's start level `start` (`start` itself where nothing was solved).
fn summary_from_record(
    r: &StepRecord,
    strategy: Strategy,
    start: Method,
    memory_fraction: f64,
) -> BatchSummary {
    let systems = r.systems as usize;
    let mut s = BatchSummary {
        systems,
        per_method: r.per_method.map(|v| v as usize),
        per_status: r.per_status.map(|v| v as usize),
        discarded_eigenvalues: r.discarded_eigenvalues as usize,
        max_residual: r.max_residual,
        next_start: match strategy {
            Strategy::Escalating => start,
            _ if systems == 0 => start,
            _ => Method::Ldlt,
        },
    };
    let threshold = (memory_fraction * systems as f64).max(1.0);
    for m in Method::ALL {
        if m > s.next_start && s.per_method[m as usize] as f64 >= threshold {
            s.next_start = m;
        }
    }
    s
}

fn gpu_payoff(scenario: &Scenario, p: usize) -> GpuPayoff {
    let pos = &scenario.portfolio[p];
    GpuPayoff {
        underlying: match &pos.underlying {
            Underlying::Asset(i) => GpuUnderlying::Asset(*i),
            Underlying::Basket(w) => GpuUnderlying::Basket(w.clone()),
            Underlying::Max(v) => GpuUnderlying::Max(v.clone()),
        },
        kind: match pos.kind {
            OptionKind::Call => GpuOptionKind::Call,
            OptionKind::Put => GpuOptionKind::Put,
        },
        strike: pos.strike,
    }
}

fn is_out_of_memory(e: &GpuError) -> bool {
    matches!(
        e,
        GpuError::Cuda(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY))
    )
}

/// The profile, CVA and `V_0` of the netted values `netted[k * outer_paths + l]`
/// (`k = 0..=N`) in device memory, as [`exposure::estimate`] computes them on the host:
/// the sums and Welford states are reduced on the device in a fixed order (so they agree
/// with the host's to rounding), the PFE's two order statistics are selected exactly
/// (radix select on the bits of `P^+`) and interpolated on the host as
/// [`exposure::quantile`] does. Only the per-date numbers are copied back.
///
/// # Errors
/// [`GpuError::Invalid`] for no outer paths or a short buffer, driver errors.
pub fn estimate_on_device(
    kernels: &EngineKernels,
    scenario: &Scenario,
    netted: &CudaView<f64>,
    outer_paths: usize,
) -> Result<CvaEstimate, GpuError> {
    let dates = scenario.exposure_dates + 1;
    let f = DateFactors::new(scenario);
    if outer_paths == 0 {
        return Err(GpuError::Invalid("no outer paths".into()));
    }
    let (lo, hi, h) = exposure::quantile_position(outer_paths, scenario.simulation.pfe_quantile);
    let ranks = vec![[lo as u64, hi as u64]; dates];
    let st = kernels.exposure_statistics(
        netted,
        (
            outer_paths,
            dates,
            scenario.simulation.value_t0.values_date(),
        ),
        (f.lgd, &f.discount, &f.default_probability),
        &ranks,
    )?;
    let inv = 1.0 / outer_paths as f64;
    let profile = (0..dates)
        .map(|k| {
            let [s, sp, sn] = st.sums[k];
            let [x_lo, x_hi] = st.order_statistics[k];
            let pfe = exposure::interpolate_quantile(x_lo, x_hi, lo, h);
            f.row(k, s * inv, sp * inv, sn * inv, pfe)
        })
        .collect();
    let welford = |w: [f64; 3]| exposure::welford_mean_std_error(w[0] as usize, w[1], w[2]);
    Ok(CvaEstimate::assemble(
        scenario,
        &f,
        profile,
        welford(st.cva),
        welford(st.value),
    ))
}

impl<T: GpuReal> GpuEngine<T> {
    /// Launches of a piece of work per step: 1, or 2 for the piece named by the
    /// development switch `CVA_GPU_DOUBLE=paths|build|solve|exercise` (read at start-up).
    /// The inner paths, the build and the solve rewrite the same outputs from the same
    /// inputs, so a doubled run gives the same results; so does the exercise, except for
    /// an outer path that falls back to the mean of y (fewer than n regression paths, or
    /// no solution), whose second launch averages the y the first one wrote (none does at
    /// basket29: the same bits, benches/RESULTS.md). The doubled run's extra time and
    /// energy are the piece's own. NVML's energy counter changes only every ~100 ms, far
    /// coarser than one run's pieces, so this is how the energy per piece is measured
    /// (thirty-seventh session).
    fn launches(&self, piece: &str) -> usize {
        if self.doubled.as_deref() == Some(piece) {
            2
        } else {
            1
        }
    }

    /// Start-up: opens device 0, compiles every kernel the scenario needs (paths,
    /// regression builds, engine kernels, solvers), uploads the market and tables, and
    /// allocates the chunk buffers for the scenario's `outer_paths` on a thread of its
    /// own beside the compiles (where they do not fit, [`GpuEngine::simulate`] allocates
    /// smaller ones).
    ///
    /// # Errors
    /// No device, NVRTC compile failures (with the log), driver errors, a basis larger
    /// than the kernels support.
    pub fn new(scenario: &Scenario) -> Result<Self, GpuError> {
        let t0 = Instant::now();
        let profile = std::env::var_os("CVA_GPU_PROFILE").is_some_and(|v| v != "0");
        let mut last = t0;
        let mut lap = |name: &str| {
            if profile {
                eprintln!(
                    "GPU start-up: {name:<40} {:>8.3} s",
                    last.elapsed().as_secs_f64()
                );
            }
            last = Instant::now();
        };
        let sim = &scenario.simulation;
        let mut solver = GpuBatchSolver::new(0)?;
        // The path kernels run on a stream of their own, so that the inner paths of the
        // next exposure date are generated while the engine stream (the solver's, of the
        // greatest priority: its kernels' blocks go first) runs the regression steps of
        // this one (`CVA_GPU_PATHS_STREAM=0`: on the engine stream, in turn).
        let two_streams = std::env::var_os("CVA_GPU_PATHS_STREAM").is_none_or(|v| v != "0");
        if two_streams {
            solver.use_priority_stream()?;
        }
        lap("driver, device probe, context");
        let stream = solver.stream().clone();
        let paths_stream = if two_streams {
            solver.context().new_stream()?
        } else {
            stream.clone()
        };
        let market = &scenario.market;
        let d = market.assets.len();
        let n_dates = scenario.exposure_dates;
        let dt = scenario.horizon / n_dates as f64;
        // The CPU's `Dynamics::new`, expression for expression.
        let spots: Vec<f64> = market.assets.iter().map(|a| a.spot).collect();
        let drift: Vec<f64> = market
            .assets
            .iter()
            .map(|a| (market.rate - a.dividend_yield - 0.5 * a.volatility * a.volatility) * dt)
            .collect();
        let vol: Vec<f64> = market
            .assets
            .iter()
            .map(|a| a.volatility * dt.sqrt())
            .collect();
        let identity = (0..d).all(|i| {
            (0..d).all(|j| market.correlation[i * d + j] == if i == j { 1.0 } else { 0.0 })
        });
        let factor = if identity {
            None
        } else {
            Some(correlation_factor(&market.correlation, d).map_err(GpuError::Invalid)?)
        };
        // Bases of the American positions (host tables only), hence the system sizes.
        let bases: Vec<(usize, BasisTables)> = scenario
            .portfolio
            .iter()
            .enumerate()
            .filter(|(_, pos)| pos.style == Style::American)
            .map(|(p, pos)| {
                let basis = BasisFunctions::new(sim.basis, pos.underlying.assets(), &spots)
                    .tables()
                    .clone();
                (p, basis)
            })
            .collect();
        let last_maturity = scenario.portfolio.iter().map(|p| p.maturity_index).max();
        let pays_candidate = match bases.as_slice() {
            [(p, _)]
                if scenario
                    .portfolio
                    .iter()
                    .filter(|q| Some(q.maturity_index) == last_maturity)
                    .count()
                    == 1
                    && Some(scenario.portfolio[*p].maturity_index) == last_maturity =>
            {
                Some(*p)
            }
            _ => None,
        };
        let market_steps = MarketSteps {
            spots: &spots,
            drift: &drift,
            vol: &vol,
            factor: factor.as_deref(),
        };
        // The payoff plane (`PathsOptions::payoff_plane`): a portfolio of one American
        // position, whose build and exercise then read the states' high words and the
        // payoffs the path kernel formed, not the low words (`CVA_GPU_PAYOFF_PLANE=0`
        // stores the low words as for other portfolios: the same bits).
        let payoff_plane = scenario.portfolio.len() == 1
            && pays_candidate.is_some_and(|p| {
                payoff_plane_possible(&market_steps, &gpu_payoff(scenario, p), sim.inner_paths)
            })
            && std::env::var_os("CVA_GPU_PAYOFF_PLANE").is_none_or(|v| v != "0");
        // The fused walk's shape per American position (or why not).
        let walk_shapes: Vec<Result<WalkShape, String>> = bases
            .iter()
            .map(|(_, b)| walk_shape::<T>(scenario, b, payoff_plane))
            .collect();
        let shape = ChunkShape::new(
            scenario,
            &bases.iter().map(|(p, b)| (*p, b.len())).collect::<Vec<_>>(),
        );
        let mut ns: Vec<usize> = bases.iter().map(|(_, b)| b.len()).collect();
        ns.sort_unstable();
        ns.dedup();
        // Every solver kernel the strategy may use, compiled in one parallel batch (the
        // slowest NVRTC compiles of the start-up) on a thread of its own while this one
        // compiles the paths, engine and build kernels: a cold start-up costs about the
        // longest single compile instead of the sum.
        let mut solver_keys = Vec::new();
        for &n in &ns {
            solver_keys.extend(solver.kernel_keys::<T>(n, sim.strategy, &GpuOptions::default())?);
        }
        // The chunk buffers of the run (mapping tens of GB takes tens of milliseconds on
        // a large device) are allocated on a thread of their own while the kernels
        // compile, from the free memory before the modules load (they take little of
        // it: a chunk takes `memory_share()` of the free memory). Out of memory here
        // only leaves the allocation to `simulate`, which then halves the chunks.
        let m0 = sim.outer_paths;
        let es = std::mem::size_of::<T>();
        let (compiled, rest, kept) = std::thread::scope(|scope| {
            let preallocate = scope.spawn(|| -> Result<_, GpuError> {
                let t = Instant::now();
                let (free, _) = stream.context().mem_get_info()?;
                let chunk = shape.chunk_size(free, m0, es);
                let buffers = match shape.buffers::<T>(&stream, chunk) {
                    Ok(buffers) => Some(KeptBuffers { m0, buffers }),
                    Err(e) if is_out_of_memory(&e) => None,
                    Err(e) => return Err(e),
                };
                Ok((buffers, t.elapsed()))
            });
            let solver_compiles = scope.spawn(|| {
                let t = Instant::now();
                solver
                    .modules()
                    .precompile(&solver_keys)
                    .map(|()| t.elapsed())
            });
            let paths_compile = scope.spawn(|| {
                let t = Instant::now();
                let payoff = pays_candidate.map(|p| gpu_payoff(scenario, p));
                let options = PathsOptions {
                    payoff: payoff.as_ref(),
                    antithetic: sim.antithetic,
                    payoff_plane,
                    ..PathsOptions::default()
                };
                GpuPaths::with_options(&paths_stream, &market_steps, sim.seed, options)
                    .map(|p| (p, t.elapsed()))
            });
            let rest = (|| -> Result<_, GpuError> {
                let t = Instant::now();
                let kernels = EngineKernels::new(&stream)?;
                let t_kernels = t.elapsed();
                let payoffs = (0..scenario.portfolio.len())
                    .map(|p| DevicePayoff::new(&stream, &gpu_payoff(scenario, p)))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut americans = Vec::new();
                for ((p, basis), walk_shape) in bases.iter().zip(&walk_shapes) {
                    let spec = RegressionSpec {
                        basis: basis.clone(),
                        payoff: gpu_payoff(scenario, *p),
                        itm_only: sim.itm_only,
                        assets: d,
                        inner_paths: sim.inner_paths,
                        payoff_plane,
                    };
                    let regression =
                        GpuRegression::<T>::new(&stream, &spec, RegressionConfig::from_env()?)?;
                    // No walk for the shape, or a device without sm_90 or the shared
                    // memory: the pipeline.
                    let walk = match walk_shape
                        .clone()
                        .map_err(GpuError::Invalid)
                        .and_then(|shape| GpuWalk::new(&stream, &shape))
                    {
                        Ok(w) => Some(w),
                        Err(GpuError::Invalid(why)) => {
                            if profile {
                                eprintln!("GPU start-up: no fused walk: {why}");
                            }
                            None
                        }
                        Err(e) => return Err(e),
                    };
                    americans.push(American {
                        position: *p,
                        n: basis.len(),
                        regression,
                        basis: DeviceBasis::new(&stream, basis)?,
                        walk,
                    });
                }
                Ok((kernels, t_kernels, payoffs, americans, t.elapsed()))
            })();
            let solver_compiled = solver_compiles
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            let paths_compiled = paths_compile
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            let kept = preallocate
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            ((solver_compiled, paths_compiled), rest, kept)
        });
        let t_solver = compiled.0?;
        let (paths, t_paths) = compiled.1?;
        let (kernels, t_kernels, payoffs, americans, t_rest) = rest?;
        let (kept, t_alloc) = kept?;
        if profile {
            for (name, t) in [
                ("  solver kernels (NVRTC, own thread)", t_solver),
                ("  paths module (NVRTC, own thread)", t_paths),
                ("  engine kernels (NVRTC)", t_kernels),
                ("  engine kernels, payoffs, builds (NVRTC)", t_rest),
                ("  chunk buffers (own thread)", t_alloc),
            ] {
                eprintln!("GPU start-up: {name:<40} {:>8.3} s", t.as_secs_f64());
            }
        }
        lap("all compiles (in parallel)");
        let discount: Vec<f64> = (0..=n_dates)
            .map(|s| (-scenario.market.rate * dt * s as f64).exp())
            .collect();
        let discount_dev = stream.clone_htod(&discount)?;
        stream.synchronize()?;
        paths.stream().synchronize()?;
        lap("discount upload, synchronisation");
        let pays_at_maturity = pays_candidate.filter(|_| paths.pays_at_maturity());
        Ok(Self {
            solver,
            paths,
            kernels,
            payoffs,
            americans,
            pays_at_maturity,
            test_oom_above: std::env::var("CVA_GPU_TEST_OOM_ABOVE")
                .ok()
                .and_then(|v| v.parse().ok()),
            doubled: std::env::var("CVA_GPU_DOUBLE").ok(),
            discount,
            discount_dev,
            shape,
            kept: std::sync::Mutex::new(kept),
            startup: t0.elapsed(),
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.solver.device().name
    }

    /// Time [`GpuEngine::new`] took (context, NVRTC compiles, uploads).
    pub fn startup_time(&self) -> std::time::Duration {
        self.startup
    }

    /// The engine kernels (for [`estimate_on_device`] on other data).
    pub fn kernels(&self) -> &EngineKernels {
        &self.kernels
    }

    /// Runs the nested simulation of `scenario` (the one given to [`GpuEngine::new`]) and
    /// its estimate ([`estimate_on_device`]). The netted values stay on the device:
    /// `netted_values` of the result is empty.
    ///
    /// # Errors
    /// Driver, launch or allocation errors (out-of-memory is retried with smaller chunks
    /// down to one outer path).
    pub fn simulate(
        &self,
        scenario: &Scenario,
        progress: &dyn Progress,
    ) -> Result<(NestedSimulation, CvaEstimate), GpuError> {
        let m0 = scenario.simulation.outer_paths;
        let n_dates = scenario.exposure_dates;
        let stream = self.solver.stream();
        let mut clock = PhaseClock::new(self.solver.context());
        // The path stream's own clock (its intervals overlap the engine stream's).
        let mut pclock = PhaseClock::new(self.solver.context());
        let t_setup = Instant::now();
        let mut netted = stream.alloc_zeros::<f64>((n_dates + 1) * m0.max(1))?;
        // The engine's buffers where they were sized for as many outer paths (else
        // released before the free memory is read: the stream-ordered pool gives freed
        // memory back at a synchronisation).
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let (mut chunk, mut bufs) = match kept {
            Some(k) if k.m0 == m0 => (k.buffers.c, Some(k.buffers)),
            other => {
                if other.is_some() {
                    drop(other);
                    stream.synchronize()?;
                }
                let (free, _) = self.solver.context().mem_get_info()?;
                (
                    self.shape.chunk_size(free, m0, std::mem::size_of::<T>()),
                    None,
                )
            }
        };
        clock.host("host: netted values, memory query", t_setup);
        let mut start_level = vec![vec![Method::Ldlt; n_dates + 1]; self.americans.len()];
        let mut timings = PhaseTimings::default();
        let mut outer_exercises = 0;
        let mut walk_flagged = 0;
        let mut steps: Vec<RegressionStepStats> = Vec::new();
        let mut index: HashMap<(usize, usize), usize> = HashMap::new();
        let mut c0 = 0;
        while c0 < m0 {
            let c = chunk.min(m0 - c0);
            if bufs.as_ref().is_none_or(|b| b.c < c) {
                bufs = None;
                let t = Instant::now();
                let allocated = self.shape.buffers::<T>(stream, chunk);
                clock.host("host: chunk buffers allocation", t);
                match allocated {
                    Ok(b) => bufs = Some(b),
                    Err(e) if is_out_of_memory(&e) && chunk > 1 => {
                        progress.note(&format!(
                            "GPU: out of memory allocating chunks of {chunk} outer paths; retrying with {}",
                            chunk / 2
                        ));
                        chunk /= 2;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let Some(b) = bufs.as_mut() else {
                unreachable!("buffers allocated above")
            };
            progress.chunk_started(c, n_dates);
            let mut out = ChunkOutput::default();
            let mut levels = start_level.clone();
            clock.start(stream)?;
            let t_chunk = Instant::now();
            let done = self.chunk(
                scenario,
                b,
                &mut netted,
                (m0, c0, c),
                &mut levels,
                progress,
                (&mut clock, &mut pclock),
                &mut out,
            );
            // Host time of the chunk, against the sum of its intervals (profile only).
            clock.host("host: chunk, all", t_chunk);
            match done {
                Ok(()) => {}
                Err(e) if is_out_of_memory(&e) && c > 1 => {
                    // The path stream may still be writing the next date's inner paths
                    // into these buffers, and their memory is released in the engine
                    // stream's order only (no event tracking): wait for both first.
                    self.paths.stream().synchronize()?;
                    stream.synchronize()?;
                    progress.note(&format!(
                        "GPU: out of memory in a chunk of {c} outer paths; retrying with {}",
                        c / 2
                    ));
                    chunk = c / 2;
                    bufs = None;
                    continue;
                }
                Err(e) => return Err(e),
            }
            let t_commit = Instant::now();
            // The chunk's steps into the run's (one row per (k, j): the American positions
            // of a netting set share it); then their residuals, NaN (none) left out, in
            // one parallel pass over the page-locked copy straight into each row's
            // vector (rows in parallel, each row's slots in launch order).
            let mut slots: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
            for (s, (k, j, summary, too_few)) in out.steps.into_iter().enumerate() {
                let idx = *index.entry((k, j)).or_insert_with(|| {
                    steps.push(RegressionStepStats {
                        exposure_date: k,
                        exercise_date: j,
                        ..Default::default()
                    });
                    slots.push(Vec::new());
                    steps.len() - 1
                });
                let st = &mut steps[idx];
                st.summary.merge(&summary);
                st.too_few_paths += too_few;
                slots[idx].push(s);
            }
            let host = b.residuals_host.as_slice()?;
            steps.par_iter_mut().zip(&slots).for_each(|(st, sl)| {
                for &s in sl {
                    let r = &host[s * c..(s + 1) * c];
                    st.residuals.reserve(c);
                    st.residuals
                        .extend(r.iter().copied().filter(|v| !v.is_nan()));
                }
            });
            timings.paths += out.timings.paths;
            timings.regression_build += out.timings.regression_build;
            timings.solve += out.timings.solve;
            timings.exposure += out.timings.exposure;
            outer_exercises += out.outer_exercises;
            walk_flagged += out.walk_flagged;
            start_level = levels;
            clock.host("host: chunk commits", t_commit);
            progress.chunk_done(c);
            c0 += c;
        }
        if walk_flagged > 0 {
            progress.note(&format!(
                "GPU fused walk: {walk_flagged} (outer path, exposure date) walks had a system \
                 fail L D L^T's acceptance test and ran through the escalating pipeline"
            ));
        }
        // The buffers stay with the engine for its next run (released when it is
        // dropped): releasing tens of GB unmaps them at the next synchronisation, which
        // took 0.04 s of the 100k run on an H200 (benches/RESULTS.md, thirty-fourth
        // session).
        *self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            bufs.map(|buffers| KeptBuffers { m0, buffers });
        let t = Instant::now();
        clock.start(stream)?;
        let estimate = estimate_on_device(&self.kernels, scenario, &netted.as_view(), m0)?;
        clock.mark(stream, Phase::Exposure, "exposure statistics")?;
        clock.flush(&mut timings)?;
        clock.host("host: exposure statistics", t);
        clock.host("host: simulate, all", t_setup);
        clock.print();
        pclock.print();
        steps.sort_by_key(|s| (s.exposure_date, s.exercise_date));
        Ok((
            NestedSimulation {
                netted_values: Vec::new(),
                outer_paths: m0,
                steps,
                timings,
                outer_exercises,
                captured: None,
            },
            estimate,
        ))
    }

    /// Queues on the path stream the inner paths of exposure date `k` for the chunk's
    /// outer paths `c0..c0+c` into set `k % 2` of `b` (with the cash flows at maturity
    /// where the path kernel pays them), timed on `pclock`. Returns an event recorded
    /// after them, or `None` when no position lives past `t_k` (nothing queued).
    fn queue_inner_paths(
        &self,
        scenario: &Scenario,
        b: &mut ChunkBuffers<T>,
        (c0, c): (usize, usize),
        k: usize,
        pclock: &mut PhaseClock,
    ) -> Result<Option<CudaEvent>, GpuError> {
        let positions = &scenario.portfolio;
        let Some(last) = scenario.inner_stage_end(k) else {
            return Ok(None);
        };
        let (n_dates, m, d) = (
            scenario.exposure_dates,
            scenario.simulation.inner_paths,
            scenario.market.assets.len(),
        );
        let outer_stride = (n_dates + 1) * d;
        let steps = last - k;
        let stride = steps * m * d;
        let set = k % 2;
        let pstream = self.paths.stream();
        // The path stream's clock is flushed once per chunk (a flush waits for the marked
        // work, and the inner paths of t_{k+2} are queued before the host's wait at the end
        // of t_k): the time since its last mark, waiting for a set or for the host, is
        // booked to no phase.
        pclock.restart(pstream, "path stream waiting (set or host)")?;
        // The cash flows at maturity straight from the inner-path kernel (see
        // `pays_at_maturity`): its position is the one maturing at `last`.
        for _ in 0..self.launches("paths") {
            if let Some(p) = self.pays_at_maturity {
                let mi = positions[p].maturity_index;
                debug_assert_eq!(mi, last);
                self.paths.inner_paths_paying(
                    c0 as u32,
                    k as u32,
                    &b.outer.slice(k * d..),
                    outer_stride,
                    (c, m, steps),
                    &mut b.inner[set].slice_mut(0..c * stride),
                    MaturityCash {
                        date: mi as u32,
                        next_df: (mi - 1 > k).then(|| self.discount[1]),
                        cash: &mut b.cash[set].slice_mut(0..c * m),
                        cash_date: &mut b.cash_date[set].slice_mut(0..c * m),
                        y: &mut b.y[set].slice_mut(0..c * m),
                    },
                )?;
            } else {
                self.paths.inner_paths(
                    c0 as u32,
                    k as u32,
                    &b.outer.slice(k * d..),
                    outer_stride,
                    c,
                    m,
                    steps,
                    &mut b.inner[set].slice_mut(0..c * stride),
                )?;
            }
        }
        pclock.mark(pstream, Phase::Paths, "inner paths")?;
        Ok(Some(pstream.record_event(Some(
            CUevent_flags::CU_EVENT_DISABLE_TIMING,
        ))?))
    }

    /// Outer paths `c0..c0+c` of `m0`, all dates: netted values into
    /// `netted[k * m0 + c0 + l]`, statistics into `out`.
    #[allow(clippy::too_many_lines, clippy::too_many_arguments)]
    fn chunk(
        &self,
        scenario: &Scenario,
        bufs: &mut ChunkBuffers<T>,
        netted: &mut CudaSlice<f64>,
        (m0, c0, c): (usize, usize, usize),
        start_level: &mut [Vec<Method>],
        progress: &dyn Progress,
        (clock, pclock): (&mut PhaseClock, &mut PhaseClock),
        out: &mut ChunkOutput,
    ) -> Result<(), GpuError> {
        let sim = &scenario.simulation;
        let positions = &scenario.portfolio;
        let stream = self.solver.stream();
        let (n_dates, m, d) = (
            scenario.exposure_dates,
            sim.inner_paths,
            scenario.market.assets.len(),
        );
        let outer_stride = (n_dates + 1) * d;
        let discount = self.discount_dev.as_view();
        let timings = &mut out.timings;
        let b = bufs;

        // (exposure date, American position, exercise date, start level) of the chunk's
        // regression steps, in launch order, and their summaries.
        let mut chunk_steps: Vec<(usize, usize, usize, Method)> = Vec::new();
        let mut summaries: Vec<(BatchSummary, usize)> = Vec::new();
        stream.memset_zeros(&mut b.records)?;
        let ones = vec![1u8; positions.len() * c];
        stream.memcpy_htod(&ones, &mut b.alive.slice_mut(0..positions.len() * c))?;
        stream.memset_zeros(&mut b.exercises)?;
        clock.mark(stream, Phase::Exposure, "chunk set-up")?;
        let pstream = self.paths.stream();
        let two_streams = !Arc::ptr_eq(pstream, stream);
        // The context does no event tracking (GpuBatchSolver::new): the two streams are
        // ordered here with events. The path stream first waits for the engine stream's
        // work so far (the previous chunk's reads of the outer states and both sets).
        if two_streams {
            pstream.join(stream)?;
        }
        pclock.start(pstream)?;
        self.paths.outer_paths(
            c0 as u32,
            c,
            n_dates,
            &mut b.outer.slice_mut(0..c * outer_stride),
        )?;
        pclock.mark(pstream, Phase::Paths, "outer paths")?;
        // The path stream runs one exposure date ahead: the inner paths of t_{k+1} are
        // queued before the engine stream's work of t_k. The context tracks no events
        // (cudarc's tracking is off), so these events are the only order between the
        // streams: the path stream writes set s only after `set_free[s]` (the engine
        // stream's last use of it, one date earlier), and the engine stream reads it only
        // after `inner_ready[s]`.
        let mut inner_ready: [Option<CudaEvent>; 2] = [None, None];
        // `set_free[s]`: recorded on the engine stream after its last use of set s.
        let mut set_free: [Option<CudaEvent>; 2] = [None, None];
        inner_ready[0] = self.queue_inner_paths(scenario, b, (c0, c), 0, pclock)?;
        // The last exposure date whose inner paths are queued.
        let mut queued = 0;
        if two_streams {
            // The outer states (and the first date's inner paths, needed next anyway).
            stream.join(pstream)?;
        }

        for k in 0..=n_dates {
            if k < n_dates && queued < k + 1 {
                if let Some(free) = set_free[(k + 1) % 2].take() {
                    pstream.wait(&free)?;
                }
                inner_ready[(k + 1) % 2] =
                    self.queue_inner_paths(scenario, b, (c0, c), k + 1, pclock)?;
                queued = k + 1;
                if k == 0 && self.test_oom_above.is_some_and(|t| c > t) {
                    return Err(GpuError::Cuda(DriverError(
                        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                    )));
                }
            }
            let set = k % 2;
            // Closes the interval since the engine stream's last work (the previous date's,
            // or the chunk's start): the stream idles while the host waits at the end of the
            // previous date (step counts, clock flushes) and queues this one, and, with one
            // stream, runs the path kernels queued above (timed on `pclock`). Booked to no
            // phase, so that `pay maturing` is that work alone.
            clock.mark(stream, Phase::Wait, "engine stream idle between dates")?;
            let mut values = netted.slice_mut(k * m0 + c0..k * m0 + c0 + c);
            stream.memset_zeros(&mut values)?;
            let outer_k = b.outer.slice(k * d..c * outer_stride);
            for (p, pos) in positions.iter().enumerate() {
                if pos.maturity_index == k {
                    self.kernels.pay_maturing(
                        (&outer_k, outer_stride, d),
                        &self.payoffs[p],
                        pos.quantity,
                        &mut b.alive.slice_mut(p * c..(p + 1) * c),
                        &mut values,
                    )?;
                }
            }
            clock.mark(stream, Phase::Exposure, "pay maturing")?;
            let Some(last) = scenario.inner_stage_end(k) else {
                clock.flush(timings)?;
                if k < n_dates {
                    progress.date_done();
                }
                continue;
            };
            let steps = last - k;
            let stride = steps * m * d;
            if let Some(ready) = inner_ready[set].take() {
                stream.wait(&ready)?;
                clock.mark(stream, Phase::Wait, "wait for inner paths")?;
            }
            let inner = &b.inner[set];
            let at = |j: usize| inner.slice((j - k - 1) * m * d..c * stride);

            // European positions: discounted payoff averages.
            for (p, pos) in positions.iter().enumerate() {
                if pos.style != Style::European || pos.maturity_index <= k {
                    continue;
                }
                let mi = pos.maturity_index;
                let states = at(mi);
                let view = StateView {
                    states: &states,
                    stride,
                    c,
                    m,
                    d,
                };
                self.kernels.european(
                    view,
                    &self.payoffs[p],
                    &b.alive.slice(p * c..(p + 1) * c),
                    (pos.quantity, self.discount[mi - k]),
                    &mut values,
                )?;
                clock.mark(stream, Phase::Exposure, "european values")?;
            }

            // American positions: backward induction on the inner paths.
            let s0 = chunk_steps.len();
            for (a, am) in self.americans.iter().enumerate() {
                let p = am.position;
                let pos = &positions[p];
                let mi = pos.maturity_index;
                if mi <= k {
                    continue;
                }
                let n = am.n;
                let payoff = &self.payoffs[p];
                let alive = b.alive.slice(p * c..(p + 1) * c);
                if self.pays_at_maturity != Some(p) {
                    let states = at(mi);
                    let view = StateView {
                        states: &states,
                        stride,
                        c,
                        m,
                        d,
                    };
                    self.kernels.cash_init(
                        view,
                        payoff,
                        mi as u32,
                        (mi - 1 > k).then(|| (mi - 1) as u32),
                        &discount,
                        &mut b.cash[set].slice_mut(0..c * m),
                        &mut b.cash_date[set].slice_mut(0..c * m),
                        &mut b.y[set].slice_mut(0..c * m),
                    )?;
                    clock.mark(stream, Phase::Exposure, "cash init")?;
                }
                // The fused walk where it serves the position and every step of the date
                // starts at L D L^T (the memory rule); its flagged outer paths then go
                // through the pipeline, from the cash flows the walk left untouched.
                let walk = am.walk.as_ref().filter(|_| {
                    mi > k + 1 && (k + 1..mi).all(|j| start_level[a][j] == Method::Ldlt)
                });
                let walked = if let Some(walk) = walk {
                    let steps_w = mi - k - 1;
                    let s_first = chunk_steps.len();
                    let params = &sim.solver_params;
                    stream.memset_zeros(&mut b.walk_flagged)?;
                    walk.walk(
                        (&inner.slice(0..c * stride), stride, c),
                        (steps_w, (k + 1) as u32),
                        &discount,
                        &alive,
                        (
                            &mut b.cash[set].slice_mut(0..c * m),
                            &mut b.cash_date[set].slice_mut(0..c * m),
                            &b.y[set].slice(0..c * m),
                        ),
                        (
                            params.tolerance::<f64>(n),
                            params.escalation_condition::<f64>(),
                        ),
                        WalkOutputs {
                            walked: &mut b.walk_walked.slice_mut(0..c),
                            fallback: &mut b.walk_fallback.slice_mut(0..c),
                            flagged: &mut b.walk_flagged.slice_mut(0..1),
                            counts: &mut b.walk_counts.slice_mut(0..steps_w * c),
                            reports: &mut b.walk_reports.slice_mut(0..steps_w * c),
                        },
                    )?;
                    // Named by the number of steps (the profile's per-piece times).
                    const WALK_PIECES: [&str; 10] = [
                        "walk (build, solve, exercise), 1 step",
                        "walk (build, solve, exercise), 2 steps",
                        "walk (build, solve, exercise), 3 steps",
                        "walk (build, solve, exercise), 4 steps",
                        "walk (build, solve, exercise), 5 steps",
                        "walk (build, solve, exercise), 6 steps",
                        "walk (build, solve, exercise), 7 steps",
                        "walk (build, solve, exercise), 8 steps",
                        "walk (build, solve, exercise), 9 steps",
                        "walk (build, solve, exercise), 10+ steps",
                    ];
                    clock.mark(stream, Phase::Build, WALK_PIECES[steps_w.min(10) - 1])?;
                    for j in (k + 1..mi).rev() {
                        let s = chunk_steps.len();
                        let sw = j - k - 1;
                        self.kernels.step_summary(
                            n,
                            &b.walk_reports.slice(sw * c..(sw + 1) * c),
                            &b.walk_walked.slice(0..c),
                            &b.walk_counts.slice(sw * c..(sw + 1) * c),
                            &mut b
                                .records
                                .slice_mut(s * STEP_RECORD_WORDS..(s + 1) * STEP_RECORD_WORDS),
                            &mut b.residuals.slice_mut(s * c..(s + 1) * c),
                            false,
                        )?;
                        chunk_steps.push((k, a, j, Method::Ldlt));
                    }
                    clock.mark(stream, Phase::Solve, "walk step statistics")?;
                    let flagged = stream.clone_dtoh(&b.walk_flagged)?[0];
                    clock.mark(stream, Phase::Exposure, "walk flag count copy")?;
                    out.walk_flagged += flagged as usize;
                    Some((s_first, flagged))
                } else {
                    None
                };
                // One regression step through the pipeline (build, select, escalating
                // solve, statistics, exercise) for the outer paths of `alive`, its
                // statistics into record `slot`; with `fallback`, for the outer paths the
                // walk flagged, its statistics added to the walk's.
                let mut pipeline_step = |j: usize,
                                         start: Method,
                                         fallback: bool,
                                         slot: usize,
                                         clock: &mut PhaseClock|
                 -> Result<(), GpuError> {
                    let s = slot;
                    let fallback_mask = b.walk_fallback.slice(0..c);
                    let alive = if fallback { &fallback_mask } else { &alive };
                    let keep = fallback;
                    let states = at(j);
                    let view = StateView {
                        states: &states,
                        stride,
                        c,
                        m,
                        d,
                    };
                    for _ in 0..self.launches("build") {
                        am.regression.build_active(
                            &states,
                            stride,
                            &b.y[set].slice(0..c * m),
                            c,
                            (
                                &mut b.a.slice_mut(0..c * n * n),
                                &mut b.b.slice_mut(0..c * n),
                                &mut b.counts.slice_mut(0..c),
                                &mut b.payoffs.slice_mut(0..c * m),
                            ),
                            fallback.then_some(alive),
                        )?;
                    }
                    clock.mark(stream, Phase::Build, "regression build")?;
                    self.kernels.select::<T>(
                        n,
                        alive,
                        &b.counts.slice(0..c),
                        &mut b.a.slice_mut(0..c * n * n),
                        &mut b.b.slice_mut(0..c * n),
                    )?;
                    clock.mark(stream, Phase::Build, "select (identity systems)")?;

                    let options = GpuOptions {
                        start,
                        // Skip the empty escalation levels (see the option).
                        host_list_lengths: true,
                        ..GpuOptions::default()
                    };
                    for _ in 0..self.launches("solve") {
                        self.solver.solve_batched_gpu::<T>(
                            n,
                            &b.a.slice(0..c * n * n),
                            &b.b.slice(0..c * n),
                            &mut b.x.slice_mut(0..c * n),
                            &mut b.reports.slice_mut(0..c),
                            sim.strategy,
                            &sim.solver_params,
                            &options,
                        )?;
                    }
                    clock.mark(stream, Phase::Solve, "solve")?;
                    self.kernels.step_summary(
                        n,
                        &b.reports.slice(0..c),
                        alive,
                        &b.counts.slice(0..c),
                        &mut b
                            .records
                            .slice_mut(s * STEP_RECORD_WORDS..(s + 1) * STEP_RECORD_WORDS),
                        &mut b.residuals.slice_mut(s * c..(s + 1) * c),
                        keep,
                    )?;
                    clock.mark(stream, Phase::Solve, "step statistics")?;

                    for _ in 0..self.launches("exercise") {
                        self.kernels.exercise::<T>(
                            view,
                            payoff,
                            sim.itm_only,
                            &am.basis,
                            &b.x.slice(0..c * n),
                            &b.reports.slice(0..c),
                            alive,
                            &b.counts.slice(0..c),
                            &b.payoffs.slice(0..c * m),
                            &discount,
                            (j as u32, (j - 1 > k).then(|| (j - 1) as u32)),
                            &mut b.y[set].slice_mut(0..c * m),
                            &mut b.cash[set].slice_mut(0..c * m),
                            &mut b.cash_date[set].slice_mut(0..c * m),
                        )?;
                    }
                    clock.mark(stream, Phase::Exposure, "exercise")?;
                    Ok(())
                };
                match walked {
                    Some((s_first, flagged)) if flagged > 0 => {
                        for j in (k + 1..mi).rev() {
                            let slot = s_first + (mi - 1 - j);
                            pipeline_step(j, start_level[a][j], true, slot, clock)?;
                        }
                    }
                    Some(_) => {}
                    None => {
                        for j in (k + 1..mi).rev() {
                            let start = start_level[a][j];
                            pipeline_step(j, start, false, chunk_steps.len(), clock)?;
                            chunk_steps.push((k, a, j, start));
                        }
                    }
                }

                // Value at t_k: continuation, or exercise along the outer path.
                self.kernels.american_value(
                    (
                        &b.cash[set].slice(0..c * m),
                        &b.cash_date[set].slice(0..c * m),
                    ),
                    &discount,
                    (k as u32, m),
                    (&outer_k, outer_stride, d),
                    payoff,
                    (pos.quantity, k >= 1),
                    &mut b.alive.slice_mut(p * c..(p + 1) * c),
                    &mut values,
                    &mut b.exercises.as_view_mut(),
                )?;
                clock.mark(stream, Phase::Exposure, "american value")?;
            }

            if two_streams {
                set_free[set] =
                    Some(stream.record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))?);
                // The inner paths of t_{k+2} (the same set) go on the path stream now,
                // behind the event that frees the set, before the host waits for this
                // date's step counts below: the path kernel can then run through the
                // host's turnaround between dates, when the inner paths of t_{k+1} are
                // usually done already (H100, basket29: 100k -2.5%, 1M -1.5%;
                // benches/RESULTS.md, twenty-first session, round 11). The same kernels in
                // the same order on each stream: the same bits.
                if k + 2 <= n_dates {
                    if let Some(free) = set_free[set].take() {
                        pstream.wait(&free)?;
                    }
                    inner_ready[set] =
                        self.queue_inner_paths(scenario, b, (c0, c), k + 2, pclock)?;
                    queued = k + 2;
                }
            }
            // The date's step counts (one copy per exposure date): the memory rule
            // needs them before the next date's solves.
            let s1 = chunk_steps.len();
            if s1 > s0 {
                let words = stream.clone_dtoh(
                    &b.records
                        .slice(s0 * STEP_RECORD_WORDS..s1 * STEP_RECORD_WORDS),
                )?;
                for (s, &(_, a, j, start)) in chunk_steps[s0..s1].iter().enumerate() {
                    let r = StepRecord::from_words(
                        &words[s * STEP_RECORD_WORDS..(s + 1) * STEP_RECORD_WORDS],
                    );
                    let summary = summary_from_record(
                        &r,
                        sim.strategy,
                        start,
                        sim.solver_params.memory_fraction,
                    );
                    start_level[a][j] = summary.next_start;
                    summaries.push((summary, r.too_few_paths as usize));
                }
                clock.mark(stream, Phase::Exposure, "step counts copy")?;
            }
            clock.flush(timings)?;
            if k < n_dates {
                progress.date_done();
            }
        }
        pclock.flush(timings)?;
        out.outer_exercises = stream.clone_dtoh(&b.exercises)?[0] as usize;

        // The residuals of the chunk's steps (one copy per chunk; `simulate` reads them).
        let ns = chunk_steps.len();
        if ns > 0 {
            stream.memcpy_dtoh(&b.residuals.slice(0..ns * c), &mut b.residuals_host)?;
            // The copy into page-locked memory is asynchronous, and with the context's
            // event tracking off (GpuBatchSolver::new) cudarc records no event after it,
            // so `as_slice` would not wait for it: the host would read residuals still
            // in flight (the eighth session's run-to-run differences of the residual
            // quantiles). Wait for the stream.
            stream.synchronize()?;
            for (&(k, _, j, _), (summary, too_few)) in chunk_steps.iter().zip(summaries) {
                out.steps.push((k, j, summary, too_few));
            }
            clock.mark(stream, Phase::Exposure, "residuals copy")?;
            clock.flush(timings)?;
        }
        Ok(())
    }
}

/// Start-up, simulation and estimate in one call (see [`GpuEngine`]).
///
/// # Errors
/// As [`GpuEngine::new`] and [`GpuEngine::simulate`].
pub fn simulate_gpu<T: GpuReal>(
    scenario: &Scenario,
    progress: &dyn Progress,
) -> Result<(NestedSimulation, CvaEstimate), GpuError> {
    GpuEngine::<T>::new(scenario)?.simulate(scenario, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cva_kernels::{Status, SystemReport};

    /// The summary from device-style counts equals `BatchSummary::from_reports`.
    #[test]
    fn summary_from_record_matches_from_reports() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for case in 0..200 {
            let len = next() % 40;
            let reports: Vec<SystemReport> = (0..len)
                .map(|_| SystemReport {
                    method: Method::ALL[next() % 3],
                    status: Status::ALL[if next() % 5 == 0 { next() % 4 } else { 0 }],
                    residual: if next() % 17 == 0 {
                        f64::NAN
                    } else {
                        (next() % 1000) as f64 * 1e-18
                    },
                    discarded: (next() % 3) as u32,
                })
                .collect();
            let mut r = StepRecord {
                systems: len as u64,
                ..Default::default()
            };
            let mut nan = false;
            for rep in &reports {
                r.per_method[rep.method as usize] += 1;
                r.per_status[rep.status as usize] += 1;
                r.discarded_eigenvalues += u64::from(rep.discarded);
                if rep.status == Status::Ok {
                    if rep.residual.is_nan() {
                        nan = true;
                    } else {
                        r.max_residual = r.max_residual.max(rep.residual);
                    }
                }
            }
            if nan {
                r.max_residual = f64::NAN;
            }
            let start = Method::ALL[case % 3];
            for strategy in [Strategy::Escalating, Strategy::Ldlt] {
                let fraction = [0.0, 0.3, 0.5, 1.0][case % 4];
                let expect = if len == 0 {
                    BatchSummary::from_reports(&[], start, 1.0)
                } else {
                    let s = match strategy {
                        Strategy::Escalating => start,
                        _ => Method::Ldlt,
                    };
                    BatchSummary::from_reports(&reports, s, fraction)
                };
                let got = summary_from_record(&r, strategy, start, fraction);
                assert_eq!(got.systems, expect.systems);
                assert_eq!(got.per_method, expect.per_method);
                assert_eq!(got.per_status, expect.per_status);
                assert_eq!(got.discarded_eigenvalues, expect.discarded_eigenvalues);
                assert_eq!(got.next_start, expect.next_start, "case {case}");
                assert!(
                    got.max_residual.to_bits() == expect.max_residual.to_bits()
                        || (got.max_residual.is_nan() && expect.max_residual.is_nan()),
                    "case {case}: {} {}",
                    got.max_residual,
                    expect.max_residual
                );
            }
        }
    }
}

#[cfg(test)]
mod kept_buffers_tests {
    use super::*;
    use crate::engine::NoProgress;

    /// Everything a run reports, as bits (the estimate, the profile, the step counts).
    fn fingerprint(sim: &NestedSimulation, est: &CvaEstimate) -> String {
        let steps: Vec<_> = sim
            .steps
            .iter()
            .map(|s| {
                (
                    s.exposure_date,
                    s.exercise_date,
                    s.too_few_paths,
                    format!("{:?}", s.summary),
                    s.residuals.iter().map(|r| r.to_bits()).collect::<Vec<_>>(),
                )
            })
            .collect();
        format!(
            "{} {} {} {} {} {:?} {:?}",
            est.cva.to_bits(),
            est.cva_std_error.to_bits(),
            est.value_t0.to_bits(),
            est.value_t0_std_error.to_bits(),
            sim.outer_exercises,
            est.profile,
            steps
        )
    }

    /// The engine keeps its chunk buffers between runs. A second run of the scenario on
    /// the same engine (buffers taken dirty from the first) gives the first run's bits,
    /// and a run of another `outer_paths` (buffers released and allocated again) the bits
    /// of a fresh engine's run. basket29 (n = 30, American), 1,500 and 1,000 outer paths.
    /// Needs a CUDA GPU (ignored without).
    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn kept_chunk_buffers_give_the_same_bits() {
        // `CVA_ROOT`: the directory holding `scenarios/` (a test binary copied to a
        // machine without the build tree), as in the integration tests.
        let root = std::env::var_os("CVA_ROOT").map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        );
        let load = |m0: usize| {
            Scenario::load(
                &root.join("scenarios/basket29.yaml"),
                &[format!("simulation.outer_paths={m0}")],
            )
            .expect("basket29 loads")
        };
        let (s1, s2) = (load(1500), load(1000));
        let engine = GpuEngine::<f64>::new(&s1).expect("GPU start-up");
        assert!(engine.kept.lock().unwrap().is_some());
        let run = |e: &GpuEngine<f64>, s: &Scenario| {
            let (sim, est) = e.simulate(s, &NoProgress).expect("GPU run");
            fingerprint(&sim, &est)
        };
        let first = run(&engine, &s1);
        assert!(engine.kept.lock().unwrap().is_some(), "buffers kept");
        assert_eq!(run(&engine, &s1), first, "second run on kept buffers");
        let other = run(&engine, &s2);
        assert_ne!(other, first);
        let fresh = GpuEngine::<f64>::new(&s2).expect("GPU start-up");
        assert_eq!(
            run(&fresh, &s2),
            other,
            "reallocated against a fresh engine"
        );
    }
}
