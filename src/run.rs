//! One `cva run`: load, simulate on the chosen backend, estimate, report.

use crate::engine::{self, NestedSimulation, Progress};
use crate::exposure::{self, CvaEstimate};
use crate::gpu_engine::GpuEngine;
use crate::report::{self, ReportFile, Summary};
use crate::scenario::{Backend, Precision, Scenario};
use anyhow::{anyhow, bail, Result};
use cva_kernels::Method;
use std::path::Path;
use std::time::Instant;

/// The backend a run actually uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedBackend {
    Cpu,
    Gpu,
}

/// Chooses the backend for `requested` by probing for a CUDA device (no context is
/// created): `cpu` is the CPU; `gpu` is the GPU, or an error without one; `auto` is
/// the GPU when one is present, else the CPU with a one-line `note` saying why.
/// [`run`] also falls back from `auto` to the CPU when the GPU fails to start.
///
/// # Errors
/// If `gpu` is requested and no usable device is found.
pub fn resolve_backend(requested: Backend) -> Result<(ResolvedBackend, Option<String>)> {
    match requested {
        Backend::Cpu => Ok((ResolvedBackend::Cpu, None)),
        Backend::Auto => match cva_kernels::cuda::probe() {
            Ok(_) => Ok((ResolvedBackend::Gpu, None)),
            Err(e) => Ok((
                ResolvedBackend::Cpu,
                Some(format!("backend auto: running on the CPU ({e})")),
            )),
        },
        Backend::Gpu => match cva_kernels::cuda::probe() {
            Ok(_) => Ok((ResolvedBackend::Gpu, None)),
            Err(e) => bail!("backend gpu: not available: {e}; use --backend cpu or auto"),
        },
    }
}

/// The GPU engine after start-up, in the scenario's precision.
enum StartedGpu {
    F64(GpuEngine<f64>),
    F32(GpuEngine<f32>),
}

impl StartedGpu {
    fn start(scenario: &Scenario) -> Result<Self, cva_kernels::cuda::GpuError> {
        Ok(match scenario.simulation.precision {
            Precision::F64 => Self::F64(GpuEngine::new(scenario)?),
            Precision::F32 => Self::F32(GpuEngine::new(scenario)?),
        })
    }
    fn name(&self) -> String {
        match self {
            Self::F64(e) => e.device_name().to_string(),
            Self::F32(e) => e.device_name().to_string(),
        }
    }
    fn startup_seconds(&self) -> f64 {
        match self {
            Self::F64(e) => e.startup_time().as_secs_f64(),
            Self::F32(e) => e.startup_time().as_secs_f64(),
        }
    }
    fn simulate(
        &self,
        scenario: &Scenario,
        progress: &dyn Progress,
    ) -> Result<(NestedSimulation, CvaEstimate), cva_kernels::cuda::GpuError> {
        match self {
            Self::F64(e) => e.simulate(scenario, progress),
            Self::F32(e) => e.simulate(scenario, progress),
        }
    }
}

/// Output of a run.
pub struct RunOutput {
    pub summary: Summary,
    pub estimate: CvaEstimate,
    pub simulation: NestedSimulation,
}

/// Simulates `scenario` on its backend: `cpu` with `threads` rayon threads (0: all
/// cores); `gpu` on CUDA device 0; `auto` on the GPU when one is present and starts
/// (context, NVRTC compiles), else on the CPU. [`Progress::note`] receives one-line
/// messages for the terminal: which GPU runs, why `auto` fell back to the CPU, the GPU
/// engine's out-of-memory retries.
///
/// # Errors
/// If the thread pool cannot be built; with `gpu`, if there is no usable GPU or it
/// fails to start; on the GPU, any kernel or driver error during the run.
pub fn run(scenario: &Scenario, threads: usize, progress: &dyn Progress) -> Result<RunOutput> {
    let note = |line: &str| progress.note(line);
    let requested = scenario.simulation.backend;
    let (resolved, why) = resolve_backend(requested)?;
    if let Some(why) = why {
        note(&why);
    }
    let gpu = match resolved {
        ResolvedBackend::Cpu => None,
        ResolvedBackend::Gpu => match StartedGpu::start(scenario) {
            Ok(g) => {
                let label = if requested == Backend::Auto {
                    "backend auto"
                } else {
                    "backend gpu"
                };
                note(&format!(
                    "{label}: GPU {} (start-up {:.2} s: context, NVRTC compiles)",
                    g.name(),
                    g.startup_seconds()
                ));
                Some(g)
            }
            Err(e) if requested == Backend::Auto => {
                note(&format!(
                    "backend auto: the GPU failed to start, running on the CPU: {e}"
                ));
                None
            }
            Err(e) => bail!("backend gpu: the GPU failed to start: {e}"),
        },
    };
    // The GPU engine estimates on the device (its netted values stay there); the CPU's
    // netted values go through `exposure::estimate`.
    let (simulation, gpu_estimate, threads, backend, device, start) = match &gpu {
        Some(g) => {
            let start = Instant::now();
            let (simulation, estimate) = g
                .simulate(scenario, progress)
                .map_err(|e| anyhow!("GPU engine failed during the run: {e}"))?;
            (simulation, Some(estimate), 1, "gpu", g.name(), start)
        }
        None => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()?;
            let threads = pool.current_num_threads();
            let start = Instant::now();
            let simulation = pool.install(|| match scenario.simulation.precision {
                Precision::F64 => engine::simulate::<f64>(scenario, progress, None),
                Precision::F32 => engine::simulate::<f32>(scenario, progress, None),
            });
            (simulation, None, threads, "cpu", "cpu".to_string(), start)
        }
    };
    let estimate = gpu_estimate.unwrap_or_else(|| {
        exposure::estimate(scenario, &simulation.netted_values, simulation.outer_paths)
    });
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
        value_t0_method: sim.value_t0.name().into(),
        hazard_rate: scenario.counterparty.hazard.flat_rate(),
        recovery_rate: scenario.counterparty.recovery_rate,
        horizon: scenario.horizon,
        exposure_dates: scenario.exposure_dates,
        outer_paths: sim.outer_paths,
        inner_paths: sim.inner_paths,
        antithetic: sim.antithetic,
        basis: sim.basis.describe(),
        precision: sim.precision.name().into(),
        strategy: sim.strategy.name().into(),
        backend: backend.into(),
        device,
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
