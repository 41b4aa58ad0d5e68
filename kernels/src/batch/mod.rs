//! The batched symmetric solver: strategies, parameters, per-system reports, and the
//! CPU driver [`solve_batched`] (multi-threaded over the batch with rayon).

mod escalate;
mod residual;

pub use escalate::solve_one;
pub use residual::{relative_residual, residual_check, ResidualCheck};

use crate::Real;
use rayon::prelude::*;

/// Which method (or chain of methods) solves the systems of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// `L D L^T` only (Algorithm 1). A non-positive pivot ends in
    /// [`Status::NotPositiveDefinite`] and a NaN solution.
    Ldlt,
    /// Householder tridiagonalization and parallel cyclic reduction only (Algorithm 2, Fig. 9).
    HouseholderPcr,
    /// Householder tridiagonalization and divide and conquer (Algorithm 3), solving with
    /// the eigenvalues kept by [`SolverParams::condition_threshold`].
    DivideConquer,
    /// `L D L^T`; the systems whose pivot is not positive or whose relative residual
    /// exceeds the tolerance go on to Householder + PCR; those that fail again go on to
    /// divide and conquer with truncation (Sections 1 and 6 of the paper). A system
    /// proved ill-conditioned beyond [`SolverParams::escalation_condition`] after scaling
    /// to a unit diagonal (an `L D L^T` pivot ratio `min_j D_jj / A_jj` below its inverse,
    /// a non-positive pivot that small against its diagonal entry, or a solution growth
    /// above it, see [`ResidualCheck::growth`]) has no reliable solution in the working
    /// precision: the residual alone would accept a huge or arbitrary `x`, so it goes
    /// straight to divide and conquer with truncation, as the paper advises for
    /// ill-conditioned systems.
    #[default]
    Escalating,
}

impl Strategy {
    /// Every strategy, in escalation order (`escalating` last).
    pub const ALL: [Strategy; 4] = [
        Strategy::Ldlt,
        Strategy::HouseholderPcr,
        Strategy::DivideConquer,
        Strategy::Escalating,
    ];

    /// The name used in scenarios and on the command line (`ldlt`, `householder-pcr`,
    /// `divide-conquer`, `escalating`).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Ldlt => "ldlt",
            Strategy::HouseholderPcr => "householder-pcr",
            Strategy::DivideConquer => "divide-conquer",
            Strategy::Escalating => "escalating",
        }
    }

    /// Inverse of [`Strategy::name`].
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Tunable parameters of the solvers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SolverParams {
    /// Largest accepted relative residual `||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf)`
    /// before a system escalates. `None` (the default) means `16 n eps`, with `eps` the
    /// machine epsilon of the working precision: a backward-stable solve lands well under
    /// it, a broken-down one far above.
    pub residual_tolerance: Option<f64>,
    /// Eigenvalues `λ_i` with `|λ_i| * condition_threshold < max_j |λ_j|` are discarded by
    /// divide and conquer. Default `1e5`, the paper's value.
    pub condition_threshold: f64,
    /// The escalating strategy sends a system straight to divide and conquer when its
    /// equilibrated condition number provably exceeds this (see [`Strategy::Escalating`]).
    /// `None` (the default) means `0.01 / eps`: fewer than two correct digits in the
    /// working precision, about `8e4` in `f32` (the paper's regime, its threshold `1e5`)
    /// and `5e13` in `f64` (only numerically singular systems).
    pub escalation_condition: Option<f64>,
    /// The memory rule of the escalating strategy (Section 6 of the paper: systems of a
    /// regression step that were ill-conditioned last time go straight to the method that
    /// solved them): the next batch of the same regression step starts at the highest
    /// level that at least this fraction of the systems needed (see
    /// [`BatchSummary::next_start`]). Default `0.5`: start higher only when trying the
    /// cheaper method first would fail for most systems; with a small fraction, a few
    /// near-singular systems would send a whole regression step to divide and conquer,
    /// about 50 times the cost of `L D L^T` on the CPU.
    pub memory_fraction: f64,
}

