//! `cva bench solvers`: every solver strategy on the same generated batches.
//!
//! Families: `paper` (the test matrices of Section 3.3 of Abbas-Turki & Graillat 2016,
//! `A = Q R Q^T`, for each `--rho`) and `basket29` (the regression matrices of one
//! Longstaff–Schwartz step of `scenarios/basket29.yaml`, n = 30, captured from a run).

use crate::engine::{self, NoProgress};
use crate::report::column;
use crate::scenario::Scenario;
use anyhow::{bail, Context, Result};
use clap::Args;
use cva_kernels::{
    families::paper_family, solve_batched, Method, Real, SolverParams, Status, Strategy,
    SymmetricBatch, SystemReport,
};
use polars::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug, Clone)]
pub struct SolverBenchArgs {
    /// Backends, comma-separated: `cpu`, `gpu` (CUDA kernels and cuSOLVER on the same
    /// matrices).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub backend: Vec<String>,
    /// System sizes for the `paper` family.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,30,32,48,64")]
    pub n: Vec<usize>,
    /// Systems per batch (default: 16384 on the CPU, 2^20 on the GPU, fewer where the
    /// matrices would exceed 10 GiB).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Precisions: f32, f64.
    #[arg(long, value_delimiter = ',', default_value = "f64,f32")]
    pub precision: Vec<String>,
    /// Strategies: ldlt, householder-pcr, divide-conquer, escalating.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ldlt,householder-pcr,divide-conquer,escalating"
    )]
    pub strategy: Vec<String>,
    /// Families: paper, basket29.
    #[arg(long, value_delimiter = ',', default_value = "paper,basket29")]
    pub family: Vec<String>,
    /// Correlations `ρ` of the paper family's `Ξ_ρ`.
    #[arg(long, value_delimiter = ',', default_value = "0.5")]
    pub rho: Vec<f64>,
    /// Scenario the `basket29` family is captured from.
    #[arg(long, default_value = "scenarios/basket29.yaml")]
    pub scenario: PathBuf,
    /// Timed repetitions (the median is reported), after one warm-up.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Worker threads (default: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print the rows as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Also write the rows to this Parquet file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One measured (backend, family, n, precision, strategy) combination.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SolverBenchRow {
    pub backend: String,
    /// `cpu`, or the GPU's name.
    pub device: String,
    pub family: String,
    pub n: usize,
    pub batch: usize,
    pub precision: String,
    /// A strategy (`ldlt`, ...), a GPU organisation (`ldlt-hybrid`, ...) or a vendor
    /// routine (`cusolver-potrf-potrs`).
    pub strategy: String,
    /// GPU threads per system (0 on the CPU and for vendor routines).
    pub nstar: usize,
    /// Median wall time of one batched solve (GPU: device events, matrices already on
    /// the device).
    pub seconds: f64,
    pub systems_per_second: f64,
    /// GPU only: systems/s if every byte of `A`, `b` and `x` crossed device memory once
    /// at the measured copy bandwidth (NaN on the CPU).
    pub floor_systems_per_second: f64,
    /// Largest relative residual `||Ax-b||/(||A|| ||x|| + ||b||)` (NaN-propagating).
    pub max_residual: f64,
    pub ldlt: usize,
    pub householder_pcr: usize,
    pub divide_conquer: usize,
    pub failures: usize,
    pub discarded_eigenvalues: usize,
}

fn bench_one<T: Real>(
    family: &str,
    n: usize,
    a: &[f64],
    b: &[f64],
    strategy: Strategy,
    repeats: usize,
) -> SolverBenchRow {
    let a: Vec<T> = a.iter().map(|&v| T::from_f64(v)).collect();
    let b: Vec<T> = b.iter().map(|&v| T::from_f64(v)).collect();
    let systems = SymmetricBatch::new(n, &a, &b);
    let mut x = vec![T::NAN; b.len()];
    let mut reports = vec![SystemReport::default(); systems.batch];
    let params = SolverParams::default();
    let mut times = Vec::new();
    let mut summary = None;
    for rep in 0..=repeats.max(1) {
        x.fill(T::NAN);
        let t = Instant::now();
        let s = solve_batched(
            &systems,
            &mut x,
            &mut reports,
            strategy,
            &params,
            Method::Ldlt,
        );
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            times.push(dt);
        }
        summary = Some(s);
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let s = summary.expect("at least one run");
    SolverBenchRow {
        backend: "cpu".into(),
        device: "cpu".into(),
        family: family.into(),
        n,
        batch: systems.batch,
        precision: T::NAME.into(),
        strategy: strategy.name().into(),
        nstar: 0,
        seconds,
        systems_per_second: systems.batch as f64 / seconds,
        floor_systems_per_second: f64::NAN,
        max_residual: s.max_residual,
        ldlt: s.per_method[Method::Ldlt as usize],
        householder_pcr: s.per_method[Method::HouseholderPcr as usize],
        divide_conquer: s.per_method[Method::DivideConquer as usize],
        failures: s.systems - s.per_status[Status::Ok as usize],
        discarded_eigenvalues: s.discarded_eigenvalues,
    }
}

