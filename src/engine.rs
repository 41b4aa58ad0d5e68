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
use crate::scenario::{Position, Scenario, Style};
use cva_kernels::{solve_batched, BatchSummary, Method, Real, SymmetricBatch, SystemReport};
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// Bytes of inner-path storage the engine allows itself per chunk of outer paths.
const CHUNK_MEMORY: usize = 256 << 20;

/// Time spent in each phase of a run: wall time on the CPU; on the GPU, device time per
/// stream (the path kernels run on a stream of their own beside the others, so there the
/// phases can add up to more than the run's wall time).
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
    /// A line for the user about the run (a retry, a fallback), printed above the bars.
    fn note(&self, _line: &str) {}
}

/// No progress output.
pub struct NoProgress;
impl Progress for NoProgress {}

struct American {
    position: usize,
    basis: BasisFunctions,
}

/// What every step of a run shares.
struct Setup<'a> {
    scenario: &'a Scenario,
    n_dates: usize,
    /// Inner paths `M`.
    m: usize,
    /// Assets `d`.
    d: usize,
    dynamics: Dynamics,
    spots: Vec<f64>,
    /// `discount[s] = e^{-r s dt}`.
    discount: Vec<f64>,
    americans: Vec<American>,
}

impl<'a> Setup<'a> {
    fn new(scenario: &'a Scenario) -> Self {
        let sim = &scenario.simulation;
        let n_dates = scenario.exposure_dates;
        let dt = scenario.horizon / n_dates as f64;
        let spots: Vec<f64> = scenario.market.assets.iter().map(|a| a.spot).collect();
        Setup {
            scenario,
            n_dates,
            m: sim.inner_paths,
            d: scenario.market.assets.len(),
            dynamics: Dynamics::new(&scenario.market, dt),
            americans: scenario
                .portfolio
                .iter()
                .enumerate()
                .filter(|(_, p)| p.style == Style::American)
                .map(|(i, p)| American {
                    position: i,
                    basis: BasisFunctions::new(sim.basis, p.underlying.assets(), &spots),
                })
                .collect(),
            spots,
            discount: (0..=n_dates)
                .map(|s| (-scenario.market.rate * dt * s as f64).exp())
                .collect(),
        }
    }
}

/// The inner paths of one chunk of outer paths from exposure date `k`:
/// `data[l * per_path + ((j - k - 1) * m + mm) * d + i]` is asset `i` of inner path `mm`
/// of outer path `l` at date `j`, `k < j <= k + steps`.
struct InnerPaths<'a> {
    k: usize,
    m: usize,
    d: usize,
    per_path: usize,
    data: &'a [f64],
}

impl InnerPaths<'_> {
    #[inline]
    fn state(&self, l: usize, j: usize, mm: usize) -> &[f64] {
        &self.data[l * self.per_path + ((j - self.k - 1) * self.m + mm) * self.d..][..self.d]
    }
}

/// Per-step statistics, in the order the steps first occur.
#[derive(Default)]
struct StepRecorder {
    steps: Vec<RegressionStepStats>,
    /// `index[(k, j)]` into `steps`.
    index: std::collections::HashMap<(usize, usize), usize>,
}

impl StepRecorder {
    fn record(&mut self, k: usize, j: usize, outcome: &RegressionOutcome) {
        let steps = &mut self.steps;
        let idx = *self.index.entry((k, j)).or_insert_with(|| {
            steps.push(RegressionStepStats {
                exposure_date: k,
                exercise_date: j,
                ..Default::default()
            });
            steps.len() - 1
        });
        let st = &mut self.steps[idx];
        st.summary.merge(&outcome.summary);
        st.too_few_paths += outcome.too_few_paths;
        st.residuals.extend(
            outcome
                .reports
                .iter()
                .filter(|r| !r.residual.is_nan())
                .map(|r| r.residual as f32),
        );
    }
}

/// The result of one regression step over a chunk of outer paths.
struct RegressionOutcome {
    summary: BatchSummary,
    reports: Vec<SystemReport>,
    too_few_paths: usize,
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
    let m0 = sim.outer_paths;
    let setup = Setup::new(scenario);
    let (n_dates, m, d) = (setup.n_dates, setup.m, setup.d);
    let positions = &scenario.portfolio;

    // Chunks of outer paths: bounded by memory, and about a tenth of the paths (at least
    // 256) so that the progress bar moves; independent of the thread count.
    let per_path_bytes = (m * n_dates.max(1) * d * 8).max(1);
    let chunk = (CHUNK_MEMORY / per_path_bytes)
        .min(m0.div_ceil(10).max(256))
        .clamp(1, m0);