impl Default for SolverParams {
    fn default() -> Self {
        Self {
            residual_tolerance: None,
            condition_threshold: 1e5,
            escalation_condition: None,
            memory_fraction: 0.5,
        }
    }
}

impl SolverParams {
    /// The escalation condition bound in force in precision `T`.
    pub fn escalation_condition<T: Real>(&self) -> f64 {
        self.escalation_condition
            .unwrap_or(0.01 / T::EPSILON.to_f64())
    }

    /// The residual tolerance in force for size `n` in precision `T`.
    pub fn tolerance<T: Real>(&self, n: usize) -> f64 {
        self.residual_tolerance
            .unwrap_or(16.0 * n.max(1) as f64 * T::EPSILON.to_f64())
    }
}

/// The method that produced a system's answer, which is also its escalation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Method {
    #[default]
    Ldlt = 0,
    HouseholderPcr = 1,
    DivideConquer = 2,
}

impl Method {
    pub const ALL: [Method; 3] = [Method::Ldlt, Method::HouseholderPcr, Method::DivideConquer];
    pub fn name(self) -> &'static str {
        match self {
            Method::Ldlt => "ldlt",
            Method::HouseholderPcr => "householder-pcr",
            Method::DivideConquer => "divide-conquer",
        }
    }
}

/// Outcome of one system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Status {
    /// A finite solution was produced (for divide and conquer: of the truncated system).
    #[default]
    Ok,
    /// `L D L^T` met a non-positive pivot and the strategy allowed no escalation.
    NotPositiveDefinite,
    /// The method broke down (zero divisor, non-finite result, no convergence).
    Failed,
    /// `A` (its lower triangle) or `b` contains NaN or infinity.
    NonFiniteInput,
}

impl Status {
    pub const ALL: [Status; 4] = [
        Status::Ok,
        Status::NotPositiveDefinite,
        Status::Failed,
        Status::NonFiniteInput,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotPositiveDefinite => "not-positive-definite",
            Status::Failed => "failed",
            Status::NonFiniteInput => "non-finite-input",
        }
    }
}

/// Per-system report of [`solve_batched`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SystemReport {
    /// The method whose answer is in `x` (for a failure: the last one tried).
    pub method: Method,
    pub status: Status,
    /// `||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf)`, computed in the working
    /// precision; NaN when no solution was produced.
    pub residual: f64,
    /// Eigenvalues discarded by the truncated divide-and-conquer solve (0 otherwise).
    pub discarded: u32,
}

/// A batch of `batch` symmetric `n x n` systems, borrowed.
///
/// * `a`: length `batch * n * n`; matrix `i` is column-major at `a[i*n*n..]`, entry
///   `(r, c)` at `a[i*n*n + r + c*n]`; only the lower triangle `r >= c` is read.
/// * `b`: length `batch * n`; right-hand side `i` at `b[i*n..(i+1)*n]`.
#[derive(Debug, Clone, Copy)]
pub struct SymmetricBatch<'a, T> {
    pub n: usize,
    pub batch: usize,
    pub a: &'a [T],
    pub b: &'a [T],
}

impl<'a, T: Real> SymmetricBatch<'a, T> {
    /// # Panics
    /// If `n` is 0 or above [`MAX_N`](crate::MAX_N), or the slice lengths do not match.
    #[track_caller]
    pub fn new(n: usize, a: &'a [T], b: &'a [T]) -> Self {
        assert!(
            (1..=crate::MAX_N).contains(&n),
            "n = {n} outside 1..={}",
            crate::MAX_N
        );
        assert_eq!(
            b.len() % n,
            0,
            "b.len() = {} is not a multiple of n = {n}",
            b.len()
        );
        let batch = b.len() / n;
        assert_eq!(
            a.len(),
            batch * n * n,
            "a.len() must be batch*n*n = {}",
            batch * n * n
        );
        Self { n, batch, a, b }
    }
}

