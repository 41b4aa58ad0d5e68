//! `cva bench solvers`: every solver strategy on the same generated batches.
//!
//! Families: `paper` (the test matrices of Section 3.3 of Abbas-Turki & Graillat 2016,
//! `A = Q R Q^T`, for each `--rho`) and `basket29` (the regression matrices of one
//! Longstaff–Schwartz step of `scenarios/basket29.yaml`, n = 30, captured from a run).

use crate::engine::{self, NoProgress};
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
    /// Backend: `cpu` (the GPU solvers are not part of this version).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// System sizes for the `paper` family.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,30,32,48,64")]
    pub n: Vec<usize>,
    /// Systems per batch.
    #[arg(long, default_value_t = 16384)]
    pub batch: usize,
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

/// One measured (family, n, precision, strategy) combination.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SolverBenchRow {
    pub backend: String,
    pub family: String,
    pub n: usize,
    pub batch: usize,
    pub precision: String,
    pub strategy: String,
    /// Median wall time of one batched solve.
    pub seconds: f64,
    pub systems_per_second: f64,
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
        family: family.into(),
        n,
        batch: systems.batch,
        precision: T::NAME.into(),
        strategy: strategy.name().into(),
        seconds,
        systems_per_second: systems.batch as f64 / seconds,
        max_residual: s.max_residual,
        ldlt: s.per_method[Method::Ldlt as usize],
        householder_pcr: s.per_method[Method::HouseholderPcr as usize],
        divide_conquer: s.per_method[Method::DivideConquer as usize],
        failures: s.systems - s.per_status[Status::Ok as usize],
        discarded_eigenvalues: s.discarded_eigenvalues,
    }
}

/// The regression matrices of one step of a run of `scenario` (exposure date 0,
/// middle exercise date), about `batch` of them.
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
        &[format!("simulation.outer_paths={}", batch.max(1))],
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
    if args.backend != "cpu" {
        bail!(
            "bench solvers: backend `{}` is not available in this version (use --backend cpu)",
            args.backend
        );
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
                        let (a, b) = paper_family::<f64>(n, args.batch, rho, 0x5eed + n as u64);
                        for p in &args.precision {
                            run(&format!("paper(rho={rho})"), n, &a, &b, p);
                        }
                    }
                }
            }
            "basket29" => {
                for p in &args.precision {
                    let (n, a, b) = capture_scenario_batch(&args.scenario, args.batch, p == "f32")?;
                    run("basket29", n, &a, &b, p);
                }
            }
            other => bail!("unknown family `{other}` (paper or basket29)"),
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&rows)?);
    }
    if let Some(path) = &args.out {
        write_rows(&rows, path)?;
    }
    Ok(())
}

fn print_row(r: &SolverBenchRow, header: bool) {
    if header {
        println!(
            "{:<16} {:>3} {:>8} {:>5} {:<16} {:>11} {:>14} {:>10} {:>8} {:>8} {:>8} {:>8}",
            "family",
            "n",
            "batch",
            "prec",
            "strategy",
            "seconds",
            "systems/s",
            "max resid",
            "ldlt",
            "hh-pcr",
            "d&c",
            "failed"
        );
    }
    println!(
        "{:<16} {:>3} {:>8} {:>5} {:<16} {:>11.6} {:>14.0} {:>10.2e} {:>8} {:>8} {:>8} {:>8}",
        r.family,
        r.n,
        r.batch,
        r.precision,
        r.strategy,
        r.seconds,
        r.systems_per_second,
        r.max_residual,
        r.ldlt,
        r.householder_pcr,
        r.divide_conquer,
        r.failures
    );
}

fn write_rows(rows: &[SolverBenchRow], path: &std::path::Path) -> Result<()> {
    let s = |g: fn(&SolverBenchRow) -> String| rows.iter().map(g).collect::<Vec<_>>();
    let u = |g: fn(&SolverBenchRow) -> usize| rows.iter().map(|r| g(r) as u64).collect::<Vec<_>>();
    let f = |g: fn(&SolverBenchRow) -> f64| rows.iter().map(g).collect::<Vec<_>>();
    let mut df = DataFrame::new(
        rows.len(),
        vec![
            Column::new("backend".into(), s(|r| r.backend.clone())),
            Column::new("family".into(), s(|r| r.family.clone())),
            Column::new("n".into(), u(|r| r.n)),
            Column::new("batch".into(), u(|r| r.batch)),
            Column::new("precision".into(), s(|r| r.precision.clone())),
            Column::new("strategy".into(), s(|r| r.strategy.clone())),
            Column::new("seconds".into(), f(|r| r.seconds)),
            Column::new("systems_per_second".into(), f(|r| r.systems_per_second)),
            Column::new("max_residual".into(), f(|r| r.max_residual)),
            Column::new("ldlt".into(), u(|r| r.ldlt)),
            Column::new("householder_pcr".into(), u(|r| r.householder_pcr)),
            Column::new("divide_conquer".into(), u(|r| r.divide_conquer)),
            Column::new("failures".into(), u(|r| r.failures)),
            Column::new(
                "discarded_eigenvalues".into(),
                u(|r| r.discarded_eigenvalues),
            ),
        ],
    )?;
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