    let mut netted = vec![0.0; (n_dates + 1) * m0];
    let mut recorder = StepRecorder::default();
    // The escalation memory rule, per American position and exercise date.
    let mut start_level = vec![vec![Method::Ldlt; n_dates + 1]; setup.americans.len()];
    let mut timings = PhaseTimings::default();
    let mut outer_exercises = 0;
    let mut captured: Option<CapturedBatch> = None;

    let mut inner_buf = Vec::<f64>::new();
    for c0 in (0..m0).step_by(chunk) {
        let c = chunk.min(m0 - c0);
        progress.chunk_started(c, n_dates);
        let t = Instant::now();
        let outer = simulate_outer_paths(&setup, c0, c);
        timings.paths += t.elapsed();
        let state = |l: usize, k: usize| &outer[(l * (n_dates + 1) + k) * d..][..d];

        // alive[p * c + l]: position p neither exercised nor matured along outer path l.
        let mut alive = vec![true; positions.len() * c];
        'dates: for k in 0..=n_dates {
            let t = Instant::now();
            let mut values = vec![0.0; c];
            pay_maturing(positions, k, &mut alive, |l| state(l, k), &mut values);
            timings.exposure += t.elapsed();
            if let Some(last) = scenario.inner_stage_end(k) {
                let t = Instant::now();
                simulate_inner_paths(&setup, &outer, c0, c, k, last - k, &mut inner_buf);
                timings.paths += t.elapsed();
                let inner = InnerPaths {
                    k,
                    m,
                    d,
                    per_path: (last - k) * m * d,
                    data: &inner_buf,
                };

                let t = Instant::now();
                european_values(&setup, &inner, &alive, c, &mut values);
                timings.exposure += t.elapsed();

                // American positions: Longstaff–Schwartz on the inner paths.
                for (a, am) in setup.americans.iter().enumerate() {
                    let pos = &positions[am.position];
                    let mi = pos.maturity_index;
                    if mi <= k {
                        continue;
                    }
                    let alive_p = &alive[am.position * c..(am.position + 1) * c];
                    // Cash flow of each inner path and the date it is paid: [l][mm].
                    let mut cash = vec![0.0; c * m];
                    let mut cash_date = vec![mi as u32; c * m];
                    cash.par_chunks_mut(m).enumerate().for_each(|(l, cf)| {
                        for (mm, v) in cf.iter_mut().enumerate() {
                            *v = pos.payoff(inner.state(l, mi, mm));
                        }
                    });
                    for j in (k + 1..mi).rev() {
                        let want = (a == 0 && capture == Some((k, j))).then_some(&mut captured);
                        let stop = want.is_some();
                        let outcome = regression_step::<T>(
                            &setup,
                            am,
                            &inner,
                            alive_p,
                            j,
                            (&mut cash, &mut cash_date),
                            start_level[a][j],
                            want,
                            &mut timings,
                        );
                        if stop {
                            break 'dates;
                        }
                        start_level[a][j] = outcome.summary.next_start;
                        recorder.record(k, j, &outcome);
                    }

                    // Value at t_k: continuation, or exercise along the outer path.
                    let t = Instant::now();
                    let continuation = |l: usize| {
                        let cf = &cash[l * m..(l + 1) * m];
                        let cd = &cash_date[l * m..(l + 1) * m];
                        cf.iter()
                            .zip(cd)
                            .map(|(&v, &dd)| v * setup.discount[dd as usize - k])
                            .sum::<f64>()
                            / m as f64
                    };
                    outer_exercises += value_or_exercise(
                        pos,
                        k,
                        |l| state(l, k),
                        continuation,
                        &mut alive[am.position * c..(am.position + 1) * c],
                        &mut values,
                    );
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
    let mut steps = recorder.steps;
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

/// Adds the payoff of the positions maturing at `t_k` (and still alive) to `values`
/// (one entry per outer path of the chunk) and marks them dead: `alive[p * c + l]`,
/// `state(l)` the asset prices of outer path `l` at `t_k`.
pub(crate) fn pay_maturing<'a>(
    positions: &[Position],
    k: usize,
    alive: &mut [bool],
    state: impl Fn(usize) -> &'a [f64],
    values: &mut [f64],
) {
    let c = values.len();
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
}

/// Adds the value at `t_k` of the American position `pos` to `values` on every outer
/// path where it is alive (`alive[l]`, this position's flags): the payoff if it is
/// exercised now (`k >= 1`, payoff > 0 and at least the continuation estimate; the
/// position is then dead), else the continuation estimate. Returns the number of
/// exercises.
pub(crate) fn value_or_exercise<'a>(
    pos: &Position,
    k: usize,
    state: impl Fn(usize) -> &'a [f64],
    continuation: impl Fn(usize) -> f64,
    alive: &mut [bool],
    values: &mut [f64],
) -> usize {
    let mut exercises = 0;
    for (l, v) in values.iter_mut().enumerate() {
        if !alive[l] {
            continue;
        }
        let payoff = pos.payoff(state(l));
        let cont = continuation(l);
        let value = if k >= 1 && payoff > 0.0 && payoff >= cont {
            alive[l] = false;
            exercises += 1;
            payoff
        } else {
            cont
        };
        *v += pos.quantity * value;
    }
    exercises
}

/// Outer paths `c0..c0+c`: `[l][k][i]`, `k = 0..=N`.
fn simulate_outer_paths(setup: &Setup, c0: usize, c: usize) -> Vec<f64> {
    let (n_dates, d) = (setup.n_dates, setup.d);
    let seed = setup.scenario.simulation.seed;
    let mut outer = vec![0.0; c * (n_dates + 1) * d];
    outer
        .par_chunks_mut((n_dates + 1) * d)
        .enumerate()
        .for_each(|(l, path)| {
            let stream = NormalStream::new(seed, (c0 + l) as u32, 0, OUTER_STREAM);
            let (mut z, mut w) = (vec![0.0; n_dates * d], vec![0.0; d]);
            stream.fill(0, &mut z);
            path[..d].copy_from_slice(&setup.spots);
            for k in 0..n_dates {
                let (done, next) = path.split_at_mut((k + 1) * d);
                next[..d].copy_from_slice(&done[k * d..]);
                setup
                    .dynamics
                    .step(&mut next[..d], &z[k * d..(k + 1) * d], &mut w);
            }
        });
    outer
}

/// Inner paths of `c` outer paths from date `k` over `steps` dates, into `buf` in the
/// layout of [`InnerPaths`]. Inner path `mm` draws from stream (seed, `c0 + l`, `k`, `mm`);
/// with `simulation.antithetic`, odd `mm` instead takes the negated normals of `mm - 1`.
fn simulate_inner_paths(
    setup: &Setup,
    outer: &[f64],
    c0: usize,
    c: usize,
    k: usize,
    steps: usize,
    buf: &mut Vec<f64>,
) {
    let (m, d, n_dates) = (setup.m, setup.d, setup.n_dates);
    let seed = setup.scenario.simulation.seed;
    let antithetic = setup.scenario.simulation.antithetic;
    let per_path = steps * m * d;
    buf.resize(c * per_path, 0.0);
    buf.par_chunks_mut(per_path)
        .enumerate()
        .for_each(|(l, out)| {
            let mut z = vec![0.0; steps * d];
            let (mut w, mut s) = (vec![0.0; d], vec![0.0; d]);
            let start = &outer[(l * (n_dates + 1) + k) * d..][..d];
            for mm in 0..m {
                if antithetic && mm % 2 == 1 {
                    // The pair's second path: the first one's normals, negated.
                    z.iter_mut().for_each(|v| *v = -*v);
                } else {
                    let stream = NormalStream::new(seed, (c0 + l) as u32, k as u32, mm as u32);
                    stream.fill(0, &mut z);
                }
                s.copy_from_slice(start);
                for step in 0..steps {
                    setup
                        .dynamics
                        .step(&mut s, &z[step * d..(step + 1) * d], &mut w);
                    out[(step * m + mm) * d..][..d].copy_from_slice(&s);
                }
            }
        });
}

/// Adds the value of the European positions alive at `t_k` (discounted average payoff of
/// the inner paths) to `values`.
fn european_values(
    setup: &Setup,
    inner: &InnerPaths,
    alive: &[bool],
    c: usize,
    values: &mut [f64],
) {
    let k = inner.k;
    for (p, pos) in setup.scenario.portfolio.iter().enumerate() {
        if pos.style != Style::European || pos.maturity_index <= k {
            continue;
        }
        let mi = pos.maturity_index;
        let df = setup.discount[mi - k];
        let add: Vec<f64> = (0..c)
            .into_par_iter()
            .map(|l| {
                if !alive[p * c + l] {
                    return 0.0;
                }
                let sum: f64 = (0..setup.m)
                    .map(|mm| pos.payoff(inner.state(l, mi, mm)))
                    .sum();
                pos.quantity * df * sum / setup.m as f64
            })
            .collect();
        for (v, a) in values.iter_mut().zip(add) {
            *v += a;
        }
    }
}

/// One Longstaff–Schwartz regression step at exercise date `j` for one American position
/// over a chunk of outer paths: forms `A = Ψ^T Ψ / c` and `b = Ψ^T y / c` over the
/// regression paths of every outer path (in precision `T`), solves the batch, and updates
/// the cash flows `(cash, cash_date)` (`[l][mm]`) where exercise beats the continuation
/// estimate. Outer paths with fewer regression paths than basis functions, or whose
/// system failed, use the mean discounted cash flow as continuation.
///
/// With `capture`, the systems are appended there and nothing else is done.
#[allow(clippy::too_many_arguments)]
fn regression_step<T: Real>(
    setup: &Setup,
    am: &American,
    inner: &InnerPaths,
    alive: &[bool],
    j: usize,
    (cash, cash_date): (&mut [f64], &mut [u32]),
    start: Method,
    capture: Option<&mut Option<CapturedBatch>>,
    timings: &mut PhaseTimings,
) -> RegressionOutcome {
    let sim = &setup.scenario.simulation;
    let pos = &setup.scenario.portfolio[am.position];
    let (m, n, c) = (setup.m, am.basis.len(), alive.len());
    let discount = &setup.discount;

    // Which outer paths regress, and how many paths enter each.
    let t = Instant::now();
    let itm = |l: usize, mm: usize| !sim.itm_only || pos.payoff(inner.state(l, j, mm)) > 0.0;
    let counts: Vec<usize> = (0..c)
        .into_par_iter()
        .map(|l| {
            if alive[l] {
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
        .for_each(|((a, b), &l)| {
            let mut x = vec![0.0; am.basis.assets().len()];
            let mut psi = vec![0.0; n];
            let mut psi_t = vec![T::ZERO; n];
            for mm in 0..m {
                if !itm(l, mm) {
                    continue;
                }
                am.basis.eval(inner.state(l, j, mm), &mut x, &mut psi);
                let y =
                    T::from_f64(cash[l * m + mm] * discount[cash_date[l * m + mm] as usize - j]);
                for (pt, &pv) in psi_t.iter_mut().zip(&psi) {
                    *pt = T::from_f64(pv);
                }
                for col in 0..n {
                    let pc = psi_t[col];
                    b[col] += pc * y;
                    let column = &mut a[col * n..(col + 1) * n];
                    for row in col..n {
                        column[row] += psi_t[row] * pc;
                    }
                }
            }
            let inv = T::ONE / T::from_usize(counts[l]);
            for col in 0..n {
                b[col] *= inv;
                for row in col..n {
                    a[col * n + row] *= inv;
                }
            }
        });
    timings.regression_build += t.elapsed();
    if let Some(cap) = capture {
        let cap = cap.get_or_insert_with(|| CapturedBatch {
            n,
            ..Default::default()
        });
        cap.a.extend(a_buf.iter().map(|v| v.to_f64()));
        cap.b.extend(b_buf.iter().map(|v| v.to_f64()));
        return RegressionOutcome {
            summary: BatchSummary::default(),
            reports: Vec::new(),
            too_few_paths: 0,
        };
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
            start,
        )
    } else {
        BatchSummary::from_reports(&[], start, 1.0)
    };
    timings.solve += t.elapsed();

    // Exercise decisions on the inner paths.
    let t = Instant::now();
    cash.par_chunks_mut(m)
        .zip(cash_date.par_chunks_mut(m))
        .enumerate()
        .for_each(|(l, (cf, cd))| {
            if !alive[l] || counts[l] == 0 {
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
            let mut x = vec![0.0; am.basis.assets().len()];
            let mut psi = vec![0.0; n];
            for mm in 0..m {
                let s = inner.state(l, j, mm);
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
    let too_few_paths = (0..c)
        .filter(|&l| alive[l] && counts[l] > 0 && counts[l] < n)
        .count();
    timings.exposure += t.elapsed();
    RegressionOutcome {
        summary,
        reports,
        too_few_paths,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two assets, correlated, 3 dates.
    fn scenario(antithetic: bool, inner: usize) -> Scenario {
        let text = format!(
            "market:
  rate: 0.03
  assets:
    - {{name: A, spot: 100.0, volatility: 0.3, dividend_yield: 0.01}}
    - {{name: B, spot: 50.0, volatility: 0.2, dividend_yield: 0.0}}
  correlation: [[1.0, 0.4], [0.4, 1.0]]
dates: {{horizon: 1.5, exposure_dates: 3}}
portfolio:
  - {{style: american, kind: put, underlying: {{asset: A}}, strike: 100.0, maturity: 1.5, quantity: 1.0}}
counterparty: {{hazard_rate: 0.02, recovery_rate: 0.4}}
simulation: {{outer_paths: 5, inner_paths: {inner}, basis: linear, itm_only: false, seed: 17, antithetic: {antithetic}}}
"
        );
        Scenario::parse(&text, "t", &[]).unwrap()
    }

    /// With `antithetic`, inner path 2j is the plain run's path 2j, and path 2j + 1 is
    /// driven by the negation of 2j's normals: its log-return from the start, added to
    /// 2j's, is twice the drift (to rounding), and it is the step applied to -z exactly.
    #[test]
    fn antithetic_inner_paths_pair_negated_normals() {
        let (m, c, k, steps) = (6usize, 3usize, 1usize, 2usize);
        let (plain_sc, anti_sc) = (scenario(false, m), scenario(true, m));
        let (plain_set, anti_set) = (Setup::new(&plain_sc), Setup::new(&anti_sc));
        let outer = simulate_outer_paths(&plain_set, 2, c);
        assert_eq!(
            outer,
            simulate_outer_paths(&anti_set, 2, c),
            "outer paths changed"
        );
        let (mut plain, mut anti) = (Vec::new(), Vec::new());
        simulate_inner_paths(&plain_set, &outer, 2, c, k, steps, &mut plain);
        simulate_inner_paths(&anti_set, &outer, 2, c, k, steps, &mut anti);
        let d = 2;
        let at = |buf: &[f64], l: usize, s: usize, mm: usize| -> Vec<f64> {
            buf[l * steps * m * d + (s * m + mm) * d..][..d].to_vec()
        };
        let n_dates = 3;
        for l in 0..c {
            let start = &outer[(l * (n_dates + 1) + k) * d..][..d];
            for mm in 0..m {
                // The independent reference: the stream of the pair's first path, its
                // normals negated for the second, through Dynamics::step.
                let stream = NormalStream::new(17, (2 + l) as u32, k as u32, (mm & !1) as u32);
                let mut z = vec![0.0; steps * d];
                stream.fill(0, &mut z);
                if mm % 2 == 1 {
                    z.iter_mut().for_each(|v| *v = -*v);
                }
                let (mut s, mut w) = (start.to_vec(), vec![0.0; d]);
                for st in 0..steps {
                    anti_set
                        .dynamics
                        .step(&mut s, &z[st * d..(st + 1) * d], &mut w);
                    assert_eq!(at(&anti, l, st, mm), s, "outer {l} inner {mm} step {st}");
                    if mm % 2 == 0 {
                        assert_eq!(at(&plain, l, st, mm), s, "even path {mm} not the plain one");
                    } else {
                        assert_ne!(at(&plain, l, st, mm), s, "odd path {mm} not antithetic");
                        // log(S_odd / S_0) + log(S_even / S_0): the drift twice over.
                        let even = at(&anti, l, st, mm - 1);
                        for i in 0..d {
                            let sum = (s[i] / start[i]).ln() + (even[i] / start[i]).ln();
                            let a = &anti_sc.market.assets[i];
                            let dt = 0.5 * (st + 1) as f64;
                            let drift = (anti_sc.market.rate
                                - a.dividend_yield
                                - 0.5 * a.volatility * a.volatility)
                                * dt;
                            assert!(
                                (sum - 2.0 * drift).abs() < 1e-12,
                                "{sum} vs {}",
                                2.0 * drift
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn antithetic_needs_an_even_number_of_inner_paths() {
        let text = "market:
  rate: 0.03
  assets: [{name: A, spot: 100.0, volatility: 0.3}]
dates: {horizon: 1.0, exposure_dates: 2}
portfolio: [{style: european, kind: call, underlying: {asset: A}, strike: 100.0, maturity: 1.0, quantity: 1.0}]
counterparty: {hazard_rate: 0.02, recovery_rate: 0.4}
simulation: {outer_paths: 5, inner_paths: 7, basis: linear, itm_only: false, seed: 1, antithetic: true}
";
        let e = Scenario::parse(text, "t", &[]).unwrap_err().to_string();
        assert!(
            e.contains("simulation.antithetic") && e.contains('7'),
            "{e}"
        );
        let ok = text.replace("inner_paths: 7", "inner_paths: 8");
        assert!(
            Scenario::parse(&ok, "t", &[])
                .unwrap()
                .simulation
                .antithetic
        );
    }
}
