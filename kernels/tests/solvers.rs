//! Tests of the batched symmetric solver [`solve_batched`] with every [`Strategy`]
//! (`Ldlt`, `HouseholderPcr`, `DivideConquer`, `Escalating`), in `f32` and `f64`, against
//! faer in `f64` as the independent reference.
//!
//! Inputs are generated in `f64` and rounded to the working precision; every reference
//! quantity is computed by faer (in `f64`) from the *rounded* inputs, so that the measured
//! errors are those of the solver. Only the lower triangle of each matrix is passed: the
//! strict upper triangle of every input buffer is NaN (the layout says it is never read).
//! Before each call the solutions `x` are poisoned with NaN (or, where NaN is the expected
//! output, with a finite value) and the reports with a sentinel (`residual = -1`,
//! `discarded = u32::MAX`), so an entry the solver did not write shows. Errors are reduced
//! with a maximum that propagates NaN, and the worst ratio of every check is printed
//! (`cargo test --release -p cva-kernels --test solvers -- --nocapture`).
//!
//! `eps` is the machine epsilon of the working precision, `n` the system size, norms are
//! `∞`-norms unless stated, `κ` is the 2-norm condition number (faer's eigenvalues).
//!
//! | check | scaled quantity | bound |
//! |---|---|---|
//! | residual | `‖A x − b‖ / ((‖A‖ ‖x‖ + ‖b‖) n eps)`, recomputed in `f64` | 16 |
//! | residual, `HouseholderPcr` alone | the same divided by `max(1, κ/16)` | 16 |
//! | reported residual | `SystemReport::residual <= tol = 16 n eps` (not for `HouseholderPcr` alone) | — |
//! | report consistency | `|reported − recomputed residual| / (n eps)` | 4 |
//! | forward error | `‖x − x_faer‖ / (‖x_faer‖ n eps κ)` | 30 |
//! | graded, `L D L^T` | `‖D (x − x_faer)‖ / (‖D x_faer‖ n eps κ(D^-1 A D^-1))` | 30 |
//! | truncated solve | `‖x − A_k^+ b‖_2 λ_k / (‖b‖_2 n eps κ_gap)` | 30 |
//! | least squares (exactly singular `A`) | `‖A (A x − b)‖_2 / (‖A‖_2 (‖A‖_2 ‖x‖_2 + ‖b‖_2) n eps κ_gap)` | 30 |
//!
//! Why these bounds:
//! * The residual bound 16 is the solver's own default tolerance `16 n eps`
//!   ([`SolverParams::tolerance`]): the escalating strategy accepts exactly the answers
//!   under it, and a backward-stable method (`L D L^T` on SPD matrices, Householder +
//!   divide and conquer) lands well under it. The reported residual is computed by the
//!   solver in the working precision; the matrix–vector product adds at most
//!   `(n + 1) eps` (relative to the denominator) to it, hence the bound 4 on the
//!   difference.
//! * Parallel cyclic reduction computes every unknown from its own reduced equation (for
//!   `n = 2` it is Cramer's rule): forward stable, but not backward stable. Its relative
//!   residual is only bounded by its forward error, `O(n eps κ)`; it is measured (and
//!   printed, "no bound") against `16 n eps` and bounded by `16 n eps max(1, κ/16)`.
//!   On random SPD matrices with `κ <= 10^3` it does exceed the tolerance now and then,
//!   which is exactly when the escalating strategy moves on.
//! * A backward error `c n eps` moves the solution by at most `c n eps κ` (relative), so
//!   the forward error against faer (whose own error is of the same order in `f64`) is
//!   bounded by a constant times `n eps κ`. For graded SPD matrices `D A D`, `L D L^T`
//!   (Cholesky without square roots) has a backward error componentwise small relative to
//!   `sqrt(a_ii a_jj)`, so the error of `D x` is bounded with the condition number of the
//!   equilibrated matrix `A`, not of `D A D`. Householder + PCR, which is not scale
//!   invariant, may break down (status `Failed`) on a graded matrix with `n eps κ >= 1`.
//! * Divide and conquer discards the eigenvalues `|λ_i| < max |λ| / 10^5`. With
//!   `κ < 10^5` nothing is discarded and the checks above apply. Otherwise `x` is compared
//!   with faer's truncated pseudo-inverse solution `A_k^+ b` (same threshold on faer's
//!   eigenvalues); a backward error `E` (`‖E‖_2 ≲ n eps ‖A‖_2`) moves `A_k^+ b` by
//!   `≲ ‖E‖ ‖b‖ / (λ_k gap)`, with `λ_k` the smallest kept `|λ|` and
//!   `gap = λ_k − max_{discarded} |λ|`, hence the scaling by `κ_gap = ‖A‖_2 / gap`.
//!   Computed eigenvalues are taken to be known to `± 4 sqrt(n) eps ‖A‖_2` (the usual
//!   statistical estimate of accumulated rounding; a worst-case `4 n eps ‖A‖_2` exceeds the
//!   threshold `10^-5 ‖A‖_2` itself in `f32` from `n = 21` on, which would make most `f32`
//!   comparisons void): eigenvalues within that distance of the threshold may go
//!   either way, the number of discarded eigenvalues is checked against faer's certain
//!   and possible counts, and the comparison of `x` is skipped when any eigenvalue is that
//!   close (the number of skipped systems is printed).
//! * The singular test matrices are exactly singular in both precisions (integer
//!   `G G^T`, or `diag(S, 0)`), with nonzero eigenvalues far above the threshold, so the
//!   number of discarded eigenvalues is exactly `n − rank`.
//!
//! Escalation on singular systems relies on the solution-growth check of the escalating
//! strategy (see [`singular_psd_escalates_to_divide_conquer`]).

use std::collections::BTreeMap;

use cva_kernels::families::paper_family;
use cva_kernels::householder::householder_tridiagonalize;
use cva_kernels::{
    solve_batched, BatchSummary, Method, Real, SolverParams, Status, Strategy, SymmetricBatch,
    SystemReport,
};
use faer::Mat;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod linalg;
use linalg::*;

const SIZES: [usize; 10] = [1, 2, 3, 7, 16, 30, 31, 33, 63, 64];
/// Recomputed relative residual / (n eps): the solver's default tolerance `16 n eps`.
const RESIDUAL_BOUND: f64 = 16.0;
/// |reported − recomputed residual| / (n eps).
const REPORT_BOUND: f64 = 4.0;
/// Forward error / (n eps κ).
const FORWARD_BOUND: f64 = 30.0;
/// Truncated (pseudo-inverse) solve error / (n eps κ_gap).
const PINV_BOUND: f64 = 30.0;
/// Computed eigenvalues are trusted to `EIG_UNCERTAINTY sqrt(n) eps ‖A‖_2`.
const EIG_UNCERTAINTY: f64 = 4.0;
/// The default condition threshold of divide and conquer.
const THRESHOLD: f64 = 1e5;
/// Report sentinel: a written report never has a negative residual.
const SENTINEL: SystemReport = SystemReport {
    method: Method::DivideConquer,
    status: Status::Failed,
    residual: -1.0,
    discarded: u32::MAX,
};

// ---------------------------------------------------------------------------------------
// Small numerical helpers (f64)
// ---------------------------------------------------------------------------------------

