//! One `cva run`: load, simulate on the chosen backend, estimate, report.

use crate::engine::{self, NestedSimulation, Progress};
use crate::exposure::{self, CvaEstimate};
use crate::report::{self, ReportFile, Summary};
use crate::scenario::{Backend, Precision, Scenario};
use anyhow::{bail, Result};
use cva_kernels::Method;
use std::path::Path;
use std::time::Instant;

/// The backend a run actually uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedBackend {
    Cpu,
}

/// Chooses the backend for `requested`. The GPU engine of `cva run` is not part of this
/// version: `auto` runs on the CPU (and says why in `note`), `gpu` is an error.
///
/// # Errors
/// If `gpu` is requested.
pub fn resolve_backend(requested: Backend) -> Result<(ResolvedBackend, Option<String>)> {
    match requested {
        Backend::Cpu => Ok((ResolvedBackend::Cpu, None)),
        Backend::Auto => Ok((
            ResolvedBackend::Cpu,
            Some(
                "backend auto: running on the CPU (this version has no GPU engine for `cva run`)"
                    .into(),
            ),
        )),
        Backend::Gpu => {
            bail!("backend gpu: this version of `cva run` has no GPU engine yet; use --backend cpu")
        }
    }
}

/// Output of a run.
pub struct RunOutput {
    pub summary: Summary,
    pub estimate: CvaEstimate,
    pub simulation: NestedSimulation,
}

/// Simulates `scenario` on the CPU with `threads` rayon threads (0: all cores).
///
/// # Errors
/// If the thread pool cannot be built.
pub fn run(scenario: &Scenario, threads: usize, progress: &dyn Progress) -> Result<RunOutput> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let threads = pool.current_num_threads();
    let start = Instant::now();
    let simulation = pool.install(|| match scenario.simulation.precision {
        Precision::F64 => engine::simulate::<f64>(scenario, progress, None),
        Precision::F32 => engine::simulate::<f32>(scenario, progress, None),
    });
    let estimate = exposure::estimate(scenario, &simulation.netted_values, simulation.outer_paths);
    let wall = start.elapsed().as_secs_f64();
    let mut total = cva_kernels::BatchSummary::default();
    let mut too_few = 0;
    for s in &simulation.steps {
        total.merge(&s.summary);
        too_few += s.too_few_paths;
    }
    let sim = &scenario.simulation;
    let t = &simulation.timings;
    let summary = Summary {
        scenario: scenario.name.clone(),
        cva: estimate.cva,
        cva_std_error: estimate.cva_std_error,
        cva_ci_low: estimate.cva_ci.0,
        cva_ci_high: estimate.cva_ci.1,
        value_t0: estimate.value_t0,
        value_t0_std_error: estimate.value_t0_std_error,
        hazard_rate: scenario.counterparty.hazard.flat_rate(),
        recovery_rate: scenario.counterparty.recovery_rate,
        horizon: scenario.horizon,
        exposure_dates: scenario.exposure_dates,
        outer_paths: sim.outer_paths,
        inner_paths: sim.inner_paths,
        basis: sim.basis.describe(),
        precision: sim.precision.name().into(),
        strategy: sim.strategy.name().into(),
        backend: "cpu".into(),
        device: "cpu".into(),
        threads,
        seed: sim.seed,
        wall_seconds: wall,
        paths_seconds: t.paths.as_secs_f64(),
        regression_build_seconds: t.regression_build.as_secs_f64(),
        solve_seconds: t.solve.as_secs_f64(),
        exposure_seconds: t.exposure.as_secs_f64(),
        systems_solved: total.systems,
        solved_ldlt: total.per_method[Method::Ldlt as usize],
        solved_householder_pcr: total.per_method[Method::HouseholderPcr as usize],
        solved_divide_conquer: total.per_method[Method::DivideConquer as usize],
        solver_failures: total.failures(),
        discarded_eigenvalues: total.discarded_eigenvalues,
        too_few_paths: too_few,
        outer_exercises: simulation.outer_exercises,
    };
    Ok(RunOutput {
        summary,
        estimate,
        simulation,
    })
}

/// Writes the report files of `out` into `dir` (all or nothing).
///
/// # Errors
/// If a file cannot be built or written.
pub fn write_reports(
    out: &RunOutput,
    scenario: &Scenario,
    dir: &Path,
) -> Result<Vec<std::path::PathBuf>> {
    let files = vec![
        ReportFile::Parquet("summary.parquet", report::summary_frame(&out.summary)?),
        ReportFile::Parquet(
            "exposure.parquet",
            report::exposure_frame(&out.estimate.profile)?,
        ),
        ReportFile::Parquet(
            "solver_stats.parquet",
            report::solver_frame(&out.simulation.steps)?,
        ),
        ReportFile::Text(
            "exposure.svg",
            report::exposure_svg(
                &out.estimate.profile,
                &format!("{}: exposure profile", scenario.name),
                scenario.simulation.pfe_quantile,
            )?,
        ),
    ];
    report::write_report(dir, files)
}
