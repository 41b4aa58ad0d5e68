//! Benchmark of the GPU solvers against cuSOLVER (`potrfBatched` + `potrsBatched`) on
//! the same matrices, timed with CUDA events.
//!
//! For each precision and size: a batch of random symmetric positive definite systems
//! (strictly diagonally dominant, generated on the device, see `cuda/util.cu`) is
//! solved once to check it (outputs poisoned with NaN first; the residual of every
//! written `x` is recomputed by an independent kernel and compared with the one the
//! solver reported), then `warmup` times untimed and `repeats` times between two
//! events; the median is reported. The floor is the time to move the bytes each system
//! must move (read `A` and `b`, write `x`) at the device-to-device copy bandwidth
//! measured at the start (bytes read + bytes written over the time of a large copy).

use super::module::{KernelFamily, KernelKey};
use super::solver::{GpuBatchSolver, GpuOptions, GpuReal, GpuReport, LdltOrganisation};
use super::{tuning, GpuError};
use crate::{SolverParams, Strategy};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

/// One method to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchVariant {
    /// `L D L^T` with one organisation.
    Ldlt(LdltOrganisation),
    /// `L D L^T` hybrid for every `n*` in {2, 4, 8, 16, 32, 64} below `n` whose rows
    /// fit in registers ([`tuning::ldlt_row_registers`] <= 160): the measurement
    /// behind [`tuning::ldlt_hybrid_nstar`].
    LdltNstarSweep,
    /// Householder + PCR with `n*` threads (`None`: the tuned default).
    HouseholderPcr(Option<usize>),
    /// Householder + PCR for every `n*` in {4, 8, 16, 32, 64} up to the next power
    /// of two of `n` whose rows fit in registers
    /// ([`tuning::householder_row_registers`] <= 128).
    HouseholderNstarSweep,
    /// cuSOLVER `potrfBatched` + `potrsBatched` (lower triangle).
    Cusolver,
    /// Householder tridiagonalization (f64: `n*` threads per system; f32: in the next
    /// kernel), then divide and conquer + truncated solve (one warp per system); batch at
    /// most 2^20.
    DivideConquer,
    /// The escalating strategy from `L D L^T` (on the benchmark's diagonally dominant
    /// matrices nothing escalates: the cost of the device-side checks and compaction).
    Escalating,
}

/// Systems given by the caller instead of the generated diagonally dominant ones: `count`
/// column-major `n x n` blocks in `a` (only the lower triangle is read) and `count`
/// right-hand sides of length `n` in `b`, converted to the benchmark's precision and
/// repeated on the device until the batch is full.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSystems {
    /// Name of the rows' family (`paper(rho=0.5)`, `basket29`, ...).
    pub family: String,
    pub n: usize,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
}

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// Sizes of the generated systems (ignored when `systems` is given).
    pub sizes: Vec<usize>,
    /// Measure on these systems instead of generated ones.
    pub systems: Option<HostSystems>,
    pub f32: bool,
    pub f64: bool,
    /// Largest batch (systems per launch).
    pub max_batch: usize,
    /// The batch is the largest power of two with at most this many bytes of matrices.
    pub max_matrix_bytes: usize,
    pub variants: Vec<BenchVariant>,
    pub warmup: usize,
    pub repeats: usize,
    pub seed: u64,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            sizes: vec![4, 8, 16, 30, 32, 48, 64],
            systems: None,
            f32: true,
            f64: true,
            max_batch: 1 << 20,
            max_matrix_bytes: 10 << 30,
            variants: vec![
                BenchVariant::Ldlt(LdltOrganisation::Simd),
                BenchVariant::Ldlt(LdltOrganisation::Collaborative),
                BenchVariant::LdltNstarSweep,
                BenchVariant::Ldlt(LdltOrganisation::Auto),
                BenchVariant::HouseholderNstarSweep,
                BenchVariant::HouseholderPcr(None),
                BenchVariant::Escalating,
                BenchVariant::DivideConquer,
                BenchVariant::Cusolver,
            ],
            warmup: 2,
            repeats: 7,
            seed: 20161,
        }
    }
}