/// The regression matrices of one step of a run of `scenario` (exposure date 0,
/// middle exercise date), about `batch` of them. The run has an inner stage at `t_0`
/// (`simulation.value_t0=nested`): there every outer path starts from the spots, as in
/// the paper's Fig. 2.
///
/// # Errors
/// If the scenario cannot be loaded or has no American position.
pub fn capture_scenario_batch(
    scenario: &std::path::Path,
    batch: usize,
    f32_matrices: bool,
) -> Result<(usize, Vec<f64>, Vec<f64>)> {
    let sc = Scenario::load(
        scenario,
        &[
            format!("simulation.outer_paths={}", batch.max(1)),
            "simulation.value_t0=nested".into(),
        ],
    )?;
    let j = (sc.exposure_dates / 2).max(1);
    let sim = if f32_matrices {
        engine::simulate::<f32>(&sc, &NoProgress, Some((0, j)))
    } else {
        engine::simulate::<f64>(&sc, &NoProgress, Some((0, j)))
    };
    let Some(cap) = sim.captured else {
        bail!(
            "{}: no regression at exercise date {j} to capture",
            scenario.display()
        );
    };
    Ok((cap.n, cap.a, cap.b))
}

/// Runs the benchmark and prints/writes the rows.
///
/// # Errors
/// On unknown names, or if a scenario or the output cannot be read or written.
pub fn solvers(args: &SolverBenchArgs) -> Result<()> {
    for b in &args.backend {
        if b != "cpu" && b != "gpu" {
            bail!("unknown backend `{b}` (cpu or gpu)");
        }
    }
    let strategies: Vec<Strategy> = args
        .strategy
        .iter()
        .map(|s| Strategy::from_name(s).with_context(|| format!("unknown strategy `{s}`")))
        .collect::<Result<_>>()?;
    for p in &args.precision {
        if p != "f32" && p != "f64" {
            bail!("unknown precision `{p}` (f32 or f64)");
        }
    }
    for &n in &args.n {
        if !(1..=cva_kernels::MAX_N).contains(&n) {
            bail!("n = {n} outside 1..={}", cva_kernels::MAX_N);
        }
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()?;
    let mut rows = Vec::new();
    if args.backend.iter().any(|b| b == "gpu") {
        for row in gpu_rows(args, &strategies)? {
            if !args.json {
                print_row(&row, rows.is_empty());
            }
            rows.push(row);
        }
    }
    if !args.backend.iter().any(|b| b == "cpu") {
        return finish(args, &rows);
    }
    let batch = args.batch.unwrap_or(16384);
    let mut run = |family: &str, n: usize, a: &[f64], b: &[f64], precision: &str| {
        for &s in &strategies {
            let row = pool.install(|| match precision {
                "f32" => bench_one::<f32>(family, n, a, b, s, args.repeats),
                _ => bench_one::<f64>(family, n, a, b, s, args.repeats),
            });
            if !args.json {
                print_row(&row, rows.is_empty());
            }
            rows.push(row);
        }
    };
    for family in &args.family {
        match family.as_str() {
            "paper" => {
                for &rho in &args.rho {
                    for &n in &args.n {
                        let (a, b) = paper_family::<f64>(n, batch, rho, 0x5eed + n as u64);
                        for p in &args.precision {
                            run(&format!("paper(rho={rho})"), n, &a, &b, p);
                        }
                    }
                }
            }
            "basket29" => {
                for p in &args.precision {
                    let (n, a, b) = capture_scenario_batch(&args.scenario, batch, p == "f32")?;
                    run("basket29", n, &a, &b, p);
                }
            }
            other => bail!("unknown family `{other}` (paper or basket29)"),
        }
    }
    finish(args, &rows)
}

fn finish(args: &SolverBenchArgs, rows: &[SolverBenchRow]) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string(rows)?);
    }
    if let Some(path) = &args.out {
        write_rows(rows, path)?;
    }
    Ok(())
}

