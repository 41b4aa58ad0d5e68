//! The nested Monte Carlo engine on one CUDA GPU: the CPU engine ([`crate::engine`])
//! step for step, with the inner paths, cash flows, regression matrices and solves kept
//! in device memory.
//!
//! Per chunk of outer paths (sized from the device's free memory, halved on
//! out-of-memory): outer paths on the device ([`GpuPaths`]) and copied back (the host
//! decides maturities and exercise along the outer path); per exposure date `t_k`: the
//! inner paths ([`GpuPaths::inner_paths`], the CPU's Philox streams and layout), the
//! European values (payoff sums per outer path), and for each American position the
//! Longstaff–Schwartz backward induction: cash flows at maturity, then per exercise date
//! `j` the discounted cash flows `y`, the fused build of `A`, `b` and the path counts
//! ([`GpuRegression`]), the selection of the alive outer paths with `counts >= n`
//! (counts come back to the host), the batched solve on the device
//! ([`GpuBatchSolver::solve_batched_gpu`], the scenario's strategy and parameters, the
//! escalation memory rule per position and exercise date as on the CPU), and the
//! exercise update of the cash flows on the device (`cuda/engine.cu`). Only counts,
//! per-system reports and per-outer-path sums cross the bus during a chunk.
//!
//! Arithmetic follows the CPU engine (same sums in the same order, no FMA); states
//! differ from the CPU's by an ulp or two through CUDA's `exp`, `log`, `sin`, `cos`,
//! which can flip a rare exercise decision or solver branch: results agree with the
//! CPU's to far below the Monte Carlo error, not bitwise.

use crate::basis::BasisFunctions;
use crate::engine::{last_maturity_after, pay_maturing, value_or_exercise};
use crate::engine::{NestedSimulation, PhaseTimings, Progress, RegressionStepStats};
use crate::model::correlation_factor;
use crate::scenario::{OptionKind, Scenario, Style, Underlying};
use cva_kernels::cuda::engine::driver::{sys::CUresult, CudaSlice, DriverError};
use cva_kernels::cuda::engine::{DeviceBasis, DevicePayoff, EngineKernels, StateView};
use cva_kernels::cuda::paths::{GpuPaths, MarketSteps};
use cva_kernels::cuda::regression::{
    GpuOptionKind, GpuPayoff, GpuRegression, GpuUnderlying, RegressionConfig, RegressionSpec,
};
use cva_kernels::cuda::{GpuBatchSolver, GpuError, GpuOptions, GpuReal, GpuReport};
use cva_kernels::{BatchSummary, Method, Status, Strategy, SystemReport};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Share of the device's free memory a chunk may use (the rest: solver workspaces,
/// fragmentation).
const MEMORY_SHARE: f64 = 0.6;

struct American<T: GpuReal> {
    position: usize,
    n: usize,
    regression: GpuRegression<T>,
    basis: DeviceBasis,
}

/// The GPU engine after start-up: device context, compiled kernels, tables uploaded.
pub struct GpuEngine<T: GpuReal> {
    solver: GpuBatchSolver,
    paths: GpuPaths,
    kernels: EngineKernels,
    /// One per position of the portfolio.
    payoffs: Vec<DevicePayoff>,
    americans: Vec<American<T>>,
    discount: CudaSlice<f64>,
    startup: Duration,
}

