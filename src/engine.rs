//! The nested Monte Carlo engine on the CPU (Section 2 of Abbas-Turki & Graillat 2016).
//!
//! Outer paths of the market are simulated on the grid `t_k = k T / N`. At every date
//! `t_k < T` of every outer path, `M` inner paths start from the outer state and run to
//! the last maturity still alive; European positions are valued by the discounted
//! payoff average, American positions by Longstaff–Schwartz backward induction on the
//! inner paths, one regression per later exercise date. Each regression step solves one
//! symmetric `n x n` system per outer path, in batch, with the kernel crate's solver.
//!
//! Results are bitwise identical for any number of threads: random numbers are keyed by
//! (seed, outer path, date, inner path), the chunking of outer paths does not depend on
//! the thread count, and every reduction runs in path order.

use crate::basis::BasisFunctions;
use crate::model::Dynamics;
use crate::rng::{NormalStream, OUTER_STREAM};
use crate::scenario::{Scenario, Style};
use cva_kernels::{solve_batched, BatchSummary, Method, Real, SymmetricBatch, SystemReport};
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// Bytes of inner-path storage the engine allows itself per chunk of outer paths.
const CHUNK_MEMORY: usize = 256 << 20;

/// Wall time spent in each phase of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct PhaseTimings {
    /// Outer and inner path generation.
    pub paths: Duration,
    /// Forming `Ψ^T Ψ` and `Ψ^T y` for every regression.
    pub regression_build: Duration,
    /// The batched solves.
    pub solve: Duration,
    /// Exercise decisions, position values and exposure statistics.
    pub exposure: Duration,
}

/// Counts of one regression step (exposure date `k`, exercise date `j`), summed over
/// positions and chunks.
#[derive(Debug, Clone, Default)]
pub struct RegressionStepStats {
    pub exposure_date: usize,
    pub exercise_date: usize,
    pub summary: BatchSummary,
    /// Regressions not solved because fewer paths than basis functions were in the money
    /// (continuation = mean of those paths' discounted cash flows).
    pub too_few_paths: usize,
    /// Relative residuals of every solved system (NaN excluded).
    pub residuals: Vec<f32>,
}

/// Everything a run produces, per outer path (the statistics are computed in
/// [`crate::exposure`]).
#[derive(Debug, Clone)]
pub struct NestedSimulation {
    /// `P_{t_k}^{(l)}`, netted portfolio value on outer path `l` at date `k`, stored
    /// `[k * outer_paths + l]`, `k = 0..=N`.
    pub netted_values: Vec<f64>,
    pub outer_paths: usize,
    pub steps: Vec<RegressionStepStats>,
    pub timings: PhaseTimings,
    /// Exercise events of American positions along the outer paths.
    pub outer_exercises: usize,
    /// The regression systems captured at the requested (exposure date, exercise date)
    /// for the first American position, in the layout of [`SymmetricBatch`].
    pub captured: Option<CapturedBatch>,
}

/// Regression systems of one step, kept for benchmarks and tests.
#[derive(Debug, Clone, Default)]
pub struct CapturedBatch {
    pub n: usize,
    /// `batch * n * n`, column-major, lower triangle filled.
    pub a: Vec<f64>,
    /// `batch * n`.
    pub b: Vec<f64>,
}

/// Progress reporting hooks (implemented with indicatif by the binary).
pub trait Progress: Sync {
    /// A chunk of `paths` outer paths starts; it has `dates` exposure dates.
    fn chunk_started(&self, _paths: usize, _dates: usize) {}
    fn date_done(&self) {}
    fn chunk_done(&self, _paths: usize) {}
}

/// No progress output.
pub struct NoProgress;
impl Progress for NoProgress {}

struct American {
    position: usize,
    basis: BasisFunctions,
}