/// Systems per family that the GPU benchmark uploads (and repeats on the device up to
/// the batch): the paper family is generated, `basket29` captured from a CPU run.
const GPU_FAMILY_SYSTEMS: usize = 4096;

/// The GPU rows: every organisation of each selected strategy and the vendor routines,
/// on the same matrices, timed with device events (`cva_kernels::cuda::bench_solvers`):
/// first the generated random symmetric, strictly diagonally dominant systems
/// (`diag-dominant`, sizes `--n`), then each `--family` (the paper's `Ξ_ρ` family for
/// each `--n` and `--rho`, the `basket29` regression matrices captured in each
/// precision), [`GPU_FAMILY_SYSTEMS`] distinct systems repeated up to the batch.
fn gpu_rows(args: &SolverBenchArgs, strategies: &[Strategy]) -> Result<Vec<SolverBenchRow>> {
    use cva_kernels::cuda::bench::HostSystems;
    use cva_kernels::cuda::{bench_solvers, BenchConfig, GpuBatchSolver};
    let solver = GpuBatchSolver::new(0).context("bench solvers --backend gpu")?;
    let base = BenchConfig {
        sizes: args.n.clone(),
        f32: args.precision.iter().any(|p| p == "f32"),
        f64: args.precision.iter().any(|p| p == "f64"),
        repeats: args.repeats.max(1),
        max_batch: args.batch.unwrap_or(BenchConfig::default().max_batch),
        ..BenchConfig::default()
    };
    let mut configs = vec![base.clone()];
    for family in &args.family {
        match family.as_str() {
            "paper" => {
                for &rho in &args.rho {
                    for &n in &args.n {
                        let (a, b) =
                            paper_family::<f64>(n, GPU_FAMILY_SYSTEMS, rho, 0x5eed + n as u64);
                        configs.push(BenchConfig {
                            systems: Some(HostSystems {
                                family: format!("paper(rho={rho})"),
                                n,
                                a,
                                b,
                            }),
                            ..base.clone()
                        });
                    }
                }
            }
            "basket29" => {
                for p in &args.precision {
                    let (n, a, b) =
                        capture_scenario_batch(&args.scenario, GPU_FAMILY_SYSTEMS, p == "f32")?;
                    configs.push(BenchConfig {
                        systems: Some(HostSystems {
                            family: "basket29".into(),
                            n,
                            a,
                            b,
                        }),
                        f32: p == "f32",
                        f64: p == "f64",
                        ..base.clone()
                    });
                }
            }
            other => bail!("unknown family `{other}` (paper or basket29)"),
        }
    }
    let selected = |method: &str| {
        !method.starts_with("ldlt")
            && !method.starts_with("householder")
            && !method.starts_with("divide")
            && !method.starts_with("escalating")
            || strategies.iter().any(|s| method.starts_with(s.name()))
    };
    let mut rows = Vec::new();
    for cfg in &configs {
        let report = bench_solvers(&solver, cfg).context("GPU benchmark")?;
        for note in &report.notes {
            eprintln!("note: {note}");
        }
        rows.extend(
            report
                .rows
                .iter()
                .filter(|r| selected(&r.method))
                .map(|r| SolverBenchRow {
                    backend: "gpu".into(),
                    device: report.device.clone(),
                    family: r.family.clone(),
                    n: r.n,
                    batch: r.batch,
                    precision: r.precision.into(),
                    strategy: r.method.clone(),
                    nstar: r.nstar,
                    seconds: r.seconds,
                    systems_per_second: r.systems_per_s,
                    floor_systems_per_second: r.floor_systems_per_s,
                    max_residual: r.max_residual,
                    ldlt: r.methods[0],
                    householder_pcr: r.methods[1],
                    divide_conquer: r.methods[2],
                    failures: r.failures,
                    discarded_eigenvalues: r.discarded,
                }),
        );
    }
    Ok(rows)
}