/// What one chunk produced, committed only when the whole chunk succeeded.
struct ChunkOutput {
    /// `[k * c + l]`.
    values: Vec<f64>,
    steps: Vec<(usize, usize, BatchSummary, Vec<f32>, usize)>,
    timings: PhaseTimings,
    outer_exercises: usize,
    start_level: Vec<Vec<Method>>,
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

impl<T: GpuReal> GpuEngine<T> {
    /// Start-up: opens device 0, compiles every kernel the scenario needs (paths,
    /// regression builds, engine kernels, solvers) and uploads the market and tables.
    ///
    /// # Errors
    /// No device, NVRTC compile failures (with the log), driver errors, a basis larger
    /// than the kernels support.
    pub fn new(scenario: &Scenario) -> Result<Self, GpuError> {
        let t0 = Instant::now();
        let sim = &scenario.simulation;
        let solver = GpuBatchSolver::new(0)?;
        let stream = solver.stream().clone();
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
        let paths = GpuPaths::new(
            &stream,
            &MarketSteps {
                spots: &spots,
                drift: &drift,
                vol: &vol,
                factor: factor.as_deref(),
            },
            sim.seed,
        )?;
        let kernels = EngineKernels::new(&stream)?;
        let payoffs = (0..scenario.portfolio.len())
            .map(|p| DevicePayoff::new(&stream, &gpu_payoff(scenario, p)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut americans = Vec::new();
        for (p, pos) in scenario.portfolio.iter().enumerate() {
            if pos.style != Style::American {
                continue;
            }
            let basis = BasisFunctions::new(sim.basis, pos.underlying.assets(), &spots)
                .tables()
                .clone();
            let spec = RegressionSpec {
                basis: basis.clone(),
                payoff: gpu_payoff(scenario, p),
                itm_only: sim.itm_only,
                assets: d,
                inner_paths: sim.inner_paths,
            };
            let regression = GpuRegression::<T>::new(&stream, &spec, RegressionConfig::default())?;
            americans.push(American {
                position: p,
                n: basis.len(),
                regression,
                basis: DeviceBasis::new(&stream, &basis)?,
            });
        }
        let mut ns: Vec<usize> = americans.iter().map(|a| a.n).collect();
        ns.sort_unstable();
        ns.dedup();
        if !ns.is_empty() {
            let options = GpuOptions::default();
            let strategies: Vec<Strategy> = match sim.strategy {
                Strategy::Escalating => vec![
                    Strategy::Ldlt,
                    Strategy::HouseholderPcr,
                    Strategy::DivideConquer,
                    Strategy::Escalating,
                ],
                s => vec![s],
            };
            for s in strategies {
                solver.prepare::<T>(&ns, s, &options)?;
            }
        }
        let discount: Vec<f64> = (0..=n_dates)
            .map(|s| (-scenario.market.rate * dt * s as f64).exp())
            .collect();
        let discount = stream.clone_htod(&discount)?;
        stream.synchronize()?;
        Ok(Self {
            solver,
            paths,
            kernels,
            payoffs,
            americans,
            discount,
            startup: t0.elapsed(),
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.solver.device().name
    }

    /// Time [`GpuEngine::new`] took (context, NVRTC compiles, uploads).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Device bytes per outer path of a chunk.
    fn bytes_per_path(&self, scenario: &Scenario) -> usize {
        let (m, d, n_dates) = (
            scenario.simulation.inner_paths,
            scenario.market.assets.len(),
            scenario.exposure_dates,
        );
        let nmax = self.americans.iter().map(|a| a.n).max().unwrap_or(1);
        let es = std::mem::size_of::<T>();
        let steps = scenario
            .portfolio
            .iter()
            .map(|p| p.maturity_index)
            .max()
            .unwrap_or(0);
        steps * m * d * 8
            + (n_dates + 1) * d * 8
            + m * (8 + 4 + 8)
            + 2 * (nmax * nmax + nmax) * es
            + nmax * es
            + std::mem::size_of::<GpuReport>()
            + 64
    }

    /// Runs the nested simulation of `scenario` (the one given to [`GpuEngine::new`]).
    ///
    /// # Errors
    /// Driver, launch or allocation errors (out-of-memory is retried with smaller chunks
    /// down to one outer path).
    pub fn simulate(
        &self,
        scenario: &Scenario,
        progress: &dyn Progress,
    ) -> Result<NestedSimulation, GpuError> {
        let m0 = scenario.simulation.outer_paths;
        let n_dates = scenario.exposure_dates;
        let (free, _) = self.solver.context().mem_get_info()?;
        let mut chunk = ((free as f64 * MEMORY_SHARE) as usize / self.bytes_per_path(scenario))
            .clamp(1, m0.max(1));
        let mut netted = vec![0.0; (n_dates + 1) * m0];
        let mut start_level = vec![vec![Method::Ldlt; n_dates + 1]; self.americans.len()];
        let mut timings = PhaseTimings::default();
        let mut outer_exercises = 0;
        let mut steps: Vec<RegressionStepStats> = Vec::new();
        let mut index: HashMap<(usize, usize), usize> = HashMap::new();
        let mut c0 = 0;
        while c0 < m0 {
            let c = chunk.min(m0 - c0);
            progress.chunk_started(c, n_dates);
            let out = match self.chunk(scenario, c0, c, start_level.clone(), progress) {
                Ok(out) => out,
                Err(e) if is_out_of_memory(&e) && c > 1 => {
                    chunk = c / 2;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for k in 0..=n_dates {
                netted[k * m0 + c0..k * m0 + c0 + c]
                    .copy_from_slice(&out.values[k * c..(k + 1) * c]);
            }
            for (k, j, summary, residuals, too_few) in out.steps {
                let idx = *index.entry((k, j)).or_insert_with(|| {
                    steps.push(RegressionStepStats {
                        exposure_date: k,
                        exercise_date: j,
                        ..Default::default()
                    });
                    steps.len() - 1
                });
                let st = &mut steps[idx];
                st.summary.merge(&summary);
                st.too_few_paths += too_few;
                st.residuals.extend(residuals);
            }
            timings.paths += out.timings.paths;
            timings.regression_build += out.timings.regression_build;
            timings.solve += out.timings.solve;
            timings.exposure += out.timings.exposure;
            outer_exercises += out.outer_exercises;
            start_level = out.start_level;
            progress.chunk_done(c);
            c0 += c;
        }
        steps.sort_by_key(|s| (s.exposure_date, s.exercise_date));
        Ok(NestedSimulation {
            netted_values: netted,
            outer_paths: m0,
            steps,
            timings,
            outer_exercises,
            captured: None,
        })
    }

    /// Outer paths `c0..c0+c`, all dates.
    #[allow(clippy::too_many_lines)]
    fn chunk(
        &self,
        scenario: &Scenario,
        c0: usize,
        c: usize,
        mut start_level: Vec<Vec<Method>>,
        progress: &dyn Progress,
    ) -> Result<ChunkOutput, GpuError> {
        let sim = &scenario.simulation;
        let positions = &scenario.portfolio;
        let stream = self.solver.stream();
        let (n_dates, m, d) = (
            scenario.exposure_dates,
            sim.inner_paths,
            scenario.market.assets.len(),
        );
        let nmax = self.americans.iter().map(|a| a.n).max().unwrap_or(1);
        let max_steps = positions
            .iter()
            .map(|p| p.maturity_index)
            .max()
            .unwrap_or(0)
            .max(1);
        let discount_host: Vec<f64> = (0..=n_dates)
            .map(|s| (-scenario.market.rate * (scenario.horizon / n_dates as f64) * s as f64).exp())
            .collect();
        let mut timings = PhaseTimings::default();
        let mut steps_out = Vec::new();
        let mut outer_exercises = 0;

        let t = Instant::now();
        let mut outer_dev = stream.alloc_zeros::<f64>(c * (n_dates + 1) * d)?;
        self.paths
            .outer_paths(c0 as u32, c, n_dates, &mut outer_dev.as_view_mut())?;
        let outer = stream.clone_dtoh(&outer_dev)?;
        timings.paths += t.elapsed();
        let state = |l: usize, k: usize| &outer[(l * (n_dates + 1) + k) * d..][..d];

        // Device buffers of the chunk.
        let mut inner_dev = stream.alloc_zeros::<f64>(c * max_steps * m * d)?;
        let mut cash = stream.alloc_zeros::<f64>(c * m)?;
        let mut cash_date = stream.alloc_zeros::<u32>(c * m)?;
        let mut y = stream.alloc_zeros::<f64>(c * m)?;
        let mut a_full = stream.alloc_zeros::<T>(c * nmax * nmax)?;
        let mut b_full = stream.alloc_zeros::<T>(c * nmax)?;
        let mut a_sel = stream.alloc_zeros::<T>(c * nmax * nmax)?;
        let mut b_sel = stream.alloc_zeros::<T>(c * nmax)?;
        let mut x = stream.alloc_zeros::<T>(c * nmax)?;
        let mut reports = stream.alloc_zeros::<GpuReport>(c)?;
        let mut counts = stream.alloc_zeros::<u32>(c)?;
        let mut beta_slot_dev = stream.alloc_zeros::<i32>(c)?;
        let mut idx_dev = stream.alloc_zeros::<u32>(c)?;
        let mut mean = stream.alloc_zeros::<f64>(c)?;
        let mut sums = stream.alloc_zeros::<f64>(c)?;
        let mut alive_dev = stream.alloc_zeros::<u8>(c)?;

        let mut values_all = vec![0.0; (n_dates + 1) * c];
        let mut alive = vec![true; positions.len() * c];
        for k in 0..=n_dates {
            let t = Instant::now();
            let mut values = vec![0.0; c];
            pay_maturing(positions, k, &mut alive, |l| state(l, k), &mut values);
            timings.exposure += t.elapsed();
            let last = last_maturity_after(positions, k);
            if let Some(last) = last {
                let steps = last - k;
                let stride = steps * m * d;
                let t = Instant::now();
                self.paths.inner_paths(
                    c0 as u32,
                    k as u32,
                    &outer_dev.slice(k * d..),
                    (n_dates + 1) * d,
                    c,
                    m,
                    steps,
                    &mut inner_dev.slice_mut(0..c * stride),
                )?;
                stream.synchronize()?;
                timings.paths += t.elapsed();
                let at = |j: usize| inner_dev.slice((j - k - 1) * m * d..c * stride);

                // European positions: discounted payoff averages.
                let t = Instant::now();
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
                    self.kernels
                        .payoff_sums(view, &self.payoffs[p], &mut sums.slice_mut(0..c))?;
                    let sums_h = stream.clone_dtoh(&sums.slice(0..c))?;
                    let df = discount_host[mi - k];
                    for (l, v) in values.iter_mut().enumerate() {
                        if alive[p * c + l] {
                            *v += pos.quantity * df * sums_h[l] / m as f64;
                        }
                    }
                }
                timings.exposure += t.elapsed();

                for (a, am) in self.americans.iter().enumerate() {
                    let pos = &positions[am.position];
                    let mi = pos.maturity_index;
                    if mi <= k {
                        continue;
                    }
                    let n = am.n;
                    let payoff = &self.payoffs[am.position];
                    let t = Instant::now();
                    let alive_h: Vec<u8> = alive[am.position * c..(am.position + 1) * c]
                        .iter()
                        .map(|&b| u8::from(b))
                        .collect();
                    stream.memcpy_htod(&alive_h, &mut alive_dev.slice_mut(0..c))?;
                    {
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
                            &mut cash.slice_mut(0..c * m),
                            &mut cash_date.slice_mut(0..c * m),
                        )?;
                    }
                    timings.exposure += t.elapsed();
                    for j in (k + 1..mi).rev() {
                        let start = start_level[a][j];
                        let states = at(j);
                        let view = StateView {
                            states: &states,
                            stride,
                            c,
                            m,
                            d,
                        };
                        // y, then the fused build of A, b and the counts.
                        let t = Instant::now();
                        self.kernels.discounted_cash(
                            &cash.slice(0..c * m),
                            &cash_date.slice(0..c * m),
                            &self.discount.as_view(),
                            j as u32,
                            &mut y.slice_mut(0..c * m),
                        )?;
                        am.regression.build(
                            &states,
                            stride,
                            &y.slice(0..c * m),
                            c,
                            &mut a_full.slice_mut(0..c * n * n),
                            &mut b_full.slice_mut(0..c * n),
                            &mut counts.slice_mut(0..c),
                        )?;
                        let counts_h = stream.clone_dtoh(&counts.slice(0..c))?;
                        let counts_h: Vec<usize> = counts_h
                            .iter()
                            .zip(&alive_h)
                            .map(|(&n_l, &al)| if al != 0 { n_l as usize } else { 0 })
                            .collect();
                        let solved: Vec<u32> = (0..c)
                            .filter(|&l| counts_h[l] >= n)
                            .map(|l| l as u32)
                            .collect();
                        let batch = solved.len();
                        timings.regression_build += t.elapsed();

                        // The batched solve of the selected systems.
                        let t = Instant::now();
                        let (summary, sys_reports) = if batch > 0 {
                            let (a_src, b_src) = if batch == c {
                                (&a_full, &b_full)
                            } else {
                                stream.memcpy_htod(&solved, &mut idx_dev.slice_mut(0..batch))?;
                                self.kernels.gather::<T>(
                                    n,
                                    &a_full.slice(0..c * n * n),
                                    &b_full.slice(0..c * n),
                                    &solved,
                                    &idx_dev.slice(0..batch),
                                    &mut a_sel.slice_mut(0..batch * n * n),
                                    &mut b_sel.slice_mut(0..batch * n),
                                )?;
                                (&a_sel, &b_sel)
                            };
                            let options = GpuOptions {
                                start,
                                ..GpuOptions::default()
                            };
                            self.solver.solve_batched_gpu::<T>(
                                n,
                                &a_src.slice(0..batch * n * n),
                                &b_src.slice(0..batch * n),
                                &mut x.slice_mut(0..batch * n),
                                &mut reports.slice_mut(0..batch),
                                sim.strategy,
                                &sim.solver_params,
                                &options,
                            )?;
                            let reps: Vec<SystemReport> = stream
                                .clone_dtoh(&reports.slice(0..batch))?
                                .into_iter()
                                .map(GpuReport::to_system_report)
                                .collect();
                            let start_eff = match sim.strategy {
                                Strategy::Escalating => start,
                                _ => Method::Ldlt,
                            };
                            (
                                BatchSummary::from_reports(
                                    &reps,
                                    start_eff,
                                    sim.solver_params.memory_fraction,
                                ),
                                reps,
                            )
                        } else {
                            (BatchSummary::from_reports(&[], start, 1.0), Vec::new())
                        };
                        timings.solve += t.elapsed();

                        // Exercise decisions on the inner paths.
                        let t = Instant::now();
                        let mut beta_slot = vec![-1i32; c];
                        for (s, &l) in solved.iter().enumerate() {
                            if sys_reports[s].status == Status::Ok {
                                beta_slot[l as usize] = s as i32;
                            }
                        }
                        stream.memcpy_htod(&beta_slot, &mut beta_slot_dev.slice_mut(0..c))?;
                        self.kernels.fallback_means(
                            view,
                            payoff,
                            sim.itm_only,
                            &cash.slice(0..c * m),
                            &cash_date.slice(0..c * m),
                            &self.discount.as_view(),
                            j as u32,
                            &alive_dev.slice(0..c),
                            &counts.slice(0..c),
                            &beta_slot_dev.slice(0..c),
                            &mut mean.slice_mut(0..c),
                        )?;
                        self.kernels.exercise::<T>(
                            view,
                            payoff,
                            &am.basis,
                            &x.slice(0..c * nmax),
                            &beta_slot,
                            &beta_slot_dev.slice(0..c),
                            &alive_dev.slice(0..c),
                            &counts.slice(0..c),
                            &mean.slice(0..c),
                            j as u32,
                            &mut cash.slice_mut(0..c * m),
                            &mut cash_date.slice_mut(0..c * m),
                        )?;
                        stream.synchronize()?;
                        let too_few = (0..c)
                            .filter(|&l| counts_h[l] > 0 && counts_h[l] < n)
                            .count();
                        timings.exposure += t.elapsed();
                        start_level[a][j] = summary.next_start;
                        let residuals = sys_reports
                            .iter()
                            .filter(|r| !r.residual.is_nan())
                            .map(|r| r.residual as f32)
                            .collect();
                        steps_out.push((k, j, summary, residuals, too_few));
                    }

                    // Value at t_k: continuation, or exercise along the outer path.
                    let t = Instant::now();
                    self.kernels.discounted_means(
                        &cash.slice(0..c * m),
                        &cash_date.slice(0..c * m),
                        &self.discount.as_view(),
                        k as u32,
                        m,
                        &mut sums.slice_mut(0..c),
                    )?;
                    let continuation = stream.clone_dtoh(&sums.slice(0..c))?;
                    outer_exercises += value_or_exercise(
                        pos,
                        k,
                        |l| state(l, k),
                        |l| continuation[l],
                        &mut alive[am.position * c..(am.position + 1) * c],
                        &mut values,
                    );
                    timings.exposure += t.elapsed();
                }
            }
            values_all[k * c..(k + 1) * c].copy_from_slice(&values);
            if k < n_dates {
                progress.date_done();
            }
        }
        Ok(ChunkOutput {
            values: values_all,
            steps: steps_out,
            timings,
            outer_exercises,
            start_level,
        })
    }
}

/// Start-up and simulation in one call (see [`GpuEngine`]).
///
/// # Errors
/// As [`GpuEngine::new`] and [`GpuEngine::simulate`].
pub fn simulate_gpu<T: GpuReal>(
    scenario: &Scenario,
    progress: &dyn Progress,
) -> Result<NestedSimulation, GpuError> {
    GpuEngine::<T>::new(scenario)?.simulate(scenario, progress)
}