/// Runs the nested simulation with regression matrices and solves in precision `T`.
///
/// `capture`: `(exposure date k, exercise date j)` whose regression systems (first American
/// position) are returned in [`NestedSimulation::captured`]. Each chunk of outer paths
/// then stops right after that step, so the other outputs are incomplete: use it only to
/// collect regression matrices (benchmarks, tests).
pub fn simulate<T: Real>(
    scenario: &Scenario,
    progress: &dyn Progress,
    capture: Option<(usize, usize)>,
) -> NestedSimulation {
    let sim = &scenario.simulation;
    let n_dates = scenario.exposure_dates;
    let m0 = sim.outer_paths;
    let m = sim.inner_paths;
    let d = scenario.market.assets.len();
    let dt = scenario.horizon / n_dates as f64;
    let r = scenario.market.rate;
    let dynamics = Dynamics::new(&scenario.market, dt);
    let spots: Vec<f64> = scenario.market.assets.iter().map(|a| a.spot).collect();
    let positions = &scenario.portfolio;
    let americans: Vec<American> = positions
        .iter()
        .enumerate()
        .filter(|(_, p)| p.style == Style::American)
        .map(|(i, p)| American {
            position: i,
            basis: BasisFunctions::new(sim.basis, p.underlying.assets(), &spots),
        })
        .collect();
    let discount: Vec<f64> = (0..=n_dates).map(|s| (-r * dt * s as f64).exp()).collect();

    let per_path_bytes = (m * n_dates.max(1) * d * 8).max(1);
    let chunk = (CHUNK_MEMORY / per_path_bytes).clamp(1, m0);

    let mut netted = vec![0.0; (n_dates + 1) * m0];
    let mut steps: Vec<RegressionStepStats> = Vec::new();
    let mut step_index = vec![vec![usize::MAX; n_dates + 1]; n_dates + 1];
    // The escalation memory rule, per exercise date and American position.
    let mut start_level = vec![vec![Method::Ldlt; n_dates + 1]; americans.len()];
    let mut timings = PhaseTimings::default();
    let mut outer_exercises = 0;
    let mut captured: Option<CapturedBatch> = None;

    let mut inner = Vec::<f64>::new();
    for c0 in (0..m0).step_by(chunk) {
        let c = chunk.min(m0 - c0);
        progress.chunk_started(c, n_dates);

        // Outer paths of this chunk: [l][k][i].
        let t = Instant::now();
        let mut outer = vec![0.0; c * (n_dates + 1) * d];
        outer
            .par_chunks_mut((n_dates + 1) * d)
            .enumerate()
            .for_each(|(l, path)| {
                let stream = NormalStream::new(sim.seed, (c0 + l) as u32, 0, OUTER_STREAM);
                let (mut z, mut w) = (vec![0.0; n_dates * d], vec![0.0; d]);
                stream.fill(0, &mut z);
                path[..d].copy_from_slice(&spots);
                for k in 0..n_dates {
                    let (done, next) = path.split_at_mut((k + 1) * d);
                    next[..d].copy_from_slice(&done[k * d..]);
                    dynamics.step(&mut next[..d], &z[k * d..(k + 1) * d], &mut w);
                }
            });
        timings.paths += t.elapsed();

        // alive[p * c + l]: position p not yet exercised along outer path l.
        let mut alive = vec![true; positions.len() * c];
        'dates: for k in 0..=n_dates {
            let t_exposure = Instant::now();
            let state = |l: usize| &outer[(l * (n_dates + 1) + k) * d..][..d];
            let mut values = vec![0.0; c];
            // Positions at or past maturity.
            for (p, pos) in positions.iter().enumerate() {
                if pos.maturity_index == k {
                    for (l, v) in values.iter_mut().enumerate() {
                        if alive[p * c + l] {
                            *v += pos.quantity * pos.payoff(state(l));
                        }
                    }
                    alive[p * c..(p + 1) * c].fill(false);
                }
            }
            timings.exposure += t_exposure.elapsed();
            let k_end = positions
                .iter()
                .map(|p| p.maturity_index)
                .filter(|&mi| mi > k)
                .max();
            if let Some(k_end) = k_end {
                // Inner paths from every outer state at t_k: [l][s][mm][i], s = 0..k_end-k.
                let n_steps = k_end - k;
                let per_path = n_steps * m * d;
                let t = Instant::now();
                inner.resize(c * per_path, 0.0);
                inner
                    .par_chunks_mut(per_path)
                    .enumerate()
                    .for_each(|(l, buf)| {
                        let mut z = vec![0.0; n_steps * d];
                        let (mut w, mut s) = (vec![0.0; d], vec![0.0; d]);
                        for mm in 0..m {
                            let stream =
                                NormalStream::new(sim.seed, (c0 + l) as u32, k as u32, mm as u32);
                            stream.fill(0, &mut z);
                            s.copy_from_slice(state(l));
                            for step in 0..n_steps {
                                dynamics.step(&mut s, &z[step * d..(step + 1) * d], &mut w);
                                buf[(step * m + mm) * d..][..d].copy_from_slice(&s);
                            }
                        }
                    });
                timings.paths += t.elapsed();
                let inner_state = |l: usize, j: usize, mm: usize| {
                    &inner[l * per_path + ((j - k - 1) * m + mm) * d..][..d]
                };

                // European positions: discounted average payoff.
                let t = Instant::now();
                for (p, pos) in positions.iter().enumerate() {
                    if pos.style != Style::European || pos.maturity_index <= k {
                        continue;
                    }
                    let mi = pos.maturity_index;
                    let df = discount[mi - k];
                    let add: Vec<f64> = (0..c)
                        .into_par_iter()
                        .map(|l| {
                            if !alive[p * c + l] {
                                return 0.0;
                            }
                            let sum: f64 =
                                (0..m).map(|mm| pos.payoff(inner_state(l, mi, mm))).sum();
                            pos.quantity * df * sum / m as f64
                        })
                        .collect();
                    for (v, a) in values.iter_mut().zip(add) {
                        *v += a;
                    }
                }
                timings.exposure += t.elapsed();

                // American positions: Longstaff–Schwartz on the inner paths.
                for (a, am) in americans.iter().enumerate() {
                    let pos = &positions[am.position];
                    let mi = pos.maturity_index;
                    if mi <= k {
                        continue;
                    }
                    let n = am.basis.len();
                    // Cash flow of each inner path and the date it is paid: [l][mm].
                    let mut cash = vec![0.0; c * m];
                    let mut cash_date = vec![mi as u32; c * m];
                    cash.par_chunks_mut(m).enumerate().for_each(|(l, cf)| {
                        for (mm, v) in cf.iter_mut().enumerate() {
                            *v = pos.payoff(inner_state(l, mi, mm));
                        }
                    });
                    for j in (k + 1..mi).rev() {
                        // Which outer paths regress, and how many paths enter each.
                        let t = Instant::now();
                        let itm = |l: usize, mm: usize| {
                            !sim.itm_only || pos.payoff(inner_state(l, j, mm)) > 0.0
                        };
                        let counts: Vec<usize> = (0..c)
                            .into_par_iter()
                            .map(|l| {
                                if alive[am.position * c + l] {
                                    (0..m).filter(|&mm| itm(l, mm)).count()
                                } else {
                                    0
                                }
                            })
                            .collect();
                        let solved: Vec<usize> = (0..c).filter(|&l| counts[l] >= n).collect();
                        let mut slot = vec![usize::MAX; c];
                        for (s, &l) in solved.iter().enumerate() {
                            slot[l] = s;
                        }
                        let batch = solved.len();
                        let mut a_buf = vec![T::ZERO; batch * n * n];
                        let mut b_buf = vec![T::ZERO; batch * n];
                        a_buf
                            .par_chunks_mut(n * n)
                            .zip(b_buf.par_chunks_mut(n))
                            .zip(solved.par_iter())
                            .for_each(|((am_, bm), &l)| {
                                let mut x = vec![0.0; am.basis.assets.len()];
                                let mut psi = vec![0.0; n];
                                let mut psi_t = vec![T::ZERO; n];
                                for mm in 0..m {
                                    if !itm(l, mm) {
                                        continue;
                                    }
                                    am.basis.eval(inner_state(l, j, mm), &mut x, &mut psi);
                                    let y = cash[l * m + mm]
                                        * discount[cash_date[l * m + mm] as usize - j];
                                    let y = T::from_f64(y);
                                    for (pt, &pv) in psi_t.iter_mut().zip(&psi) {
                                        *pt = T::from_f64(pv);
                                    }
                                    for col in 0..n {
                                        let pc = psi_t[col];
                                        bm[col] += pc * y;
                                        let column = &mut am_[col * n..(col + 1) * n];
                                        for row in col..n {
                                            column[row] += psi_t[row] * pc;
                                        }
                                    }
                                }
                                let inv = T::ONE / T::from_usize(counts[l]);
                                for col in 0..n {
                                    bm[col] *= inv;
                                    for row in col..n {
                                        am_[col * n + row] *= inv;
                                    }
                                }
                            });
                        timings.regression_build += t.elapsed();
                        if a == 0 && capture == Some((k, j)) {
                            let cap = captured.get_or_insert_with(|| CapturedBatch {
                                n,
                                ..Default::default()
                            });
                            cap.a.extend(a_buf.iter().map(|v| v.to_f64()));
                            cap.b.extend(b_buf.iter().map(|v| v.to_f64()));
                            break 'dates;
                        }

                        let t = Instant::now();
                        let mut x_buf = vec![T::NAN; batch * n];
                        let mut reports = vec![SystemReport::default(); batch];
                        let summary = if batch > 0 {
                            let systems = SymmetricBatch::new(n, &a_buf, &b_buf);
                            solve_batched(
                                &systems,
                                &mut x_buf,
                                &mut reports,
                                sim.strategy,
                                &sim.solver_params,
                                start_level[a][j],
                            )
                        } else {
                            BatchSummary::from_reports(&[], start_level[a][j], 1.0)
                        };
                        start_level[a][j] = summary.next_start;
                        timings.solve += t.elapsed();

                        // Exercise decisions on the inner paths.
                        let t = Instant::now();
                        let mut too_few = 0;
                        cash.par_chunks_mut(m)
                            .zip(cash_date.par_chunks_mut(m))
                            .enumerate()
                            .for_each(|(l, (cf, cd))| {
                                if !alive[am.position * c + l] || counts[l] == 0 {
                                    return;
                                }
                                let beta: Option<Vec<f64>> = (slot[l] != usize::MAX
                                    && reports[slot[l]].status == cva_kernels::Status::Ok)
                                    .then(|| {
                                        x_buf[slot[l] * n..(slot[l] + 1) * n]
                                            .iter()
                                            .map(|v| v.to_f64())
                                            .collect()
                                    });
                                // Fallback: the mean discounted cash flow of the regression paths.
                                let mean = if beta.is_none() {
                                    let mut s = 0.0;
                                    for mm in 0..m {
                                        if itm(l, mm) {
                                            s += cf[mm] * discount[cd[mm] as usize - j];
                                        }
                                    }
                                    s / counts[l] as f64
                                } else {
                                    0.0
                                };
                                let mut x = vec![0.0; am.basis.assets.len()];
                                let mut psi = vec![0.0; n];
                                for mm in 0..m {
                                    let s = inner_state(l, j, mm);
                                    let payoff = pos.payoff(s);
                                    if payoff <= 0.0 {
                                        continue;
                                    }
                                    let continuation = match &beta {
                                        Some(beta) => {
                                            am.basis.eval(s, &mut x, &mut psi);
                                            psi.iter().zip(beta).map(|(p, b)| p * b).sum()
                                        }
                                        None => mean,
                                    };
                                    if payoff >= continuation {
                                        cf[mm] = payoff;
                                        cd[mm] = j as u32;
                                    }
                                }
                            });
                        for l in 0..c {
                            if alive[am.position * c + l] && counts[l] > 0 && counts[l] < n {
                                too_few += 1;
                            }
                        }
                        timings.exposure += t.elapsed();

                        // Statistics of this regression step.
                        let idx = &mut step_index[k][j];
                        if *idx == usize::MAX {
                            *idx = steps.len();
                            steps.push(RegressionStepStats {
                                exposure_date: k,
                                exercise_date: j,
                                summary: BatchSummary {
                                    next_start: Method::Ldlt,
                                    ..Default::default()
                                },
                                ..Default::default()
                            });
                        }
                        let st = &mut steps[*idx];
                        st.summary.merge(&summary);
                        st.too_few_paths += too_few;
                        st.residuals.extend(
                            reports
                                .iter()
                                .filter(|r| !r.residual.is_nan())
                                .map(|r| r.residual as f32),
                        );
                    }

                    // Value at t_k: continuation, or exercise along the outer path.
                    let t = Instant::now();
                    let df_to = |date: u32| discount[date as usize - k];
                    for l in 0..c {
                        if !alive[am.position * c + l] {
                            continue;
                        }
                        let cf = &cash[l * m..(l + 1) * m];
                        let cd = &cash_date[l * m..(l + 1) * m];
                        let continuation = cf
                            .iter()
                            .zip(cd)
                            .map(|(&v, &dd)| v * df_to(dd))
                            .sum::<f64>()
                            / m as f64;
                        let payoff = pos.payoff(state(l));
                        let value = if k >= 1 && payoff > 0.0 && payoff >= continuation {
                            alive[am.position * c + l] = false;
                            outer_exercises += 1;
                            payoff
                        } else {
                            continuation
                        };
                        values[l] += pos.quantity * value;
                    }
                    timings.exposure += t.elapsed();
                }
            }
            netted[k * m0 + c0..k * m0 + c0 + c].copy_from_slice(&values);
            if k < n_dates {
                progress.date_done();
            }
        }
        progress.chunk_done(c);
    }
    steps.sort_by_key(|s| (s.exposure_date, s.exercise_date));
    NestedSimulation {
        netted_values: netted,
        outer_paths: m0,
        steps,
        timings,
        outer_exercises,
        captured,
    }
}