fn print_row(r: &SolverBenchRow, header: bool) {
    if header {
        println!(
            "{:<4} {:<16} {:>3} {:>8} {:>5} {:<22} {:>3} {:>11} {:>14} {:>14} {:>10} {:>8} {:>8} {:>8} {:>8}",
            "", "family", "n", "batch", "prec", "strategy", "n*", "seconds", "systems/s",
            "floor sys/s", "max resid", "ldlt", "hh-pcr", "d&c", "failed"
        );
    }
    println!(
        "{:<4} {:<16} {:>3} {:>8} {:>5} {:<22} {:>3} {:>11.6} {:>14.0} {:>14.0} {:>10.2e} {:>8} {:>8} {:>8} {:>8}",
        r.backend,
        r.family,
        r.n,
        r.batch,
        r.precision,
        r.strategy,
        r.nstar,
        r.seconds,
        r.systems_per_second,
        r.floor_systems_per_second,
        r.max_residual,
        r.ldlt,
        r.householder_pcr,
        r.divide_conquer,
        r.failures
    );
}

fn write_rows(rows: &[SolverBenchRow], path: &std::path::Path) -> Result<()> {
    let r = rows;
    let u = |name: &str, g: fn(&SolverBenchRow) -> usize| column(r, name, |x| g(x) as u64);
    let df = DataFrame::new(
        r.len(),
        vec![
            column(r, "backend", |x| x.backend.clone()),
            column(r, "device", |x| x.device.clone()),
            column(r, "family", |x| x.family.clone()),
            u("n", |x| x.n),
            u("batch", |x| x.batch),
            column(r, "precision", |x| x.precision.clone()),
            column(r, "strategy", |x| x.strategy.clone()),
            u("nstar", |x| x.nstar),
            column(r, "seconds", |x| x.seconds),
            column(r, "systems_per_second", |x| x.systems_per_second),
            column(r, "floor_systems_per_second", |x| {
                x.floor_systems_per_second
            }),
            column(r, "max_residual", |x| x.max_residual),
            u("ldlt", |x| x.ldlt),
            u("householder_pcr", |x| x.householder_pcr),
            u("divide_conquer", |x| x.divide_conquer),
            u("failures", |x| x.failures),
            u("discarded_eigenvalues", |x| x.discarded_eigenvalues),
        ],
    )?;
    write_parquet(df, path)
}

/// Writes `df` to `path` through a temporary file in the same directory.
fn write_parquet(mut df: DataFrame, path: &std::path::Path) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let tmp = match dir {
        Some(d) => d.join(".bench.parquet.tmp"),
        None => PathBuf::from(".bench.parquet.tmp"),
    };
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    ParquetWriter::new(file).finish(&mut df)?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// `cva bench run SCENARIO --backend cpu,gpu`: the same scenario on each backend.
#[derive(Args, Debug, Clone)]
pub struct RunBenchArgs {
    /// Scenario file (YAML).
    pub scenario: PathBuf,
    /// Backends, comma-separated: `cpu`, `gpu`.
    #[arg(long, value_delimiter = ',', default_value = "cpu,gpu")]
    pub backend: Vec<String>,
    /// Override a scenario field (repeatable), as for `cva run`.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// CPU worker threads (default: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print the rows as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Also write the rows to this Parquet file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One backend's run of a scenario.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunBenchRow {
    pub scenario: String,
    pub backend: String,
    pub device: String,
    pub precision: String,
    pub outer_paths: usize,
    pub inner_paths: usize,
    /// Inner paths in antithetic pairs (`simulation.antithetic`).
    pub antithetic: bool,
    /// Wall time of the simulation (GPU: after start-up), seconds.
    pub wall_seconds: f64,
    pub paths_seconds: f64,
    pub regression_build_seconds: f64,
    pub solve_seconds: f64,
    pub exposure_seconds: f64,
    /// Regression systems solved per second of wall time.
    pub regressions_per_second: f64,
    /// Asset-steps of the outer and inner paths per second of wall time.
    pub path_steps_per_second: f64,
    /// This row's speed over the CPU row's (`wall_cpu / wall`); 1 for the CPU.
    pub speedup_over_cpu: f64,
    pub cva: f64,
    pub cva_std_error: f64,
}

/// Asset-steps simulated by a run: outer paths over all dates, and at every date `t_k`
/// with an inner stage ([`Scenario::inner_stages`]) the inner paths up to the last
/// maturity after it.
pub fn path_steps(sc: &Scenario) -> f64 {
    let n = sc.exposure_dates;
    let d = sc.market.assets.len() as f64;
    let (m0, m) = (
        sc.simulation.outer_paths as f64,
        sc.simulation.inner_paths as f64,
    );
    let inner_steps: usize = sc.inner_stages().map(|(_, steps)| steps).sum();
    m0 * d * (n as f64 + m * inner_steps as f64)
}