/// One measured line.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// `diag-dominant` (generated) or [`HostSystems::family`].
    pub family: String,
    pub n: usize,
    /// `"f32"` or `"f64"`.
    pub precision: &'static str,
    pub batch: usize,
    /// `ldlt-simd`, `ldlt-collaborative`, `ldlt-hybrid`, `ldlt-auto`,
    /// `householder-pcr`, `cusolver-potrf-potrs`.
    pub method: String,
    /// Threads per system (0 for cuSOLVER).
    pub nstar: usize,
    /// Median time of one batch, seconds.
    pub seconds: f64,
    /// Fastest repeat, seconds.
    pub seconds_min: f64,
    pub systems_per_s: f64,
    /// Bytes of `A` (all `n^2` entries), `b` and `x` over the copy bandwidth, seconds.
    pub floor_seconds: f64,
    /// `batch / floor_seconds`.
    pub floor_systems_per_s: f64,
    /// As `floor_systems_per_s` with only the lower triangle of `A` counted (what the
    /// kernels read).
    pub floor_lower_systems_per_s: f64,
    /// Largest relative residual over the batch (NaN-propagating), recomputed from the
    /// written `x` by an independent kernel.
    pub max_residual: f64,
    /// Systems not solved (status other than ok, or cuSOLVER `info != 0`).
    pub failures: usize,
    /// Systems solved by L D L^T, Householder + PCR, divide and conquer (our kernels;
    /// zero for the vendor rows).
    pub methods: [usize; 3],
    /// Eigenvalues discarded by the truncated solves (our kernels; zero for the vendor).
    pub discarded: usize,
    /// Systems whose reported residual differs from the recomputed one.
    pub residual_mismatches: usize,
    pub registers: i32,
    pub local_bytes: i32,
    pub warps_per_sm: u32,
    pub shared_bytes_per_block: usize,
}

/// All rows of one run, with the device and the measured copy bandwidth.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    pub device: String,
    /// Device-to-device copy, bytes read + bytes written per second.
    pub copy_bandwidth: f64,
    pub rows: Vec<BenchRow>,
    /// Things that could not be measured (cuSOLVER missing, kernel too large, ...).
    pub notes: Vec<String>,
}