fn norm2(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// faer's solution truncated at the condition threshold, with what is needed to bound
/// the distance to it (see the module documentation).
struct Truncated {
    x: Vec<f64>,
    lambda: Vec<f64>,
    /// Eigenvalues surely discarded / within the uncertainty of the threshold.
    certain: usize,
    uncertain: usize,
    /// Smallest kept `|λ|` (0 when nothing is kept).
    lambda_kept: f64,
    lambda_max: f64,
    /// `‖A‖_2 / (λ_kept − max_discarded |λ|)`.
    kappa_gap: f64,
}

fn truncated_reference(a: &Mat<f64>, b: &[f64], eps: f64) -> Truncated {
    let n = a.nrows();
    let (lambda, u) = eigen(a);
    let lambda_max = lambda.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
    let tau = lambda_max / THRESHOLD;
    let delta = EIG_UNCERTAINTY * (n as f64).sqrt() * eps * lambda_max;
    let mut x = vec![0.0; n];
    let (mut certain, mut uncertain) = (0, 0);
    let (mut lambda_kept, mut lambda_disc) = (f64::INFINITY, 0.0f64);
    for (k, &l) in lambda.iter().enumerate() {
        if lambda_max == 0.0 {
            // A = 0: every eigenvalue is exactly zero and discarded.
            certain += 1;
        } else if (l.abs() - tau).abs() <= delta {
            uncertain += 1;
        } else if l.abs() < tau {
            certain += 1;
        }
        if l == 0.0 || l.abs() * THRESHOLD < lambda_max {
            lambda_disc = lambda_disc.max(l.abs());
            continue;
        }
        lambda_kept = lambda_kept.min(l.abs());
        let c: f64 = (0..n).map(|i| u[(i, k)] * b[i]).sum::<f64>() / l;
        for (i, xi) in x.iter_mut().enumerate() {
            *xi += c * u[(i, k)];
        }
    }
    if lambda_kept == f64::INFINITY {
        lambda_kept = 0.0;
    }
    Truncated {
        x,
        lambda,
        certain,
        uncertain,
        lambda_kept,
        lambda_max,
        kappa_gap: if lambda_kept == 0.0 {
            1.0
        } else {
            lambda_max / (lambda_kept - lambda_disc)
        },
    }
}

// ---------------------------------------------------------------------------------------
// Random inputs
// ---------------------------------------------------------------------------------------

/// Precision tag for seeds and case names.
fn is_f32<T: Real>() -> bool {
    T::EPSILON.to_f64() > 1e-10
}

/// A fresh generator per (test, precision, size, variant).
fn rng_for<T: Real>(test: u64, n: usize, variant: u64) -> StdRng {
    let p = if is_f32::<T>() { 1 } else { 2 };
    StdRng::seed_from_u64(test * 100_000_007 + p * 1_000_003 + n as u64 * 1_009 + variant)
}

/// `x` rounded to `T`.
fn round<T: Real>(x: f64) -> f64 {
    T::from_f64(x).to_f64()
}

/// The symmetric matrix of the lower triangle of `a`, rounded to `T`.
fn round_mat<T: Real>(a: &Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| {
        round::<T>(a[(i.max(j), i.min(j))])
    })
}

fn round_vec<T: Real>(b: &[f64]) -> Vec<f64> {
    b.iter().map(|&v| round::<T>(v)).collect()
}

// ---------------------------------------------------------------------------------------
// Batches and solver calls
// ---------------------------------------------------------------------------------------

/// A batch of systems of one size, already rounded to `T` (kept in `f64` for the
/// references) and packed in the solver's layout.
struct Batch<T> {
    n: usize,
    mats: Vec<Mat<f64>>,
    rhs: Vec<Vec<f64>>,
    a: Vec<T>,
    b: Vec<T>,
}

impl<T: Real> Batch<T> {
    /// Rounds the systems to `T` and packs them: lower triangle, NaN above it.
    fn new(n: usize, systems: Vec<(Mat<f64>, Vec<f64>)>) -> Self {
        let mut mats = Vec::with_capacity(systems.len());
        let mut rhs = Vec::with_capacity(systems.len());
        for (a, b) in systems {
            assert_eq!((a.nrows(), a.ncols(), b.len()), (n, n, n));
            mats.push(round_mat::<T>(&a));
            rhs.push(round_vec::<T>(&b));
        }
        let mut batch = Self {
            n,
            mats,
            rhs,
            a: Vec::new(),
            b: Vec::new(),
        };
        batch.pack(false);
        batch
    }

    /// Fills `a`, `b` from `mats`, `rhs`; the strict upper triangle is NaN unless `full`.
    fn pack(&mut self, full: bool) {
        let n = self.n;
        self.a = vec![T::NAN; self.mats.len() * n * n];
        for (m, blk) in self.mats.iter().zip(self.a.chunks_mut(n * n)) {
            for c in 0..n {
                let first = if full { 0 } else { c };
                for r in first..n {
                    blk[r + c * n] = T::from_f64(m[(r, c)]);
                }
            }
        }
        self.b = self.rhs.iter().flatten().map(|&v| T::from_f64(v)).collect();
    }

    fn len(&self) -> usize {
        self.mats.len()
    }
}

/// Output of one [`solve_batched`] call.
struct Solved<T> {
    x: Vec<T>,
    reports: Vec<SystemReport>,
    summary: BatchSummary,
}

impl<T: Real> Solved<T> {
    fn x(&self, i: usize, n: usize) -> &[T] {
        &self.x[i * n..(i + 1) * n]
    }
    fn x64(&self, i: usize, n: usize) -> Vec<f64> {
        self.x(i, n).iter().map(|v| v.to_f64()).collect()
    }
}

/// Calls the solver with `x` poisoned with `poison` and the reports with [`SENTINEL`].
fn solve_raw<T: Real>(
    n: usize,
    a: &[T],
    b: &[T],
    strategy: Strategy,
    params: &SolverParams,
    start: Method,
    poison: T,
) -> Solved<T> {
    let batch = SymmetricBatch::new(n, a, b);
    let mut x = vec![poison; b.len()];
    let mut reports = vec![SENTINEL; batch.batch];
    let summary = solve_batched(&batch, &mut x, &mut reports, strategy, params, start);
    Solved {
        x,
        reports,
        summary,
    }
}

fn solve<T: Real>(batch: &Batch<T>, strategy: Strategy, start: Method, poison: T) -> Solved<T> {
    solve_raw(
        batch.n,
        &batch.a,
        &batch.b,
        strategy,
        &SolverParams::default(),
        start,
        poison,
    )
}

/// The method the answer of a (well-conditioned) SPD system comes from.
fn spd_method(strategy: Strategy) -> Method {
    match strategy {
        Strategy::Ldlt | Strategy::Escalating => Method::Ldlt,
        Strategy::HouseholderPcr => Method::HouseholderPcr,
        Strategy::DivideConquer => Method::DivideConquer,
    }
}

/// The level a strategy starts at (`start` only matters for `Escalating`).
fn first_method(strategy: Strategy, start: Method) -> Method {
    match strategy {
        Strategy::Escalating => start,
        s => spd_method(s),
    }
}

fn bits<T: Real>(x: &[T]) -> Vec<u64> {
    x.iter().map(|v| v.to_f64().to_bits()).collect()
}