/// Counts over one batch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchSummary {
    pub systems: usize,
    /// Systems whose answer came from each [`Method`], indexed by `Method as usize`.
    pub per_method: [usize; 3],
    /// Systems of each [`Status`], indexed by `Status as usize`.
    pub per_status: [usize; 4],
    /// Sum of [`SystemReport::discarded`].
    pub discarded_eigenvalues: usize,
    /// Largest relative residual over the systems of status [`Status::Ok`] (0 if none).
    pub max_residual: f64,
    /// Where the escalating strategy should start the next batch of the same regression
    /// step: the highest level reached by at least `memory_fraction` of the systems, and
    /// never below the level this batch started at.
    pub next_start: Method,
}

impl BatchSummary {
    /// Builds the counts from per-system reports.
    pub fn from_reports(reports: &[SystemReport], start: Method, memory_fraction: f64) -> Self {
        let mut s = BatchSummary {
            systems: reports.len(),
            next_start: start,
            ..Default::default()
        };
        for r in reports {
            s.per_method[r.method as usize] += 1;
            s.per_status[r.status as usize] += 1;
            s.discarded_eigenvalues += r.discarded as usize;
            if r.status == Status::Ok {
                s.max_residual = nan_max(s.max_residual, r.residual);
            }
        }
        let threshold = (memory_fraction * reports.len() as f64).max(1.0);
        for m in Method::ALL {
            if m > s.next_start && s.per_method[m as usize] as f64 >= threshold {
                s.next_start = m;
            }
        }
        s
    }

    /// Adds another batch's counts (the `next_start` of `other` wins if higher).
    pub fn merge(&mut self, other: &BatchSummary) {
        self.systems += other.systems;
        for i in 0..3 {
            self.per_method[i] += other.per_method[i];
        }
        for i in 0..4 {
            self.per_status[i] += other.per_status[i];
        }
        self.discarded_eigenvalues += other.discarded_eigenvalues;
        self.max_residual = nan_max(self.max_residual, other.max_residual);
        self.next_start = self.next_start.max(other.next_start);
    }

    /// Number of systems with a status other than [`Status::Ok`].
    pub fn failures(&self) -> usize {
        self.systems - self.per_status[Status::Ok as usize]
    }
}

/// `max` that propagates NaN.
pub(crate) fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Solves every system of `batch` with `strategy` on the CPU, in parallel over systems.
///
/// * `x`: length `batch.batch * batch.n`; solution `i` is written to `x[i*n..(i+1)*n]`
///   (NaN where no solution was produced).
/// * `reports`: length `batch.batch`; one [`SystemReport`] per system.
/// * `start`: for [`Strategy::Escalating`], the level to start at (the memory rule: pass
///   the previous batch's [`BatchSummary::next_start`], or [`Method::Ldlt`]); ignored by
///   the other strategies.
///
/// Results are bitwise independent of the number of threads.
///
/// # Panics
/// If `x` or `reports` have the wrong length.
#[track_caller]
pub fn solve_batched<T: Real>(
    batch: &SymmetricBatch<'_, T>,
    x: &mut [T],
    reports: &mut [SystemReport],
    strategy: Strategy,
    params: &SolverParams,
    start: Method,
) -> BatchSummary {
    let n = batch.n;
    assert_eq!(x.len(), batch.batch * n, "x.len() must be batch*n");
    assert_eq!(reports.len(), batch.batch, "reports.len() must be batch");
    let start = match strategy {
        Strategy::Escalating => start,
        _ => Method::Ldlt,
    };
    // Small systems: give each rayon task several so the per-task overhead stays small.
    let per_task = (4096 / (n * n)).clamp(1, 256);
    x.par_chunks_mut(n * per_task)
        .zip(reports.par_chunks_mut(per_task))
        .enumerate()
        .for_each_init(
            || escalate::Workspace::<T>::new(n),
            |ws, (chunk, (xs, rs))| {
                for (k, (xi, ri)) in xs.chunks_mut(n).zip(rs.iter_mut()).enumerate() {
                    let i = chunk * per_task + k;
                    let a = &batch.a[i * n * n..(i + 1) * n * n];
                    let b = &batch.b[i * n..(i + 1) * n];
                    *ri = solve_one(n, a, b, xi, strategy, params, start, ws);
                }
            },
        );
    BatchSummary::from_reports(reports, start, params.memory_fraction)
}