impl BenchReport {
    /// A Markdown table of the rows.
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "device: {}; copy bandwidth {:.0} GB/s (read + write)\n\n",
            self.device,
            self.copy_bandwidth / 1e9
        );
        s += "| n | prec | batch | method | n* | median s | M systems/s | floor M/s (full A) | floor M/s (lower A) | max residual | fail | regs | spill B | warps/SM |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} | {} | {} | {:.3e} | {:.1} | {:.1} | {:.1} | {:.1e} | {} | {} | {} | {} |\n",
                r.n,
                r.precision,
                r.batch,
                r.method,
                r.nstar,
                r.seconds,
                r.systems_per_s / 1e6,
                r.floor_systems_per_s / 1e6,
                r.floor_lower_systems_per_s / 1e6,
                r.max_residual,
                r.failures,
                r.registers,
                r.local_bytes,
                r.warps_per_sm
            );
        }
        for n in &self.notes {
            s += &format!("\nnote: {n}");
        }
        s
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn util_cfg(work: usize) -> LaunchConfig {
    let blocks = work.div_ceil(256).clamp(1, 132 * 32) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Times `f` (which queues work on the solver's stream) between two events.
fn time_events(
    solver: &GpuBatchSolver,
    mut f: impl FnMut() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    let ctx = solver.context();
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    start.record(solver.stream())?;
    f()?;
    end.record(solver.stream())?;
    end.synchronize()?;
    Ok(start.elapsed_ms(&end)? as f64 * 1e-3)
}

/// Device-to-device copy bandwidth (bytes read + written per second) of a 2 GiB copy,
/// median of 5.
pub fn copy_bandwidth(solver: &GpuBatchSolver) -> Result<f64, GpuError> {
    let stream = solver.stream();
    let len = 1usize << 29; // f32 elements: 2 GiB
    let src: CudaSlice<f32> = stream.alloc_zeros(len)?;
    let mut dst: CudaSlice<f32> = stream.alloc_zeros(len)?;
    stream.memcpy_dtod(&src, &mut dst)?;
    let mut t = Vec::new();
    for _ in 0..5 {
        t.push(time_events(solver, || {
            stream.memcpy_dtod(&src, &mut dst)?;
            Ok(())
        })?);
    }
    Ok(2.0 * (len * 4) as f64 / median(&mut t))
}

/// Runs the benchmark. Rows come in the order precision, size, variant.
///
/// # Errors
/// CUDA, compilation or cuSOLVER errors (a variant whose kernel does not fit the
/// device is skipped with a note instead).
pub fn bench_solvers(solver: &GpuBatchSolver, cfg: &BenchConfig) -> Result<BenchReport, GpuError> {
    let bw = copy_bandwidth(solver)?;
    let mut report = BenchReport {
        device: format!(
            "{} (sm_{}{}, {} SMs)",
            solver.device().name,
            solver.device().compute_capability.0,
            solver.device().compute_capability.1,
            solver.device().multiprocessors
        ),
        copy_bandwidth: bw,
        rows: Vec::new(),
        notes: Vec::new(),
    };
    if cfg.f32 {
        bench_precision::<f32>(solver, cfg, bw, &mut report)?;
    }
    if cfg.f64 {
        bench_precision::<f64>(solver, cfg, bw, &mut report)?;
    }
    Ok(report)
}

/// The (strategy, options, method name) list that `variants` expand to for size `n`.
fn expand(
    variants: &[BenchVariant],
    n: usize,
    elem_bytes: usize,
) -> Vec<(Strategy, GpuOptions, String)> {
    let mut out = Vec::new();
    let ldlt = |o: LdltOrganisation| GpuOptions {
        ldlt: o,
        householder_nstar: None,
        ..Default::default()
    };
    let hh = |nstar: Option<usize>| GpuOptions {
        ldlt: LdltOrganisation::Auto,
        householder_nstar: nstar,
        ..Default::default()
    };
    for v in variants {
        match *v {
            BenchVariant::Ldlt(o) => {
                let name = match o {
                    LdltOrganisation::Auto => "ldlt-auto",
                    LdltOrganisation::Simd => "ldlt-simd",
                    LdltOrganisation::Collaborative => "ldlt-collaborative",
                    LdltOrganisation::Hybrid { .. } => "ldlt-hybrid",
                };
                out.push((Strategy::Ldlt, ldlt(o), name.to_string()));
            }
            BenchVariant::LdltNstarSweep => {
                for nstar in [2usize, 4, 8, 16, 32, 64] {
                    if nstar < n && tuning::ldlt_row_registers(n, nstar, elem_bytes) <= 160 {
                        out.push((
                            Strategy::Ldlt,
                            ldlt(LdltOrganisation::Hybrid { nstar }),
                            "ldlt-hybrid".into(),
                        ));
                    }
                }
            }
            BenchVariant::HouseholderPcr(nstar) => out.push((
                Strategy::HouseholderPcr,
                hh(nstar),
                "householder-pcr".into(),
            )),
            BenchVariant::HouseholderNstarSweep => {
                for nstar in [4usize, 8, 16, 32, 64] {
                    if nstar <= n.next_power_of_two().max(4)
                        && tuning::householder_row_registers(n, nstar, elem_bytes) <= 128
                    {
                        out.push((
                            Strategy::HouseholderPcr,
                            hh(Some(nstar)),
                            "householder-pcr".into(),
                        ));
                    }
                }
            }
            BenchVariant::DivideConquer => out.push((
                Strategy::DivideConquer,
                GpuOptions::default(),
                "divide-conquer".into(),
            )),
            BenchVariant::Escalating => out.push((
                Strategy::Escalating,
                GpuOptions::default(),
                "escalating".into(),
            )),
            BenchVariant::Cusolver => {}
        }
    }
    out
}

/// Copies `h`'s systems, converted to `T`, into the first `count` slots of `a` and `b`
/// and repeats them on the device until `batch` systems are filled.
fn upload_repeated<T: GpuReal>(
    solver: &GpuBatchSolver,
    h: &HostSystems,
    batch: usize,
    a: &mut CudaSlice<T>,
    b: &mut CudaSlice<T>,
) -> Result<(), GpuError> {
    let n = h.n;
    let count = (h.b.len() / n.max(1)).min(batch);
    if count == 0 || h.a.len() < count * n * n {
        return Err(GpuError::Invalid(format!(
            "{}: no complete {n} x {n} systems to benchmark",
            h.family
        )));
    }
    let stream = solver.stream();
    let a_host: Vec<T> = h.a[..count * n * n]
        .iter()
        .map(|&v| T::from_f64(v))
        .collect();
    let b_host: Vec<T> = h.b[..count * n].iter().map(|&v| T::from_f64(v)).collect();
    stream.memcpy_htod(&a_host, &mut a.slice_mut(0..count * n * n))?;
    stream.memcpy_htod(&b_host, &mut b.slice_mut(0..count * n))?;
    // Doubling copies: systems [0, filled) to [filled, 2 filled), until the batch is full.
    let mut filled = count;
    while filled < batch {
        let len = filled.min(batch - filled);
        let (src, mut dst) = a.split_at_mut(filled * n * n);
        stream.memcpy_dtod(
            &src.slice(0..len * n * n),
            &mut dst.slice_mut(0..len * n * n),
        )?;
        let (src, mut dst) = b.split_at_mut(filled * n);
        stream.memcpy_dtod(&src.slice(0..len * n), &mut dst.slice_mut(0..len * n))?;
        filled += len;
    }
    Ok(())
}

fn bench_precision<T: GpuReal>(
    solver: &GpuBatchSolver,
    cfg: &BenchConfig,
    bw: f64,
    report: &mut BenchReport,
) -> Result<(), GpuError> {
    let stream = solver.stream();
    let eb = std::mem::size_of::<T>();
    let util = solver.modules().get(KernelKey {
        family: KernelFamily::Util,
        f64: T::IS_F64,
        n: 0,
        nstar: 0,
        sys_stride: 0,
    })?;
    // Compile everything of this precision up front, in parallel.
    let sizes = match &cfg.systems {
        Some(h) => vec![h.n],
        None => cfg.sizes.clone(),
    };
    let family = cfg
        .systems
        .as_ref()
        .map_or_else(|| "diag-dominant".to_string(), |h| h.family.clone());
    let mut keys = Vec::new();
    for &n in &sizes {
        for (strategy, options, _) in expand(&cfg.variants, n, eb) {
            keys.extend(solver.kernel_keys::<T>(n, strategy, &options)?);
        }
    }
    solver.modules().precompile(&keys)?;
    let params = SolverParams::default();

    for &n in &sizes {
        let by_memory = (cfg.max_matrix_bytes / (n * n * eb)).max(1);
        let batch = cfg.max_batch.min(1 << by_memory.ilog2());
        let a: CudaSlice<T> = stream.alloc_zeros(batch * n * n)?;
        let b: CudaSlice<T> = stream.alloc_zeros(batch * n)?;
        let mut a = a;
        let mut b = b;
        let mut x: CudaSlice<T> = stream.alloc_zeros(batch * n)?;
        let mut rep: CudaSlice<GpuReport> = stream.alloc_zeros(batch)?;
        let mut check: CudaSlice<f64> = stream.alloc_zeros(batch)?;
        if let Some(h) = &cfg.systems {
            upload_repeated(solver, h, batch, &mut a, &mut b)?;
        } else {
            let seed = cfg.seed ^ ((n as u64) << 32) ^ (u64::from(T::IS_F64) << 40);
            let (batch_arg, n_arg) = (batch as i64, n as i32);
            let mut l = stream.launch_builder(util.function("fill_spd"));
            l.arg(&mut a)
                .arg(&mut b)
                .arg(&batch_arg)
                .arg(&n_arg)
                .arg(&seed);
            // SAFETY: fill_spd(real* A, real* B, long long batch, int n, u64 seed) writes
            // batch*n*n entries of A and batch*n of B, the lengths allocated above.
            unsafe { l.launch(util_cfg(batch * n * n)) }?;
        }
        let floor = batch as f64 * ((n * n + 2 * n) * eb) as f64 / bw;
        let floor_lower = batch as f64 * ((n * (n + 1) / 2 + 2 * n) * eb) as f64 / bw;

        // Recomputes the residual of x into `check`, returns (max, mismatches vs reports).
        // Only the first `nb` systems are checked.
        let verify = |nb: usize,
                      x: &CudaSlice<T>,
                      check: &mut CudaSlice<f64>,
                      rep: Option<&CudaSlice<GpuReport>>|
         -> Result<(f64, usize, usize), GpuError> {
            let (batch_arg, n_arg) = (nb as i64, n as i32);
            let mut l = stream.launch_builder(util.function("relative_residual"));
            l.arg(&a)
                .arg(&b)
                .arg(x)
                .arg(&mut *check)
                .arg(&batch_arg)
                .arg(&n_arg);
            // SAFETY: relative_residual(const real* A, const real* B, const real* X,
            // double* res, long long batch, int n): A batch*n*n, B and X batch*n, res batch.
            unsafe { l.launch(util_cfg(nb)) }?;
            let res = stream.clone_dtoh(&check.slice(0..nb))?;
            let mut max = 0.0f64;
            for &r in &res {
                max = nan_max(max, r);
            }
            let (mut failures, mut mismatches) = (0, 0);
            if let Some(rep) = rep {
                let reps = stream.clone_dtoh(&rep.slice(0..nb))?;
                for (g, &r) in reps.iter().zip(&res) {
                    if g.status != 0 {
                        failures += 1;
                    }
                    if !(g.residual == r || (g.residual.is_nan() && r.is_nan())) {
                        mismatches += 1;
                    }
                }
            }
            Ok((max, failures, mismatches))
        };

        for (strategy, options, name) in expand(&cfg.variants, n, eb) {
            // Poison the outputs.
            {
                let len = batch * n;
                let len_arg = len as i64;
                let mut l = stream.launch_builder(util.function("fill_nan"));
                l.arg(&mut x).arg(&len_arg);
                // SAFETY: fill_nan(real* p, long long len) writes len entries of x.
                unsafe { l.launch(util_cfg(len)) }?;
                let (ptr, _sync) = rep.device_ptr_mut(stream);
                // SAFETY: writes batch * 16 bytes at the start of `rep`, its size.
                unsafe {
                    cudarc::driver::result::memset_d8_async(
                        ptr,
                        0xff,
                        batch * std::mem::size_of::<GpuReport>(),
                        stream.cu_stream(),
                    )
                }?;
            }
            // One thread per system is slow: a smaller batch, still filling the device.
            let nb = if options.ldlt == LdltOrganisation::Simd && strategy == Strategy::Ldlt {
                batch.min(1 << (((1usize << 24) / (n * n)).max(1 << 12)).ilog2())
            } else if strategy == Strategy::DivideConquer {
                batch.min(1 << 20)
            } else {
                batch
            };
            let run = |x: &mut CudaSlice<T>, rep: &mut CudaSlice<GpuReport>| {
                solver.solve_batched_gpu(
                    n,
                    &a.slice(0..nb * n * n),
                    &b.slice(0..nb * n),
                    &mut x.slice_mut(0..nb * n),
                    &mut rep.slice_mut(0..nb),
                    strategy,
                    &params,
                    &options,
                )
            };
            let info = match run(&mut x, &mut rep) {
                Ok(i) => i,
                Err(e @ GpuError::SharedMemory { .. }) => {
                    report.notes.push(format!("{name} n={n} {}: {e}", T::NAME));
                    continue;
                }
                Err(e) => return Err(e),
            };
            stream.synchronize()?;
            let (max_residual, failures, residual_mismatches) =
                verify(nb, &x, &mut check, Some(&rep))?;
            let mut methods = [0usize; 3];
            let mut discarded = 0;
            for r in stream.clone_dtoh(&rep.slice(0..nb))? {
                if r.status == 0 && (r.method & 0xff) < 3 {
                    methods[(r.method & 0xff) as usize] += 1;
                    discarded += (r.method >> 8) as usize;
                }
            }
            for _ in 0..cfg.warmup {
                run(&mut x, &mut rep)?;
            }
            let mut times = Vec::new();
            for _ in 0..cfg.repeats.max(1) {
                times.push(time_events(solver, || run(&mut x, &mut rep).map(|_| ()))?);
            }
            let seconds_min = times.iter().copied().fold(f64::INFINITY, f64::min);
            let seconds = median(&mut times);
            report.rows.push(BenchRow {
                family: family.clone(),
                n,
                precision: T::NAME,
                batch: nb,
                method: name,
                nstar: info.nstar,
                seconds,
                seconds_min,
                systems_per_s: nb as f64 / seconds,
                floor_seconds: floor * nb as f64 / batch as f64,
                floor_systems_per_s: batch as f64 / floor,
                floor_lower_systems_per_s: batch as f64 / floor_lower,
                max_residual,
                failures,
                methods,
                discarded,
                residual_mismatches,
                registers: info.registers,
                local_bytes: info.local_bytes,
                warps_per_sm: info.warps_per_sm,
                shared_bytes_per_block: info.shared_bytes_per_block,
            });
        }

        if cfg.variants.contains(&BenchVariant::Cusolver) {
            match bench_cusolver::<T>(solver, cfg, n, batch, &a, &b, &mut x, &mut check, &verify) {
                Ok((seconds, seconds_min, max_residual, failures)) => report.rows.push(BenchRow {
                    family: family.clone(),
                    n,
                    precision: T::NAME,
                    batch,
                    method: "cusolver-potrf-potrs".into(),
                    nstar: 0,
                    seconds,
                    seconds_min,
                    systems_per_s: batch as f64 / seconds,
                    floor_seconds: floor,
                    floor_systems_per_s: batch as f64 / floor,
                    floor_lower_systems_per_s: batch as f64 / floor_lower,
                    max_residual,
                    failures,
                    methods: [0; 3],
                    discarded: 0,
                    residual_mismatches: 0,
                    registers: 0,
                    local_bytes: 0,
                    warps_per_sm: 0,
                    shared_bytes_per_block: 0,
                }),
                Err(e) => report
                    .notes
                    .push(format!("cusolver n={n} {}: {e}", T::NAME)),
            }
            // Vendor eigensolver row: cuSOLVER's batched Jacobi (n <= 32 only).
            if n <= 32 {
                match bench_syevj::<T>(solver, cfg, n, batch, &a) {
                    Ok((seconds, seconds_min, failures)) => report.rows.push(BenchRow {
                        family: family.clone(),
                        n,
                        precision: T::NAME,
                        batch,
                        method: "cusolver-syevj-batched (eigenpairs only)".into(),
                        nstar: 0,
                        seconds,
                        seconds_min,
                        systems_per_s: batch as f64 / seconds,
                        floor_seconds: floor,
                        floor_systems_per_s: batch as f64 / floor,
                        floor_lower_systems_per_s: batch as f64 / floor_lower,
                        max_residual: f64::NAN,
                        failures,
                        methods: [0; 3],
                        discarded: 0,
                        residual_mismatches: 0,
                        registers: 0,
                        local_bytes: 0,
                        warps_per_sm: 0,
                        shared_bytes_per_block: 0,
                    }),
                    Err(e) => report
                        .notes
                        .push(format!("cusolver syevjBatched n={n} {}: {e}", T::NAME)),
                }
            }
        }
    }
    Ok(())
}

type Verify<'a, T> = dyn Fn(
        usize,
        &CudaSlice<T>,
        &mut CudaSlice<f64>,
        Option<&CudaSlice<GpuReport>>,
    ) -> Result<(f64, usize, usize), GpuError>
    + 'a;

/// cuSOLVER `potrfBatched` + `potrsBatched` on copies of `a` (factored in place) and
/// `b` (overwritten by x); the copies are made before the start event of each repeat.
/// Returns (median s, min s, max residual, failures).
#[allow(clippy::too_many_arguments)]
fn bench_cusolver<T: GpuReal>(
    solver: &GpuBatchSolver,
    cfg: &BenchConfig,
    n: usize,
    batch: usize,
    a: &CudaSlice<T>,
    b: &CudaSlice<T>,
    x: &mut CudaSlice<T>,
    check: &mut CudaSlice<f64>,
    verify: &Verify<'_, T>,
) -> Result<(f64, f64, f64, usize), GpuError> {
    use cudarc::cusolver::sys as cs;
    // SAFETY: only tries to dlopen libcusolver by its usual names.
    if !unsafe { cs::is_culib_present() } {
        return Err(GpuError::Cusolver("libcusolver was not found".into()));
    }
    let stream = solver.stream();
    let util = solver.modules().get(KernelKey {
        family: KernelFamily::Util,
        f64: T::IS_F64,
        n: 0,
        nstar: 0,
        sys_stride: 0,
    })?;
    let handle = cudarc::cusolver::DnHandle::new(stream.clone())
        .map_err(|e| GpuError::Cusolver(format!("handle: {e:?}")))?;
    let mut work: CudaSlice<T> = stream.alloc_zeros(batch * n * n)?;
    let mut a_ptrs: CudaSlice<u64> = stream.alloc_zeros(batch)?;
    let mut x_ptrs: CudaSlice<u64> = stream.alloc_zeros(batch)?;
    let mut infos: CudaSlice<i32> = stream.alloc_zeros(batch)?;
    let mut info_solve: CudaSlice<i32> = stream.alloc_zeros(1)?;
    let work_base = work.device_ptr(stream).0;
    let x_base = x.device_ptr(stream).0;
    for (ptrs, base, stride) in [(&mut a_ptrs, work_base, n * n), (&mut x_ptrs, x_base, n)] {
        let (stride_arg, batch_arg) = (stride as i64, batch as i64);
        let mut l = stream.launch_builder(util.function("pointer_array"));
        l.arg(ptrs).arg(&base).arg(&stride_arg).arg(&batch_arg);
        // SAFETY: pointer_array(real** ptrs, real* base, long long stride, long long
        // batch) writes batch pointers base + i*stride, all inside the allocation of
        // `base` (batch*stride elements).
        unsafe { l.launch(util_cfg(batch)) }?;
    }
    let lower = cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
    let (ni, bi) = (n as i32, batch as i32);
    // Event tracking is off (see GpuBatchSolver::new): the raw pointers stay valid
    // while the slices live, and stream order orders every use.
    let ap = a_ptrs.device_ptr_mut(stream).0;
    let xp = x_ptrs.device_ptr_mut(stream).0;
    let ip = infos.device_ptr_mut(stream).0;
    let sp = info_solve.device_ptr_mut(stream).0;
    let solve =
        |work: &mut CudaSlice<T>, x: &mut CudaSlice<T>, timed: bool| -> Result<f64, GpuError> {
            stream.memcpy_dtod(a, work)?;
            stream.memcpy_dtod(b, x)?;
            let call = || -> Result<(), GpuError> {
                // SAFETY: the pointer arrays hold `batch` device pointers to n x n
                // column-major matrices (lda = n) in `work` and to n-vectors in `x`, written
                // by pointer_array above; `infos` has `batch` ints and `info_solve` one; the
                // handle's stream is the solver's stream, so the copies above are done.
                let st = unsafe {
                    if T::IS_F64 {
                        cs::cusolverDnDpotrfBatched(
                            handle.cu(),
                            lower,
                            ni,
                            ap as *mut *mut f64,
                            ni,
                            ip as *mut i32,
                            bi,
                        )
                    } else {
                        cs::cusolverDnSpotrfBatched(
                            handle.cu(),
                            lower,
                            ni,
                            ap as *mut *mut f32,
                            ni,
                            ip as *mut i32,
                            bi,
                        )
                    }
                };
                if st != cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
                    return Err(GpuError::Cusolver(format!("potrfBatched: {st:?}")));
                }
                // SAFETY: as above; nrhs = 1, ldb = n.
                let st = unsafe {
                    if T::IS_F64 {
                        cs::cusolverDnDpotrsBatched(
                            handle.cu(),
                            lower,
                            ni,
                            1,
                            ap as *mut *mut f64,
                            ni,
                            xp as *mut *mut f64,
                            ni,
                            sp as *mut i32,
                            bi,
                        )
                    } else {
                        cs::cusolverDnSpotrsBatched(
                            handle.cu(),
                            lower,
                            ni,
                            1,
                            ap as *mut *mut f32,
                            ni,
                            xp as *mut *mut f32,
                            ni,
                            sp as *mut i32,
                            bi,
                        )
                    }
                };
                if st != cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
                    return Err(GpuError::Cusolver(format!("potrsBatched: {st:?}")));
                }
                Ok(())
            };
            if timed {
                time_events(solver, call)
            } else {
                call()?;
                Ok(0.0)
            }
        };
    solve(&mut work, &mut *x, false)?;
    stream.synchronize()?;
    let (max_residual, _, _) = verify(batch, &*x, &mut *check, None)?;
    let failures = stream
        .clone_dtoh(&infos)?
        .iter()
        .filter(|&&i| i != 0)
        .count();
    for _ in 0..cfg.warmup {
        solve(&mut work, &mut *x, false)?;
    }
    let mut times = Vec::new();
    for _ in 0..cfg.repeats.max(1) {
        times.push(solve(&mut work, &mut *x, true)?);
    }
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    Ok((median(&mut times), min, max_residual, failures))
}