/// No bars; the run's notes (backend, retries) on stderr.
struct NotesOnly;
impl engine::Progress for NotesOnly {
    fn note(&self, line: &str) {
        eprintln!("{line}");
    }
}

/// Runs the benchmark and prints/writes the rows.
///
/// # Errors
/// On an invalid scenario, an unknown backend, or a backend that cannot run.
pub fn run(args: &RunBenchArgs) -> Result<()> {
    let mut rows: Vec<RunBenchRow> = Vec::new();
    for b in &args.backend {
        if b != "cpu" && b != "gpu" {
            bail!("unknown backend `{b}` (cpu or gpu)");
        }
        let mut set = args.set.clone();
        set.push(format!("simulation.backend={b}"));
        let sc = Scenario::load(&args.scenario, &set)?;
        let out = crate::run::run(&sc, args.threads, &NotesOnly)?;
        let s = &out.summary;
        rows.push(RunBenchRow {
            scenario: s.scenario.clone(),
            backend: s.backend.clone(),
            device: s.device.clone(),
            precision: s.precision.clone(),
            outer_paths: s.outer_paths,
            inner_paths: s.inner_paths,
            antithetic: s.antithetic,
            wall_seconds: s.wall_seconds,
            paths_seconds: s.paths_seconds,
            regression_build_seconds: s.regression_build_seconds,
            solve_seconds: s.solve_seconds,
            exposure_seconds: s.exposure_seconds,
            regressions_per_second: s.systems_solved as f64 / s.wall_seconds,
            path_steps_per_second: path_steps(&sc) / s.wall_seconds,
            speedup_over_cpu: f64::NAN,
            cva: s.cva,
            cva_std_error: s.cva_std_error,
        });
    }
    if let Some(cpu) = rows
        .iter()
        .find(|r| r.backend == "cpu")
        .map(|r| r.wall_seconds)
    {
        for r in &mut rows {
            r.speedup_over_cpu = cpu / r.wall_seconds;
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!(
            "{:<8} {:<24} {:>5} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>14} {:>14} {:>8}",
            "backend",
            "device",
            "prec",
            "outer",
            "wall s",
            "paths",
            "build",
            "solve",
            "exposure",
            "regressions/s",
            "path-steps/s",
            "vs cpu"
        );
        for r in &rows {
            println!(
                "{:<8} {:<24} {:>5} {:>9} {:>10.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>14.3e} {:>14.3e} {:>8.1}",
                r.backend,
                r.device,
                r.precision,
                r.outer_paths,
                r.wall_seconds,
                r.paths_seconds,
                r.regression_build_seconds,
                r.solve_seconds,
                r.exposure_seconds,
                r.regressions_per_second,
                r.path_steps_per_second,
                r.speedup_over_cpu
            );
        }
    }
    if let Some(path) = &args.out {
        let r = &rows;
        let u = |name: &str, g: fn(&RunBenchRow) -> usize| column(r, name, |x| g(x) as u64);
        let df = DataFrame::new(
            r.len(),
            vec![
                column(r, "scenario", |x| x.scenario.clone()),
                column(r, "backend", |x| x.backend.clone()),
                column(r, "device", |x| x.device.clone()),
                column(r, "precision", |x| x.precision.clone()),
                u("outer_paths", |x| x.outer_paths),
                u("inner_paths", |x| x.inner_paths),
                column(r, "antithetic", |x| x.antithetic),
                column(r, "wall_seconds", |x| x.wall_seconds),
                column(r, "paths_seconds", |x| x.paths_seconds),
                column(r, "regression_build_seconds", |x| {
                    x.regression_build_seconds
                }),
                column(r, "solve_seconds", |x| x.solve_seconds),
                column(r, "exposure_seconds", |x| x.exposure_seconds),
                column(r, "regressions_per_second", |x| x.regressions_per_second),
                column(r, "path_steps_per_second", |x| x.path_steps_per_second),
                column(r, "speedup_over_cpu", |x| x.speedup_over_cpu),
                column(r, "cva", |x| x.cva),
                column(r, "cva_std_error", |x| x.cva_std_error),
            ],
        )?;
        write_parquet(df, path)?;
    }
    Ok(())
}