fn same_report(p: &SystemReport, q: &SystemReport) -> bool {
    p.method == q.method
        && p.status == q.status
        && p.discarded == q.discarded
        && p.residual.to_bits() == q.residual.to_bits()
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

/// Worst ratio of every check (with its bound) and the list of failures.
#[derive(Default)]
struct Checker {
    worst: BTreeMap<String, (f64, f64)>,
    failures: Vec<String>,
    notes: BTreeMap<String, usize>,
}

impl Checker {
    fn ratio<T: Real>(&mut self, strategy: Strategy, check: &str, case: &str, v: f64, bound: f64) {
        let key = format!("{check} [{} {strategy}]", T::NAME);
        let e = self.worst.entry(key).or_insert((0.0, bound));
        e.0 = nan_max(e.0, v);
        if v.is_nan() || v > bound {
            self.failures.push(format!(
                "{check} [{} {strategy}] {case}: {v:e} > {bound}",
                T::NAME
            ));
        }
    }

    /// Records a worst value without a bound.
    fn info<T: Real>(&mut self, strategy: Strategy, check: &str, v: f64) {
        let key = format!("{check} [{} {strategy}]", T::NAME);
        let e = self.worst.entry(key).or_insert((0.0, f64::INFINITY));
        e.0 = nan_max(e.0, v);
    }

    fn ensure(&mut self, ok: bool, case: &str, what: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(format!("{case}: {}", what()));
        }
    }

    fn note(&mut self, what: String) {
        *self.notes.entry(what).or_insert(0) += 1;
    }

    fn finish(self, test: &str) {
        println!("{test}: worst scaled errors");
        for (key, (worst, bound)) in &self.worst {
            println!("  {key:<58} {worst:>10.3e}  (bound {bound})");
        }
        for (what, count) in &self.notes {
            println!("  note: {what} ({count}x)");
        }
        let shown: Vec<&String> = self.failures.iter().take(4000).collect();
        assert!(
            self.failures.is_empty(),
            "{test}: {} failure(s), first ones:\n{}",
            self.failures.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The report was written, and its fields agree with `x`:
/// `Ok` ⇒ `x` finite and residual consistent with a recomputation; `NotPositiveDefinite`
/// ⇒ `L D L^T`, NaN `x` and residual; `Failed` ⇒ NaN residual and a non-finite `x`
/// entry; `NonFiniteInput` ⇒ NaN `x`. Returns the recomputed residual.
#[allow(clippy::too_many_arguments)]
fn check_consistent<T: Real>(
    chk: &mut Checker,
    strategy: Strategy,
    case: &str,
    a: &Mat<f64>,
    b: &[f64],
    x: &[T],
    rep: &SystemReport,
) -> f64 {
    let n = b.len();
    let eps = T::EPSILON.to_f64();
    let written = rep.residual != -1.0 && rep.discarded != u32::MAX;
    chk.ensure(written, case, || format!("report not written: {rep:?}"));
    let x64: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let res = relative_residual(a, b, &x64);
    match rep.status {
        Status::Ok => {
            chk.ensure(x.iter().all(|v| v.is_finite()), case, || {
                format!("status ok with a non-finite x: {rep:?}")
            });
            chk.ratio::<T>(
                strategy,
                "report consistency",
                case,
                (rep.residual - res).abs() / (n as f64 * eps),
                REPORT_BOUND,
            );
        }
        Status::NotPositiveDefinite => {
            chk.ensure(
                rep.method == Method::Ldlt && rep.residual.is_nan() && rep.discarded == 0,
                case,
                || format!("bad not-positive-definite report {rep:?}"),
            );
            chk.ensure(x.iter().all(|v| v.is_nan()), case, || {
                "not positive definite but x is not all NaN".to_string()
            });
        }
        Status::Failed => {
            chk.ensure(rep.residual.is_nan(), case, || {
                format!("failed with a residual {rep:?}")
            });
            chk.ensure(x.iter().any(|v| !v.is_finite()), case, || {
                format!("failed with a finite x {rep:?}")
            });
        }
        Status::NonFiniteInput => {
            chk.ensure(x.iter().all(|v| v.is_nan()), case, || {
                "non-finite input but x is not all NaN".to_string()
            });
        }
    }
    res
}

/// A system that must be solved accurately (`κ < 10^5`, nothing discarded): status `Ok`,
/// method one of `methods`, residual and forward error within bounds.
#[allow(clippy::too_many_arguments)]
fn check_solved<T: Real>(
    chk: &mut Checker,
    strategy: Strategy,
    case: &str,
    a: &Mat<f64>,
    b: &[f64],
    x: &[T],
    rep: &SystemReport,
    methods: &[Method],
    x_ref: &[f64],
    kappa: f64,
) {
    let n = b.len();
    let nf = n as f64;
    let eps = T::EPSILON.to_f64();
    let res = check_consistent(chk, strategy, case, a, b, x, rep);
    chk.ensure(
        rep.status == Status::Ok && methods.contains(&rep.method) && rep.discarded == 0,
        case,
        || format!("expected status ok, method in {methods:?}, nothing discarded: {rep:?}"),
    );
    let tol = SolverParams::default().tolerance::<T>(n);
    if strategy == Strategy::HouseholderPcr {
        // PCR is forward but not backward stable: its residual may exceed the tolerance
        // by up to a factor κ / 16 (see the module documentation).
        if rep.residual > tol {
            chk.note(format!(
                "[{} {strategy}] reported residual above the tolerance",
                T::NAME
            ));
        }
        chk.info::<T>(strategy, "residual (no bound)", res / (nf * eps));
        chk.ratio::<T>(
            strategy,
            "residual / max(1, κ/16)",
            case,
            res / (nf * eps * (kappa / RESIDUAL_BOUND).max(1.0)),
            RESIDUAL_BOUND,
        );
    } else {
        chk.ensure(rep.residual <= tol, case, || {
            format!("reported residual {:e} above tol {tol:e}", rep.residual)
        });
        chk.ratio::<T>(strategy, "residual", case, res / (nf * eps), RESIDUAL_BOUND);
    }
    let x64: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    chk.ratio::<T>(
        strategy,
        "forward error",
        case,
        forward_error(&x64, x_ref) / (nf * eps * kappa),
        FORWARD_BOUND,
    );
}

/// A system solved by the truncated divide-and-conquer solve: status `Ok`, method
/// `DivideConquer`, the number of discarded eigenvalues between faer's certain and
/// possible counts, and `x` close to faer's truncated pseudo-inverse solution.
/// Returns whether `x` was compared (no eigenvalue too close to the threshold).
#[allow(clippy::too_many_arguments)]
fn check_truncated<T: Real>(
    chk: &mut Checker,
    strategy: Strategy,
    case: &str,
    a: &Mat<f64>,
    b: &[f64],
    x: &[T],
    rep: &SystemReport,
    tr: &Truncated,
) -> bool {
    let n = b.len();
    let nf = n as f64;
    let eps = T::EPSILON.to_f64();
    check_consistent(chk, strategy, case, a, b, x, rep);
    chk.ensure(
        rep.status == Status::Ok && rep.method == Method::DivideConquer,
        case,
        || format!("expected divide-conquer with status ok: {rep:?}"),
    );
    let d = rep.discarded as usize;
    chk.ensure(
        tr.certain <= d && d <= tr.certain + tr.uncertain,
        case,
        || {
            format!(
                "discarded {d}, faer: {} surely and {} possibly (λ = {:?})",
                tr.certain, tr.uncertain, tr.lambda
            )
        },
    );
    if tr.uncertain > 0 {
        chk.note(format!(
            "[{} {strategy}] eigenvalue within the uncertainty of the threshold: x not compared",
            T::NAME
        ));
        return false;
    }
    let x64: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let err = norm2(&sub(&x64, &tr.x));
    let v = if tr.lambda_kept == 0.0 || norm2(b) == 0.0 {
        // Nothing kept (A = 0) or b = 0: the answer is exactly 0.
        if err == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        err * tr.lambda_kept / (norm2(b) * nf * eps * tr.kappa_gap)
    };
    chk.ratio::<T>(strategy, "truncated solve vs faer", case, v, PINV_BOUND);
    true
}

/// For an exactly singular `A` (discarded eigenvalues exactly 0): the least-squares
/// condition `A (A x − b) = 0` of the pseudo-inverse solution.
fn check_least_squares<T: Real>(
    chk: &mut Checker,
    strategy: Strategy,
    case: &str,
    a: &Mat<f64>,
    b: &[f64],
    x: &[f64],
    tr: &Truncated,
) {
    let nf = b.len() as f64;
    let eps = T::EPSILON.to_f64();
    let ar = mat_vec(a, &sub(&mat_vec(a, x), b));
    let den = tr.lambda_max * (tr.lambda_max * norm2(x) + norm2(b));
    chk.ratio::<T>(
        strategy,
        "least squares A(Ax-b)",
        case,
        ratio(norm2(&ar), den) / (nf * eps * tr.kappa_gap),
        PINV_BOUND,
    );
}

/// The summary agrees with the reports (recounted here) and the memory rule.
fn check_summary(
    chk: &mut Checker,
    case: &str,
    reports: &[SystemReport],
    s: &BatchSummary,
    start: Method,
    fraction: f64,
) {
    let mut per_method = [0usize; 3];
    let mut per_status = [0usize; 4];
    let mut discarded = 0;
    let mut max_residual = 0.0;
    for r in reports {
        per_method[r.method as usize] += 1;
        per_status[r.status as usize] += 1;
        discarded += r.discarded as usize;
        if r.status == Status::Ok {
            max_residual = nan_max(max_residual, r.residual);
        }
    }
    let need = (fraction * reports.len() as f64).max(1.0);
    let next = Method::ALL
        .into_iter()
        .filter(|&m| m >= start && (m == start || per_method[m as usize] as f64 >= need))
        .max()
        .unwrap_or(start);
    let ok = s.systems == reports.len()
        && s.per_method == per_method
        && s.per_status == per_status
        && s.discarded_eigenvalues == discarded
        && (s.max_residual == max_residual || (s.max_residual.is_nan() && max_residual.is_nan()))
        && s.next_start == next;
    chk.ensure(ok, case, || {
        format!(
            "summary {s:?} disagrees with the reports: per_method {per_method:?}, per_status \
             {per_status:?}, discarded {discarded}, max residual {max_residual:e}, next {next:?}"
        )
    });
}

// ---------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------

/// Solves `batch` with every strategy and checks every system as accurately solvable
/// (SPD, `κ < 10^5`): the expected method of an SPD system for each strategy.
fn solve_spd_batch<T: Real>(chk: &mut Checker, label: &str, batch: &Batch<T>) {
    let n = batch.n;
    let refs: Vec<(Vec<f64>, f64)> = batch
        .mats
        .iter()
        .zip(&batch.rhs)
        .map(|(a, b)| (faer_solve(a, b), cond2(&eigen(a).0)))
        .collect();
    for (i, (_, kappa)) in refs.iter().enumerate() {
        assert!(*kappa < 1e4, "{label}: test matrix {i} has κ = {kappa:e}");
    }
    for strategy in Strategy::ALL {
        let out = solve(batch, strategy, Method::Ldlt, T::NAN);
        let case = format!("{label} {} n={n}", T::NAME);
        check_summary(
            chk,
            &case,
            &out.reports,
            &out.summary,
            Method::Ldlt,
            SolverParams::default().memory_fraction,
        );
        for (i, (x_ref, kappa)) in refs.iter().enumerate() {
            let case = format!("{label} {} {strategy} n={n} system {i}", T::NAME);
            check_solved(
                chk,
                strategy,
                &case,
                &batch.mats[i],
                &batch.rhs[i],
                out.x(i, n),
                &out.reports[i],
                &[spd_method(strategy)],
                x_ref,
                *kappa,
            );
        }
    }
}

/// Solves an indefinite (or otherwise not SPD) nonsingular batch with every strategy:
/// `Ldlt` must report `NotPositiveDefinite` with NaN `x`, `DivideConquer` and
/// `Escalating` (through `HouseholderPcr` or `DivideConquer`) must solve it;
/// `HouseholderPcr` alone (no pivoting) is only checked for consistency.
fn solve_indefinite_batch<T: Real>(chk: &mut Checker, label: &str, batch: &Batch<T>) {
    let n = batch.n;
    let refs: Vec<(Vec<f64>, f64)> = batch
        .mats
        .iter()
        .zip(&batch.rhs)
        .map(|(a, b)| (faer_solve(a, b), cond2(&eigen(a).0)))
        .collect();
    for strategy in Strategy::ALL {
        let poison = if strategy == Strategy::Ldlt {
            T::from_f64(0.25)
        } else {
            T::NAN
        };
        let out = solve(batch, strategy, Method::Ldlt, poison);
        for (i, (x_ref, kappa)) in refs.iter().enumerate() {
            let case = format!("{label} {} {strategy} n={n} system {i}", T::NAME);
            let (a, b, x, rep) = (&batch.mats[i], &batch.rhs[i], out.x(i, n), &out.reports[i]);
            let kappa = *kappa;
            match strategy {
                Strategy::Ldlt => {
                    check_consistent(chk, strategy, &case, a, b, x, rep);
                    chk.ensure(rep.status == Status::NotPositiveDefinite, &case, || {
                        format!("expected not-positive-definite: {rep:?}")
                    });
                }
                Strategy::HouseholderPcr => {
                    let res = check_consistent(chk, strategy, &case, a, b, x, rep);
                    let tol = SolverParams::default().tolerance::<T>(n);
                    if rep.status != Status::Ok || res > tol {
                        chk.note(format!(
                            "[{} {strategy}] {label}: PCR without pivoting failed or inaccurate",
                            T::NAME
                        ));
                    }
                }
                Strategy::DivideConquer => check_solved(
                    chk,
                    strategy,
                    &case,
                    a,
                    b,
                    x,
                    rep,
                    &[Method::DivideConquer],
                    x_ref,
                    kappa,
                ),
                Strategy::Escalating => check_solved(
                    chk,
                    strategy,
                    &case,
                    a,
                    b,
                    x,
                    rep,
                    &[Method::HouseholderPcr, Method::DivideConquer],
                    x_ref,
                    kappa,
                ),
            }
        }
    }
}

/// `#[test] fn $name`: `$each::<f32>` then `$each::<f64>` on one [`Checker`], which
/// reports every failure of both precisions at the end.
macro_rules! test_both_precisions {
    ($(#[$doc:meta])* $name:ident => $each:ident) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            let mut chk = Checker::default();
            $each::<f32>(&mut chk);
            $each::<f64>(&mut chk);
            chk.finish(stringify!($name));
        }
    };
}

// ---------------------------------------------------------------------------------------
// Random SPD batches and the paper's family
// ---------------------------------------------------------------------------------------

fn random_spd_for<T: Real>(chk: &mut Checker) {
    for n in SIZES {
        let mut rng = rng_for::<T>(1, n, 0);
        let systems = (0..64)
            .map(|_| (random_spd(n, 1e3, &mut rng), gaussian_vec(n, &mut rng)))
            .collect();
        solve_spd_batch(chk, "random spd", &Batch::<T>::new(n, systems));
    }
}

test_both_precisions! {
    /// Batches of 64 random SPD systems (`κ <= 10^3`, random power-of-two scale) for every
    /// size: every strategy, status `Ok` with the expected method, residual and forward error.
    random_spd_batches => random_spd_for
}

fn paper_family_for<T: Real>(chk: &mut Checker) {
    for n in SIZES {
        for (v, rho) in [0.1, 0.5, 0.9, 0.99].into_iter().enumerate() {
            let seed = 7 + 1000 * n as u64 + v as u64 + if is_f32::<T>() { 0 } else { 500 };
            let (a, b) = paper_family::<T>(n, 16, rho, seed);
            let systems = (0..16)
                .map(|s| {
                    let blk = &a[s * n * n..(s + 1) * n * n];
                    let m = Mat::from_fn(n, n, |r, c| blk[r + c * n].to_f64());
                    let rhs = b[s * n..(s + 1) * n].iter().map(|v| v.to_f64()).collect();
                    (m, rhs)
                })
                .collect();
            let batch = Batch::<T>::new(n, systems);
            solve_spd_batch(chk, &format!("paper family rho={rho}"), &batch);
        }
    }
}

test_both_precisions! {
    /// The paper's family `A = Q R Q^T` (Section 3.3, [`paper_family`]) for
    /// `ρ = 0.1, 0.5, 0.9, 0.99`, batches of 16, every size and strategy.
    paper_family_batches => paper_family_for
}

// ---------------------------------------------------------------------------------------
// Hard cases
// ---------------------------------------------------------------------------------------

fn identity_for<T: Real>(chk: &mut Checker) {
    for n in SIZES {
        let mut rng = rng_for::<T>(3, n, 0);
        let systems = [1.0, 2f64.powi(-20), 2f64.powi(20)]
            .into_iter()
            .flat_map(|c| {
                let sys: Vec<_> = (0..4)
                    .map(|_| {
                        (
                            Mat::from_fn(n, n, |i, j| if i == j { c } else { 0.0 }),
                            gaussian_vec(n, &mut rng),
                        )
                    })
                    .collect();
                sys
            })
            .collect();
        solve_spd_batch(chk, "c I", &Batch::<T>::new(n, systems));
    }
}

test_both_precisions! {
    /// `c I` for `c = 1, 2^-20, 2^20`.
    identity => identity_for
}

fn equicorrelation_for<T: Real>(chk: &mut Checker) {
    for n in SIZES {
        let mut rng = rng_for::<T>(4, n, 0);
        let mut rhos = vec![0.1, 0.5, 0.9, 0.99];
        if n > 1 {
            // The most negative correlation that stays well conditioned.
            rhos.push(-0.9 / (n as f64 - 1.0));
        }
        for rho in rhos {
            let systems = (0..8)
                .map(|_| {
                    (
                        Mat::from_fn(n, n, |i, j| if i == j { 1.0 } else { rho }),
                        gaussian_vec(n, &mut rng),
                    )
                })
                .collect();
            solve_spd_batch(
                chk,
                &format!("Xi rho={rho:.4}"),
                &Batch::<T>::new(n, systems),
            );
        }
    }
}

test_both_precisions! {
    /// The equicorrelation matrix `Ξ_ρ`: eigenvalue `1 − ρ` repeated `n − 1` times (heavy
    /// deflation in divide and conquer), `κ = (1 + (n−1) ρ) / (1 − ρ)` up to `6.3e3`.
    equicorrelation_repeated_eigenvalue => equicorrelation_for
}

/// Block-diagonal SPD matrix with blocks of random sizes `1..=max_block` (`max_block = 1`:
/// diagonal), and its number of blocks.
fn block_diagonal(n: usize, max_block: usize, rng: &mut StdRng) -> (Mat<f64>, usize) {
    let mut a = Mat::zeros(n, n);
    let (mut first, mut blocks) = (0, 0);
    while first < n {
        blocks += 1;
        let size = rng.random_range(1..=max_block).min(n - first);
        let blk = spd_with_scale(size, 1e2, 2f64.powi(-rng.random_range(0..4)), rng);
        for c in 0..size {
            for r in 0..size {
                a[(first + r, first + c)] = blk[(r, c)];
            }
        }
        first += size;
    }
    (a, blocks)
}

/// Number of exactly zero off-diagonal entries of the Householder tridiagonal form.
fn tridiagonal_zeros(a: &Mat<f64>) -> usize {
    let n = a.nrows();
    let mut buf: Vec<f64> = (0..n * n).map(|k| a[(k % n, k / n)]).collect();
    let mut d = vec![0.0; n];
    let mut e = vec![0.0; n.saturating_sub(1)];
    householder_tridiagonalize(n, &mut buf, n, &mut d, &mut e);
    e.iter().filter(|&&v| v == 0.0).count()
}

fn split_tridiagonal_for<T: Real>(chk: &mut Checker) {
    for n in SIZES {
        let mut rng = rng_for::<T>(5, n, 0);
        for max_block in [1, 2, 5] {
            let mut systems = Vec::new();
            for _ in 0..8 {
                let (a, blocks) = block_diagonal(n, max_block, &mut rng);
                // Every block boundary is a zero off-diagonal of the tridiagonal form.
                let zeros = tridiagonal_zeros(&round_mat::<T>(&a));
                chk.ensure(
                    zeros + 1 >= blocks,
                    &format!("blocks<={max_block} n={n}"),
                    || format!("{blocks} blocks but {zeros} zero off-diagonals"),
                );
                systems.push((a, gaussian_vec(n, &mut rng)));
            }
            let batch = Batch::<T>::new(n, systems);
            solve_spd_batch(chk, &format!("blocks<={max_block}"), &batch);
        }
    }
}

test_both_precisions! {
    /// Diagonal and block-diagonal SPD matrices: their Householder tridiagonal form has zero
    /// off-diagonal entries (already reduced rows, a split tridiagonal matrix for PCR and
    /// divide and conquer).
    zero_offdiagonals_in_tridiagonal_form => split_tridiagonal_for
}

/// Powers of two spanning `GRADING_BITS` binary orders of magnitude along the diagonal
/// scaling (so `D A D` spans twice that).
const GRADING_BITS: i32 = 30;

fn graded_for<T: Real>(chk: &mut Checker) {
    let eps = T::EPSILON.to_f64();
    for n in SIZES {
        let nf = n as f64;
        for (v, increasing) in [false, true].into_iter().enumerate() {
            let mut rng = rng_for::<T>(6, n, v as u64);
            let dexp: Vec<i32> = (0..n)
                .map(|i| {
                    let e = if n == 1 {
                        0
                    } else {
                        (GRADING_BITS as f64 * i as f64 / (n as f64 - 1.0)).round() as i32
                    };
                    if increasing {
                        e - GRADING_BITS
                    } else {
                        -e
                    }
                })
                .collect();
            let d: Vec<f64> = dexp.iter().map(|&e| 2f64.powi(e)).collect();
            let systems: Vec<_> = (0..8)
                .map(|_| {
                    let s = random_spd(n, 1e2, &mut rng);
                    // Unit diagonal, then graded.
                    let a = Mat::from_fn(n, n, |i, j| {
                        d[i] * d[j] * s[(i, j)] / (s[(i, i)] * s[(j, j)]).sqrt()
                    });
                    (a, gaussian_vec(n, &mut rng))
                })
                .collect();
            let batch = Batch::<T>::new(n, systems);
            let label = if increasing {
                "graded up"
            } else {
                "graded down"
            };
            // References: the equilibrated matrix D^-1 A D^-1 (exact: D is powers of 2).
            let refs: Vec<(Vec<f64>, f64, Truncated)> = batch
                .mats
                .iter()
                .zip(&batch.rhs)
                .map(|(m, b)| {
                    let eq = Mat::from_fn(n, n, |i, j| m[(i, j)] / (d[i] * d[j]));
                    let db: Vec<f64> = b.iter().zip(&d).map(|(p, q)| p / q).collect();
                    let y = faer_solve(&eq, &db);
                    let x: Vec<f64> = y.iter().zip(&d).map(|(p, q)| p / q).collect();
                    (x, cond2(&eigen(&eq).0), truncated_reference(m, b, eps))
                })
                .collect();
            for strategy in Strategy::ALL {
                let out = solve(&batch, strategy, Method::Ldlt, T::NAN);
                for (i, (x_ref, kappa_eq, tr)) in refs.iter().enumerate() {
                    let case = format!("{label} {} {strategy} n={n} system {i}", T::NAME);
                    let (a, b, x, rep) =
                        (&batch.mats[i], &batch.rhs[i], out.x(i, n), &out.reports[i]);
                    let kappa_eq = *kappa_eq;
                    if strategy == Strategy::DivideConquer {
                        check_truncated(chk, strategy, &case, a, b, x, rep, tr);
                        if n > 1 && cond2(&tr.lambda) > 10.0 * THRESHOLD {
                            chk.ensure(rep.discarded > 0, &case, || {
                                format!("nothing discarded: {rep:?}")
                            });
                        }
                        continue;
                    }
                    let res = check_consistent(chk, strategy, &case, a, b, x, rep);
                    if strategy == Strategy::HouseholderPcr
                        && rep.status == Status::Failed
                        && nf * eps * cond2(&tr.lambda) >= 1.0
                    {
                        // Numerically singular in the normwise sense: PCR (no pivoting)
                        // may break down.
                        chk.note(format!(
                            "[{} {strategy}] PCR broke down on a graded matrix with n eps κ >= 1",
                            T::NAME
                        ));
                        continue;
                    }
                    chk.ensure(
                        rep.status == Status::Ok && rep.method == spd_method(strategy),
                        &case,
                        || format!("expected ok by {:?}: {rep:?}", spd_method(strategy)),
                    );
                    chk.ratio::<T>(
                        strategy,
                        "residual",
                        &case,
                        res / (nf * eps),
                        RESIDUAL_BOUND,
                    );
                    if spd_method(strategy) == Method::Ldlt {
                        // Scaled forward error of D x.
                        let dx: Vec<f64> =
                            out.x64(i, n).iter().zip(&d).map(|(p, q)| p * q).collect();
                        let dr: Vec<f64> = x_ref.iter().zip(&d).map(|(p, q)| p * q).collect();
                        chk.ratio::<T>(
                            strategy,
                            "graded forward error of D x",
                            &case,
                            forward_error(&dx, &dr) / (nf * eps * kappa_eq),
                            FORWARD_BOUND,
                        );
                    }
                }
            }
        }
    }
}

test_both_precisions! {
    /// Graded SPD matrices `D A D`, `A` with unit diagonal and `κ(A) <= 10^2`, `D` powers of
    /// two over `2^30` (so `D A D` spans 18 decimal orders and `κ(D A D)` is up to ~`10^20`):
    /// `L D L^T` (and the escalating strategy, which stays there) solves them with the
    /// accuracy of the equilibrated matrix; Householder + PCR with a small normwise
    /// residual; divide and conquer discards eigenvalues and gives the truncated solution.
    graded_matrices => graded_for
}

/// Wilkinson's `W_n^+`: tridiagonal, `|(n−1)/2 − i|` on the diagonal, 1 beside it.
fn wilkinson(n: usize) -> Mat<f64> {
    let m = (n as f64 - 1.0) / 2.0;
    Mat::from_fn(n, n, |i, j| {
        if i == j {
            (m - i as f64).abs()
        } else if i.abs_diff(j) == 1 {
            1.0
        } else {
            0.0
        }
    })
}

fn wilkinson_for<T: Real>(chk: &mut Checker) {
    for n in SIZES.into_iter().filter(|&n| n >= 2) {
        let mut rng = rng_for::<T>(7, n, 0);
        let w = wilkinson(n);
        let lambda = eigen(&round_mat::<T>(&w)).0;
        let indefinite = lambda[0] < 0.0;
        assert!(cond2(&lambda) < 1e4, "W_{n}: κ = {:e}", cond2(&lambda));
        let shifted = Mat::from_fn(n, n, |i, j| {
            w[(i, j)] + if i == j { 1.0 - lambda[0] } else { 0.0 }
        });
        let sys = |a: &Mat<f64>, rng: &mut StdRng| -> Vec<(Mat<f64>, Vec<f64>)> {
            (0..8).map(|_| (a.clone(), gaussian_vec(n, rng))).collect()
        };
        let batch = Batch::<T>::new(n, sys(&w, &mut rng));
        if indefinite {
            solve_indefinite_batch(chk, "W+", &batch);
        } else {
            solve_spd_batch(chk, "W+", &batch);
        }
        // W+ shifted to be positive definite, eigenvalues from 1 up (its close pairs kept).
        let batch = Batch::<T>::new(n, sys(&shifted, &mut rng));
        solve_spd_batch(chk, "W+ shifted", &batch);
    }
}

test_both_precisions! {
    /// Wilkinson's tridiagonal `W_n^+` as the matrix (indefinite for the sizes here, with
    /// pairs of very close eigenvalues, and zeros on the diagonal for odd `n`), and `W_n^+`
    /// shifted to be positive definite.
    wilkinson_tridiagonal => wilkinson_for
}

fn indefinite_for<T: Real>(chk: &mut Checker) {
    for n in SIZES {
        let mut rng = rng_for::<T>(8, n, 0);
        let mut systems: Vec<_> = (0..24)
            .map(|_| (random_indefinite(n, &mut rng), gaussian_vec(n, &mut rng)))
            .collect();
        // Diagonal with both signs: PCR is exact on it.
        systems.extend((0..4).map(|k| {
            let a = Mat::from_fn(n, n, |i, j| {
                if i != j {
                    0.0
                } else if (i + k) % 2 == 0 || n == 1 {
                    -1.0 - i as f64
                } else {
                    1.0 + i as f64
                }
            });
            (a, gaussian_vec(n, &mut rng))
        }));
        solve_indefinite_batch(chk, "indefinite", &Batch::<T>::new(n, systems));
    }
}

test_both_precisions! {
    /// Indefinite nonsingular symmetric matrices (`|λ|` in `[0.01, 1]`, both signs):
    /// `Ldlt` reports `NotPositiveDefinite` with NaN `x`; `Escalating` recovers through
    /// Householder + PCR or divide and conquer; `DivideConquer` solves them.
    indefinite_nonsingular => indefinite_for
}

/// Exactly singular PSD `G G^T` of rank `r`, exact in `f32`: `G = P [I_r; C]` with `C`
/// an `(n − r) x r` matrix of entries in `{−1, 0, 1}` and `P` a random row permutation
/// (the nonzero eigenvalues are those of `I + C^T C`, in `[1, 1 + ‖C‖_2^2]`, far from the
/// threshold). The right-hand side is in the range (`G c`, `c` integer) or not (Gaussian).
fn singular_psd(n: usize, r: usize, in_range: bool, rng: &mut StdRng) -> (Mat<f64>, Vec<f64>) {
    let mut rows: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        rows.swap(i, rng.random_range(0..=i));
    }
    let c = Mat::from_fn(n - r, r, |_, _| rng.random_range(-1i32..=1) as f64);
    let g = Mat::from_fn(n, r, |i, k| {
        let row = rows[i];
        if row < r {
            if row == k {
                1.0
            } else {
                0.0
            }
        } else {
            c[(row - r, k)]
        }
    });
    let a = &g * g.transpose();
    let b = if in_range {
        let w: Vec<f64> = (0..r).map(|_| rng.random_range(-3i32..=3) as f64).collect();
        (0..n)
            .map(|i| (0..r).map(|k| g[(i, k)] * w[k]).sum())
            .collect()
    } else {
        gaussian_vec(n, rng)
    };
    (a, b)
}

/// `diag(S, 0)`: `S` random SPD of size `n − k` (`κ <= 10^2`), then `k` zero rows and
/// columns (`k = n`: `A = 0`). The zero rows stay exactly zero through `L D L^T` (a zero
/// pivot) and Householder (a zero diagonal for PCR), so only divide and conquer solves it.
fn zero_block_singular(
    n: usize,
    k: usize,
    in_range: bool,
    rng: &mut StdRng,
) -> (Mat<f64>, Vec<f64>) {
    let m = n - k;
    let s = spd_with_scale(m, 1e2, 1.0, rng);
    let a = Mat::from_fn(n, n, |i, j| if i < m && j < m { s[(i, j)] } else { 0.0 });
    let b = (0..n)
        .map(|i| {
            if in_range && i >= m {
                0.0
            } else {
                gaussian(rng)
            }
        })
        .collect();
    (a, b)
}

/// Singular systems of one size: `(label, structural, rank, system)`; `structural`
/// systems have exactly zero rows (see [`zero_block_singular`]).
type SingularCase = (String, bool, usize, (Mat<f64>, Vec<f64>));

fn singular_cases(n: usize, rng: &mut StdRng) -> Vec<SingularCase> {
    let mut out = Vec::new();
    for in_range in [true, false] {
        let b = if in_range { "in" } else { "not in" };
        let mut ranks = vec![0, 1, n / 2, n - 1];
        ranks.retain(|&r| r < n);
        ranks.dedup();
        for r in ranks {
            for _ in 0..6 {
                let label = format!("G G^T rank {r}, b {b} range");
                out.push((label, false, r, singular_psd(n, r, in_range, rng)));
            }
        }
        let mut zeros = vec![n, n.div_ceil(2), 1];
        zeros.dedup();
        for k in zeros {
            for _ in 0..3 {
                let label = format!("diag(S, 0_{k}), b {b} range");
                out.push((label, true, n - k, zero_block_singular(n, k, in_range, rng)));
            }
        }
    }
    out
}

/// Checks of a singular system solved by divide and conquer: status, the `n − r`
/// discarded eigenvalues, the pseudo-inverse solution, least squares, and for `b` in the
/// range a small residual.
#[allow(clippy::too_many_arguments)]
fn check_pseudo_inverse<T: Real>(
    chk: &mut Checker,
    strategy: Strategy,
    case: &str,
    a: &Mat<f64>,
    b: &[f64],
    x: &[T],
    rep: &SystemReport,
    tr: &Truncated,
    rank: usize,
) {
    let n = b.len();
    let eps = T::EPSILON.to_f64();
    let compared = check_truncated(chk, strategy, case, a, b, x, rep, tr);
    chk.ensure(compared && rep.discarded as usize == n - rank, case, || {
        format!("expected {} discarded: {rep:?}", n - rank)
    });
    let x64: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    check_least_squares::<T>(chk, strategy, case, a, b, &x64, tr);
    // b in the range (to rounding): A x = b is consistent.
    let in_range = norm2(&sub(&mat_vec(a, &tr.x), b)) <= 1e-9 * norm2(b);
    if in_range {
        chk.ratio::<T>(
            strategy,
            "residual (b in range)",
            case,
            relative_residual(a, b, &x64) / (n as f64 * eps),
            RESIDUAL_BOUND,
        );
    }
}

/// Runs the singular cases of every size. With `strict`, `Escalating` must end at divide
/// and conquer with the pseudo-inverse solution for every system; otherwise only for the
/// structurally singular ones, and a generic `G G^T` may also be accepted by `L D L^T` or
/// Householder + PCR under the documented residual criterion.
fn singular_for<T: Real>(chk: &mut Checker, strict: bool) {
    let eps = T::EPSILON.to_f64();
    for n in SIZES {
        let mut rng = rng_for::<T>(9, n, 0);
        let cases = singular_cases(n, &mut rng);
        let batch = Batch::<T>::new(n, cases.iter().map(|c| c.3.clone()).collect());
        let refs: Vec<Truncated> = batch
            .mats
            .iter()
            .zip(&batch.rhs)
            .map(|(a, b)| truncated_reference(a, b, eps))
            .collect();
        let tol = SolverParams::default().tolerance::<T>(n);
        for strategy in Strategy::ALL {
            if strict && strategy != Strategy::Escalating {
                continue;
            }
            let out = solve(&batch, strategy, Method::Ldlt, T::NAN);
            for (i, (label, structural, rank, _)) in cases.iter().enumerate() {
                let case = format!("{label} {} {strategy} n={n} system {i}", T::NAME);
                let (a, b, x, rep) = (&batch.mats[i], &batch.rhs[i], out.x(i, n), &out.reports[i]);
                let tr = &refs[i];
                match strategy {
                    Strategy::Ldlt | Strategy::HouseholderPcr => {
                        check_consistent(chk, strategy, &case, a, b, x, rep);
                        if *structural {
                            chk.ensure(rep.status != Status::Ok, &case, || {
                                format!("structurally singular system solved: {rep:?}")
                            });
                        }
                    }
                    Strategy::DivideConquer => {
                        check_pseudo_inverse(chk, strategy, &case, a, b, x, rep, tr, *rank)
                    }
                    Strategy::Escalating => {
                        if strict || *structural || rep.method == Method::DivideConquer {
                            check_pseudo_inverse(chk, strategy, &case, a, b, x, rep, tr, *rank);
                        } else {
                            check_consistent(chk, strategy, &case, a, b, x, rep);
                            chk.ensure(
                                rep.status == Status::Ok && rep.residual <= tol,
                                &case,
                                || format!("escalating answer not accepted: {rep:?}"),
                            );
                            chk.note(format!(
                                "[{} {strategy}] singular G G^T accepted by {} (residual <= tol, \
                                 not the pseudo-inverse solution)",
                                T::NAME,
                                rep.method.name()
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// Singular PSD matrices: generic `G G^T` of rank `0, 1, n/2, n − 1` and `diag(S, 0)`
/// with zero blocks of size `n, n/2, 1`, right-hand side in and not in the range.
/// `DivideConquer` gives the pseudo-inverse solution `A^+ b` (faer's eigendecomposition
/// with the same threshold) with `n − r` discarded eigenvalues, which satisfies the
/// least-squares condition and, for `b` in the range, has a small residual. `Escalating`
/// must end there for `diag(S, 0)`; for `G G^T` it may stop earlier (see
/// [`singular_psd_escalates_to_divide_conquer`]). `Ldlt` and `HouseholderPcr` must
/// report consistently (and not `Ok` on the zero rows of `diag(S, 0)`).
#[test]
fn singular_psd_pseudo_inverse() {
    let mut chk = Checker::default();
    singular_for::<f32>(&mut chk, false);
    singular_for::<f64>(&mut chk, false);
    chk.finish("singular_psd_pseudo_inverse");
}

/// `Escalating` ends at divide and conquer with the pseudo-inverse solution for *every*
/// singular PSD system, generic `G G^T` included. The residual alone would not get it
/// there (on a rank-deficient `G G^T`, `L D L^T` often meets only tiny positive pivots and
/// returns a huge `x` whose relative residual is ~`eps`); the solution-growth check
/// (`||A|| ||x|| / ||b||` above the condition threshold) sends those systems on.
#[test]
fn singular_psd_escalates_to_divide_conquer() {
    let mut chk = Checker::default();
    singular_for::<f32>(&mut chk, true);
    singular_for::<f64>(&mut chk, true);
    chk.finish("singular_psd_escalates_to_divide_conquer");
}

fn non_finite_for<T: Real>(chk: &mut Checker) {
    for n in [1, 2, 7, 33, 64] {
        let mut rng = rng_for::<T>(10, n, 0);
        let systems: Vec<_> = (0..12)
            .map(|_| (random_spd(n, 1e3, &mut rng), gaussian_vec(n, &mut rng)))
            .collect();
        let clean = Batch::<T>::new(n, systems);
        let bad = 5;
        let (r0, c0) = if n > 1 { (n - 1, n / 3) } else { (0, 0) };
        let corruptions: [(&str, bool, usize, f64); 6] = [
            ("NaN in A", true, r0 + c0 * n, f64::NAN),
            (
                "+inf on the diagonal of A",
                true,
                (n / 2) * (n + 1),
                f64::INFINITY,
            ),
            ("-inf in A", true, r0 + c0 * n, f64::NEG_INFINITY),
            ("NaN in b", false, n - 1, f64::NAN),
            ("+inf in b", false, 0, f64::INFINITY),
            ("-inf in b", false, n / 2, f64::NEG_INFINITY),
        ];
        for strategy in Strategy::ALL {
            for start in [Method::Ldlt, Method::HouseholderPcr] {
                if start != Method::Ldlt && strategy != Strategy::Escalating {
                    continue;
                }
                let params = SolverParams::default();
                let base = solve_raw(n, &clean.a, &clean.b, strategy, &params, start, T::NAN);
                chk.ensure(
                    base.reports
                        .iter()
                        .all(|r| r.status == Status::Ok && r.residual >= 0.0),
                    &format!("{} {strategy} n={n} clean batch", T::NAME),
                    || format!("{:?}", base.reports),
                );
                // The strict upper triangle is not read: NaN there or the symmetric values
                // give the same bits.
                let mut full = Batch::<T>::new(n, Vec::new());
                full.mats = clean.mats.clone();
                full.rhs = clean.rhs.clone();
                full.pack(true);
                let sym = solve_raw(n, &full.a, &full.b, strategy, &params, start, T::NAN);
                chk.ensure(
                    bits(&sym.x) == bits(&base.x)
                        && sym
                            .reports
                            .iter()
                            .zip(&base.reports)
                            .all(|(p, q)| same_report(p, q)),
                    &format!("{} {strategy} n={n}", T::NAME),
                    || "results depend on the strict upper triangle".into(),
                );
                for &(what, in_a, pos, value) in &corruptions {
                    let case = format!("{what} {} {strategy} start {start:?} n={n}", T::NAME);
                    let (mut a, mut b) = (clean.a.clone(), clean.b.clone());
                    if in_a {
                        a[bad * n * n + pos] = T::from_f64(value);
                    } else {
                        b[bad * n + pos] = T::from_f64(value);
                    }
                    // Finite poison: the NaN of the bad system must be written.
                    let out = solve_raw(n, &a, &b, strategy, &params, start, T::from_f64(0.5));
                    let rep = &out.reports[bad];
                    chk.ensure(
                        rep.status == Status::NonFiniteInput
                            && rep.method == first_method(strategy, start)
                            && rep.residual.is_nan()
                            && rep.discarded == 0,
                        &case,
                        || format!("bad system's report {rep:?}"),
                    );
                    chk.ensure(out.x(bad, n).iter().all(|v| v.is_nan()), &case, || {
                        format!("bad system's x is not all NaN: {:?}", out.x(bad, n))
                    });
                    for i in (0..clean.len()).filter(|&i| i != bad) {
                        chk.ensure(
                            bits(out.x(i, n)) == bits(base.x(i, n))
                                && same_report(&out.reports[i], &base.reports[i]),
                            &case,
                            || format!("system {i} changed"),
                        );
                    }
                    check_summary(
                        chk,
                        &case,
                        &out.reports,
                        &out.summary,
                        start,
                        SolverParams::default().memory_fraction,
                    );
                    chk.ensure(
                        out.summary.per_status[Status::NonFiniteInput as usize] == 1,
                        &case,
                        || format!("summary {:?}", out.summary),
                    );
                }
            }
        }
    }
}

test_both_precisions! {
    /// A NaN or an infinity in one system's matrix (lower triangle) or right-hand side: that
    /// system is reported `NonFiniteInput` with NaN `x`, every other system's `x` and report
    /// are bitwise those of a run without the bad value; and the strict upper triangle
    /// (NaN vs the symmetric values) changes nothing.
    non_finite_input_is_isolated => non_finite_for
}

// ---------------------------------------------------------------------------------------
// Escalation memory rule
// ---------------------------------------------------------------------------------------

/// Kind of system in a memory-rule batch.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// SPD: `L D L^T` succeeds.
    Spd,
    /// Diagonal with both signs: `L D L^T` fails, Householder + PCR is exact.
    SignedDiagonal,
    /// `diag(S, 0)` with `b` not in the range: only divide and conquer (with truncation).
    Singular,
}

fn memory_batch<T: Real>(n: usize, kinds: &[Kind], seed: u64) -> Batch<T> {
    let mut rng = rng_for::<T>(11, n, seed);
    let systems = kinds
        .iter()
        .map(|k| match k {
            Kind::Spd => (random_spd(n, 1e2, &mut rng), gaussian_vec(n, &mut rng)),
            Kind::SignedDiagonal => (
                Mat::from_fn(n, n, |i, j| {
                    if i != j {
                        0.0
                    } else if i % 2 == 0 {
                        -2.0
                    } else {
                        1.0
                    }
                }),
                gaussian_vec(n, &mut rng),
            ),
            Kind::Singular => zero_block_singular(n, n / 2, false, &mut rng),
        })
        .collect();
    Batch::new(n, systems)
}

/// `spd` SPD systems, then `diag` signed diagonal ones, then `sing` singular ones,
/// interleaved deterministically.
fn kinds(spd: usize, diag: usize, sing: usize) -> Vec<Kind> {
    let mut k = vec![Kind::Spd; spd];
    for (j, kind) in std::iter::repeat_n(Kind::SignedDiagonal, diag)
        .chain(std::iter::repeat_n(Kind::Singular, sing))
        .enumerate()
    {
        let at = (j * 37 + 11) % (k.len() + 1);
        k.insert(at, kind);
    }
    k
}

fn memory_rule_for<T: Real>(chk: &mut Checker) {
    let n = 16;
    let escalating = Strategy::Escalating;
    // (spd, signed diagonal, singular, memory_fraction, start, expected next_start)
    let cases: [(usize, usize, usize, f64, Method, Method); 9] = [
        (198, 0, 2, 0.01, Method::Ldlt, Method::DivideConquer),
        (199, 0, 1, 0.01, Method::Ldlt, Method::Ldlt),
        (197, 2, 1, 0.01, Method::Ldlt, Method::HouseholderPcr),
        (196, 2, 2, 0.01, Method::Ldlt, Method::DivideConquer),
        (49, 0, 1, 0.01, Method::Ldlt, Method::DivideConquer),
        (198, 0, 2, 0.5, Method::Ldlt, Method::Ldlt),
        (
            200,
            0,
            0,
            0.01,
            Method::HouseholderPcr,
            Method::HouseholderPcr,
        ),
        (
            198,
            0,
            2,
            0.01,
            Method::HouseholderPcr,
            Method::DivideConquer,
        ),
        (
            100,
            0,
            0,
            0.01,
            Method::DivideConquer,
            Method::DivideConquer,
        ),
    ];
    for (c, &(spd, diag, sing, fraction, start, expected)) in cases.iter().enumerate() {
        let ks = kinds(spd, diag, sing);
        let batch = memory_batch::<T>(n, &ks, c as u64);
        let params = SolverParams {
            memory_fraction: fraction,
            ..SolverParams::default()
        };
        let out = solve_raw(n, &batch.a, &batch.b, escalating, &params, start, T::NAN);
        let case = format!(
            "{} spd={spd} diag={diag} singular={sing} fraction={fraction} start={start:?}",
            T::NAME
        );
        check_summary(chk, &case, &out.reports, &out.summary, start, fraction);
        chk.ensure(out.summary.next_start == expected, &case, || {
            format!(
                "next_start {:?}, expected {expected:?}",
                out.summary.next_start
            )
        });
        for (i, (rep, kind)) in out.reports.iter().zip(&ks).enumerate() {
            let method = match kind {
                Kind::Spd => Method::Ldlt,
                Kind::SignedDiagonal => Method::HouseholderPcr,
                Kind::Singular => Method::DivideConquer,
            }
            .max(start);
            chk.ensure(
                rep.status == Status::Ok && rep.method == method,
                &format!("{case} system {i}"),
                || format!("expected ok by {method:?}: {rep:?}"),
            );
        }
    }
    // The other strategies ignore `start`.
    let batch = memory_batch::<T>(n, &kinds(30, 0, 0), 99);
    for strategy in [
        Strategy::Ldlt,
        Strategy::HouseholderPcr,
        Strategy::DivideConquer,
    ] {
        let out = solve(&batch, strategy, Method::DivideConquer, T::NAN);
        let case = format!("{} {strategy} with start DivideConquer", T::NAME);
        chk.ensure(
            out.reports.iter().all(|r| r.method == spd_method(strategy)),
            &case,
            || "start was not ignored".into(),
        );
        check_summary(chk, &case, &out.reports, &out.summary, Method::Ldlt, 0.01);
    }
    // merge: counts add up, the higher next_start wins.
    let a = solve(
        &memory_batch::<T>(n, &kinds(40, 0, 60), 7),
        escalating,
        Method::Ldlt,
        T::NAN,
    );
    let b = solve(
        &memory_batch::<T>(n, &kinds(50, 0, 0), 8),
        escalating,
        Method::Ldlt,
        T::NAN,
    );
    let mut m = b.summary.clone();
    m.merge(&a.summary);
    let mut per_method = [0; 3];
    let mut per_status = [0; 4];
    let mut discarded = 0;
    for r in b.reports.iter().chain(&a.reports) {
        per_method[r.method as usize] += 1;
        per_status[r.status as usize] += 1;
        discarded += r.discarded as usize;
    }
    let case = format!("{} merge", T::NAME);
    chk.ensure(
        m.systems == 150
            && m.per_method == per_method
            && m.per_status == per_status
            && m.discarded_eigenvalues == discarded
            && m.next_start == a.summary.next_start.max(b.summary.next_start)
            && a.summary.next_start == Method::DivideConquer
            && m.max_residual == a.summary.max_residual.max(b.summary.max_residual),
        &case,
        || format!("merged {m:?} from {:?} and {:?}", a.summary, b.summary),
    );
}

test_both_precisions! {
    /// The escalation memory rule ([`BatchSummary::next_start`]): the next batch starts at
    /// the highest level reached by at least `memory_fraction` of the systems (at least one
    /// system), never below the start; starting above `L D L^T` never reports
    /// `Method::Ldlt`; the other strategies ignore `start`; `merge` adds counts.
    escalation_memory_rule => memory_rule_for
}

// ---------------------------------------------------------------------------------------
// Thread independence
// ---------------------------------------------------------------------------------------

fn threads_for<T: Real>(chk: &mut Checker) {
    let pool = |k: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .expect("rayon pool")
    };
    let (one, three) = (pool(1), pool(3));
    for (n, count) in [(7, 300), (33, 60), (64, 24)] {
        let mut rng = rng_for::<T>(12, n, 0);
        let systems: Vec<_> = (0..count)
            .map(|i| match i % 4 {
                0 | 1 => (random_spd(n, 1e3, &mut rng), gaussian_vec(n, &mut rng)),
                2 => (random_indefinite(n, &mut rng), gaussian_vec(n, &mut rng)),
                _ => singular_psd(n, n / 2, i % 8 == 3, &mut rng),
            })
            .collect();
        let mut batch = Batch::<T>::new(n, systems);
        batch.a[3 * n * n] = T::NAN;
        for strategy in Strategy::ALL {
            let run = || solve(&batch, strategy, Method::Ldlt, T::NAN);
            let p = one.install(run);
            let q = three.install(run);
            let r = run();
            let case = format!("{} {strategy} n={n}", T::NAME);
            for other in [&q, &r] {
                chk.ensure(
                    bits(&p.x) == bits(&other.x)
                        && p.reports.len() == other.reports.len()
                        && p.reports
                            .iter()
                            .zip(&other.reports)
                            .all(|(u, v)| same_report(u, v))
                        && p.summary.per_method == other.summary.per_method
                        && p.summary.next_start == other.summary.next_start
                        && p.summary.max_residual.to_bits() == other.summary.max_residual.to_bits(),
                    &case,
                    || "results depend on the number of threads".into(),
                );
            }
            chk.ensure(p.reports[3].status == Status::NonFiniteInput, &case, || {
                format!("{:?}", p.reports[3])
            });
        }
    }
}

test_both_precisions! {
    /// A mixed batch (SPD, indefinite, singular, one NaN) spanning several rayon tasks gives
    /// bitwise identical solutions, reports and summaries in a 1-thread pool, a 3-thread pool
    /// and the global pool.
    results_independent_of_thread_count => threads_for
}