/// cuSOLVER `syevjBatched` (Jacobi, eigenvalues and eigenvectors, lower triangle,
/// default tolerance and sweeps) on copies of `a`, made before the start event of each
/// repeat. Only the decomposition is timed (no solve; no residual).
/// Returns (median s, min s, matrices with `info != 0`).
fn bench_syevj<T: GpuReal>(
    solver: &GpuBatchSolver,
    cfg: &BenchConfig,
    n: usize,
    batch: usize,
    a: &CudaSlice<T>,
) -> Result<(f64, f64, usize), GpuError> {
    use cudarc::cusolver::sys as cs;
    // SAFETY: only tries to dlopen libcusolver by its usual names.
    if !unsafe { cs::is_culib_present() } {
        return Err(GpuError::Cusolver("libcusolver was not found".into()));
    }
    let stream = solver.stream();
    let handle = cudarc::cusolver::DnHandle::new(stream.clone())
        .map_err(|e| GpuError::Cusolver(format!("handle: {e:?}")))?;
    let mut params: cs::syevjInfo_t = std::ptr::null_mut();
    // SAFETY: `params` is a valid out pointer; destroyed below.
    let st = unsafe { cs::cusolverDnCreateSyevjInfo(&mut params) };
    if st != cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
        return Err(GpuError::Cusolver(format!("CreateSyevjInfo: {st:?}")));
    }
    let result = (|| {
        let mut work_a: CudaSlice<T> = stream.alloc_zeros(batch * n * n)?;
        let mut w: CudaSlice<T> = stream.alloc_zeros(batch * n)?;
        let mut infos: CudaSlice<i32> = stream.alloc_zeros(batch)?;
        let jobz = cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR;
        let lower = cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
        let (ni, bi) = (n as i32, batch as i32);
        let ap = work_a.device_ptr_mut(stream).0;
        let wp = w.device_ptr_mut(stream).0;
        let ip = infos.device_ptr_mut(stream).0;
        let mut lwork = 0i32;
        // SAFETY: A and W are device buffers of batch*n*n and batch*n elements.
        let st = unsafe {
            if T::IS_F64 {
                cs::cusolverDnDsyevjBatched_bufferSize(
                    handle.cu(),
                    jobz,
                    lower,
                    ni,
                    ap as *const f64,
                    ni,
                    wp as *const f64,
                    &mut lwork,
                    params,
                    bi,
                )
            } else {
                cs::cusolverDnSsyevjBatched_bufferSize(
                    handle.cu(),
                    jobz,
                    lower,
                    ni,
                    ap as *const f32,
                    ni,
                    wp as *const f32,
                    &mut lwork,
                    params,
                    bi,
                )
            }
        };
        if st != cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
            return Err(GpuError::Cusolver(format!(
                "syevjBatched_bufferSize: {st:?}"
            )));
        }
        let mut work: CudaSlice<T> = stream.alloc_zeros((lwork.max(1)) as usize)?;
        let wkp = work.device_ptr_mut(stream).0;
        let call = || -> Result<(), GpuError> {
            // SAFETY: as above; `work` has `lwork` elements, `infos` `batch` ints, the
            // handle works on the solver's stream, so the copy of `a` before is done.
            let st = unsafe {
                if T::IS_F64 {
                    cs::cusolverDnDsyevjBatched(
                        handle.cu(),
                        jobz,
                        lower,
                        ni,
                        ap as *mut f64,
                        ni,
                        wp as *mut f64,
                        wkp as *mut f64,
                        lwork,
                        ip as *mut i32,
                        params,
                        bi,
                    )
                } else {
                    cs::cusolverDnSsyevjBatched(
                        handle.cu(),
                        jobz,
                        lower,
                        ni,
                        ap as *mut f32,
                        ni,
                        wp as *mut f32,
                        wkp as *mut f32,
                        lwork,
                        ip as *mut i32,
                        params,
                        bi,
                    )
                }
            };
            if st != cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
                return Err(GpuError::Cusolver(format!("syevjBatched: {st:?}")));
            }
            Ok(())
        };
        stream.memcpy_dtod(a, &mut work_a)?;
        call()?;
        stream.synchronize()?;
        let failures = stream
            .clone_dtoh(&infos)?
            .iter()
            .filter(|&&i| i != 0)
            .count();
        for _ in 0..cfg.warmup {
            stream.memcpy_dtod(a, &mut work_a)?;
            call()?;
        }
        let mut times = Vec::new();
        for _ in 0..cfg.repeats.max(1) {
            stream.memcpy_dtod(a, &mut work_a)?;
            times.push(time_events(solver, call)?);
        }
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        Ok((median(&mut times), min, failures))
    })();
    // SAFETY: created above, destroyed once.
    let _ = unsafe { cs::cusolverDnDestroySyevjInfo(params) };
    result
}
