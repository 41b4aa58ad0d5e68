//! Tests of [`gj2_solve`] and [`gj2_solve_checked`] (block `L D L^T` with `2 x 2` pivots
//! in Gauss-Jordan form, `f64`), against faer in `f64` as the independent reference.
//!
//! Every matrix is passed as its lower triangle only: the strict upper triangle of every
//! input buffer is NaN (the layout says it is never read). Before each call `x` is
//! poisoned with NaN, so an entry the solver did not write shows. The worst ratio of every
//! check is printed (`cargo test --release -p cva-kernels --test gj2 -- --nocapture`).
//!
//! `eps = f64::EPSILON`, `n` the system size, norms are `∞`-norms, `κ` the 2-norm
//! condition number (faer's eigenvalues).
//!
//! | check | scaled quantity | bound |
//! |---|---|---|
//! | residual | `‖A x − b‖ / ((‖A‖ ‖x‖ + ‖b‖) n eps)`, recomputed in `f64` | 16 |
//! | acceptance | `gj2_solve_checked(..).accepted` with the default [`SolverParams`] | — |
//! | forward error | `‖x − x_faer‖ / (‖x_faer‖ n eps κ)` | 30 |
//! | graded, regression Gram | `‖D (x − x_faer)‖ / (‖D x_faer‖ n eps κ(D^-1 A D^-1))` | 30 |
//! | accepted, `κ` up to `10^12` | `‖x − x_faer‖ / ‖x_faer‖` | `2.5 tol κ_∞ + 30 n eps κ` |
//!
//! Why these bounds: the residual bound is the solver's acceptance tolerance `16 n eps`
//! ([`SolverParams::tolerance`]), which the GPU solver must meet on the SPD systems it is
//! meant for. A backward error `c n eps` moves the solution by at most `c n eps κ`
//! (relative), and faer's LU has an error of the same order, so the distance between the
//! two is bounded by a constant times `n eps κ` (the same constant 30 as the tests of the
//! batched solvers). For graded matrices `D A D` (`D` powers of two, `A` with unit
//! diagonal), elimination without pivoting on an SPD matrix is scale invariant up to
//! rounding, so the error of `D x` is bounded with the condition number of the
//! equilibrated `A`, not of `D A D` (`D`: the grading, or for the regression Gram matrices
//! the powers of two nearest `sqrt(a_ii)`).
//!
//! Gauss-Jordan elimination is not backward stable: its residual grows with `κ` (beyond
//! `κ ~ 10^4` some systems exceed the tolerance), so the random SPD families that must be
//! accepted are kept moderately conditioned after equilibration, and the ill-conditioned
//! regime is covered by [`ill_conditioned_spd_accepted_only_when_accurate`]: there an
//! accepted solution must be as accurate as its residual `η <= tol` guarantees
//! (`‖x − x*‖ <= η κ_∞ (‖x‖ + ‖x*‖)`).

use cva_kernels::batch::{residual_check, ResidualCheck};
use cva_kernels::gj2::{gj2_solve, gj2_solve_checked, Gj2Report};
use cva_kernels::SolverParams;
use faer::prelude::*;
use faer::Mat;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod linalg;
use linalg::*;

const SIZES: [usize; 6] = [2, 4, 8, 16, 30, 62];
/// Recomputed relative residual / (n eps): the acceptance tolerance `16 n eps`.
const RESIDUAL_BOUND: f64 = 16.0;
/// Forward error / (n eps κ).
const FORWARD_BOUND: f64 = 30.0;
/// Random systems per size and family.
const REPEATS: usize = 25;
const EPS: f64 = f64::EPSILON;

// ---------------------------------------------------------------------------------------
// Helpers (f64)
// ---------------------------------------------------------------------------------------

/// 2-norm condition number of a symmetric matrix, from faer's eigenvalues.
fn kappa2(a: &Mat<f64>) -> f64 {
    cond2(&eigen(a).0)
}

/// Column-major buffer of the lower triangle of `a`, the strict upper triangle `upper`.
fn lower(a: &Mat<f64>, upper: f64) -> Vec<f64> {
    let n = a.nrows();
    let mut out = vec![upper; n * n];
    for c in 0..n {
        for r in c..n {
            out[r + c * n] = a[(r, c)];
        }
    }
    out
}

/// The symmetric matrix of the lower triangle of `a`.
fn symmetrize(a: &Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| a[(i.max(j), i.min(j))])
}

/// [`gj2_solve_checked`] with the default parameters on `a` (upper triangle NaN), `x`
/// poisoned with NaN first.
fn solve_checked(a: &Mat<f64>, b: &[f64]) -> (Vec<f64>, Gj2Report) {
    let n = a.nrows();
    let buf = lower(a, f64::NAN);
    let mut x = vec![f64::NAN; n];
    let rep = gj2_solve_checked(n, &buf, b, &mut x, &SolverParams::default());
    (x, rep)
}

/// The first check of level 0's rule (see [`gj2_solve_checked`], default parameters) that
/// rejects the system of size `n` reported by `r`: a non-positive pivot, the pivot ratio
/// or the growth beyond the escalation condition, or a residual above the tolerance (or
/// NaN); `None` when it passes them all.
fn rejection_reason(n: usize, r: &Gj2Report) -> Option<&'static str> {
    let params = SolverParams::default();
    let threshold = params.escalation_condition::<f64>();
    if !r.positive_pivots {
        Some("non-positive pivot")
    } else if r.pivot_ratio * threshold < 1.0 {
        Some("pivot ratio")
    } else if r.growth > threshold {
        Some("growth")
    } else if r.residual.is_nan() || r.residual > params.tolerance::<f64>(n) {
        Some("residual")
    } else {
        None
    }
}

/// `r` is rejected as not positive definite: no positive pivots, not accepted, NaN pivot
/// ratio.
fn assert_not_positive_definite(case: &str, r: &Gj2Report) {
    assert!(
        !r.positive_pivots && !r.accepted && r.pivot_ratio.is_nan(),
        "{case}: {r:?}"
    );
}

fn rng_for(test: u64, n: usize, variant: u64) -> StdRng {
    StdRng::seed_from_u64(test * 100_000_007 + n as u64 * 1_009 + variant)
}

/// `repeats` systems `(A, b) = family(n, rng)` of every size `n` in [`SIZES`], drawn from
/// [`rng_for`]`(test, n, 0)`, each as `(n, case name "{name} n={n} #{rep}", A, b)`.
fn random_systems(
    test: u64,
    name: &str,
    repeats: usize,
    family: impl Fn(usize, &mut StdRng) -> (Mat<f64>, Vec<f64>),
) -> Vec<(usize, String, Mat<f64>, Vec<f64>)> {
    let mut out = Vec::new();
    for n in SIZES {
        let mut rng = rng_for(test, n, 0);
        for rep in 0..repeats {
            let (a, b) = family(n, &mut rng);
            out.push((n, format!("{name} n={n} #{rep}"), a, b));
        }
    }
    out
}

/// `F^T F / m` for the `m x n` matrix `f` (exactly symmetric: only `i >= j` is computed).
fn gram(f: &Mat<f64>) -> Mat<f64> {
    let (m, n) = (f.nrows(), f.ncols());
    let low = Mat::from_fn(n, n, |i, j| {
        if i < j {
            0.0
        } else {
            (0..m).map(|s| f[(s, i)] * f[(s, j)]).sum::<f64>() / m as f64
        }
    });
    symmetrize(&low)
}

/// `G^T G / m + δ I`, `G` Gaussian `m x n` with `m` in `[n, 3n]`, `δ` log-uniform in
/// `[1e-6, 1e-2]`.
fn gaussian_gram(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let m = rng.random_range(n..=3 * n);
    let g = Mat::from_fn(m, n, |_, _| gaussian(rng));
    let delta = 10f64.powf(-2.0 - 4.0 * rng.random::<f64>());
    let a = gram(&g);
    Mat::from_fn(
        n,
        n,
        |i, j| if i == j { a[(i, j)] + delta } else { a[(i, j)] },
    )
}

/// A [`gaussian_gram`] matrix with a Gaussian `b`.
fn gaussian_gram_system(n: usize, rng: &mut StdRng) -> (Mat<f64>, Vec<f64>) {
    (gaussian_gram(n, rng), gaussian_vec(n, rng))
}

/// The Gram matrix `F^T F / m` of a regression on the features `[1, s_1, .., s_{n-1}]`:
/// `m` in `[2n, 8n]` samples, `s_k = μ_k + σ_k g_k` with scales `σ_k` over four decimal
/// orders, means `|μ_k| <= 2 σ_k` (a mean much larger than the spread would make the
/// feature nearly collinear with the constant) and correlated `g_k` (an AR(1) chain over
/// `k`, correlation up to 0.9).
fn regression_gram(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let m = rng.random_range(2 * n..=8 * n);
    let sigma: Vec<f64> = (0..n)
        .map(|_| 10f64.powf(4.0 * rng.random::<f64>() - 2.0))
        .collect();
    let mu: Vec<f64> = sigma
        .iter()
        .map(|s| s * 2.0 * (2.0 * rng.random::<f64>() - 1.0))
        .collect();
    // Correlation: each feature mixes its own Gaussian with the previous feature's.
    let rho: f64 = 0.9 * rng.random::<f64>();
    let mut f = Mat::<f64>::zeros(m, n);
    for s in 0..m {
        let mut prev = gaussian(rng);
        f[(s, 0)] = 1.0;
        for k in 1..n {
            let g = rho * prev + (1.0 - rho * rho).sqrt() * gaussian(rng);
            prev = g;
            f[(s, k)] = mu[k] + sigma[k] * g;
        }
    }
    gram(&f)
}

/// Largest ratios seen, printed at the end of a test.
#[derive(Default)]
struct Worst(Vec<(&'static str, f64, String)>);

impl Worst {
    fn record(&mut self, what: &'static str, value: f64, case: &str, bound: f64) {
        assert!(
            value <= bound,
            "{case}: {what} = {value:e} exceeds the bound {bound}"
        );
        match self.0.iter_mut().find(|(w, _, _)| *w == what) {
            Some(e) if value > e.1 => {
                e.1 = value;
                e.2 = case.to_string();
            }
            Some(_) => {}
            None => self.0.push((what, value, case.to_string())),
        }
    }

    fn print(&self) {
        for (what, value, case) in &self.0 {
            println!("worst {what}: {value:.3e} ({case})");
        }
    }
}

/// `κ_∞(A) = ‖A‖ ‖A^-1‖` (the inverse by faer's LU).
fn cond_inf(a: &Mat<f64>) -> f64 {
    let n = a.nrows();
    let inv = a.partial_piv_lu().solve(Mat::<f64>::identity(n, n));
    mat_norm_inf(a) * mat_norm_inf(&inv)
}

/// The powers of two nearest `sqrt(a_ii)`: `D^-1 A D^-1` has a diagonal in `[1/2, 2]` and
/// is formed exactly.
fn pow2_scaling(a: &Mat<f64>) -> Vec<f64> {
    (0..a.nrows())
        .map(|i| 2f64.powi(a[(i, i)].sqrt().log2().round() as i32))
        .collect()
}

/// Forward error of the equilibrated unknowns: `‖D (x − x_ref)‖ / ‖D x_ref‖` with `x_ref`
/// from faer's solve of the equilibrated system `(D^-1 A D^-1) (D x) = D^-1 b`, and the
/// condition number `κ_2(D^-1 A D^-1)` that bounds it.
fn equilibrated_error(a: &Mat<f64>, b: &[f64], x: &[f64], d: &[f64]) -> (f64, f64) {
    let n = a.nrows();
    let eq = Mat::from_fn(n, n, |i, j| a[(i, j)] / (d[i] * d[j]));
    let db: Vec<f64> = b.iter().zip(d).map(|(p, q)| p / q).collect();
    let y_ref = faer_solve(&eq, &db);
    let y: Vec<f64> = x.iter().zip(d).map(|(p, q)| p * q).collect();
    (forward_error(&y, &y_ref), kappa2(&eq))
}

/// The checks of an SPD system that must be accepted: acceptance, recomputed residual
/// and forward error against faer, normwise with `κ_2(A)` or, when `equilibrated`, of
/// `D x` with `κ_2(D^-1 A D^-1)` ([`equilibrated_error`], `D` from [`pow2_scaling`]).
/// Returns `κ_2(A)`.
fn check_spd(worst: &mut Worst, case: &str, a: &Mat<f64>, b: &[f64], equilibrated: bool) -> f64 {
    let n = a.nrows();
    let nf = n as f64;
    let (x, rep) = solve_checked(a, b);
    assert!(
        x.iter().all(|v| v.is_finite()),
        "{case}: non-finite x {x:?}"
    );
    assert!(rep.positive_pivots, "{case}: pivots not positive: {rep:?}");
    assert!(
        rep.pivot_ratio > 0.0 && rep.pivot_ratio <= 1.0,
        "{case}: pivot ratio {rep:?}"
    );
    let tol = SolverParams::default().tolerance::<f64>(n);
    assert!(
        rep.accepted && rep.residual <= tol,
        "{case}: not accepted (tol {tol:e}): {rep:?}"
    );
    let kappa = kappa2(a);
    worst.record(
        "residual / (n eps)",
        relative_residual(a, b, &x) / (nf * EPS),
        case,
        RESIDUAL_BOUND,
    );
    if equilibrated {
        let (err, kappa_eq) = equilibrated_error(a, b, &x, &pow2_scaling(a));
        worst.record(
            "forward error of D x / (n eps κ(D^-1 A D^-1))",
            err / (nf * EPS * kappa_eq),
            case,
            FORWARD_BOUND,
        );
    } else {
        let x_ref = faer_solve(a, b);
        worst.record(
            "forward error / (n eps κ)",
            forward_error(&x, &x_ref) / (nf * EPS * kappa),
            case,
            FORWARD_BOUND,
        );
    }
    kappa
}

// ---------------------------------------------------------------------------------------
// Random SPD systems
// ---------------------------------------------------------------------------------------

/// [`check_spd`] on the [`random_systems`]`(test, name, REPEATS, family)`; prints the
/// largest `κ_2(A)` and the worst ratios.
fn spd_family_matches_faer(
    test: u64,
    name: &str,
    equilibrated: bool,
    family: impl Fn(usize, &mut StdRng) -> (Mat<f64>, Vec<f64>),
) {
    let mut worst = Worst::default();
    let mut kappa_max = 0.0f64;
    for (_, case, a, b) in random_systems(test, name, REPEATS, family) {
        kappa_max = kappa_max.max(check_spd(&mut worst, &case, &a, &b, equilibrated));
    }
    println!("largest κ: {kappa_max:.3e}");
    worst.print();
}

/// Gaussian Gram matrices `G^T G / m + δ I` (`m` in `[n, 3n]`), Gaussian `b`: accepted,
/// residual under `16 n eps`, forward error under `30 n eps κ`.
#[test]
fn random_gaussian_gram_matches_faer() {
    spd_family_matches_faer(1, "gaussian gram", false, gaussian_gram_system);
}

/// Regression Gram matrices of the features `[1, s_1, .., s_{n-1}]` (means, scales over
/// four orders, so `κ(A)` up to ~`10^10`, correlated features), `b_i = sqrt(a_ii) g_i`
/// (scaled like `F^T y / m`): accepted, residual under `16 n eps`, forward error of the
/// equilibrated unknowns `D x` under `30 n eps κ(D^-1 A D^-1)`.
#[test]
fn random_regression_gram_matches_faer() {
    spd_family_matches_faer(2, "regression gram", true, |n, rng| {
        let a = regression_gram(n, rng);
        let b = (0..n).map(|i| a[(i, i)].sqrt() * gaussian(rng)).collect();
        (a, b)
    });
}

/// SPD matrices of a prescribed spectrum (random eigenvectors, scaled by a random power of
/// two), `κ` log-uniform in `[1, 10^3]`, Gaussian `b`: accepted, residual under `16 n eps`, forward error under
/// `30 n eps κ`. (Gauss-Jordan is not backward stable: beyond `κ ~ 10^4` its residual
/// exceeds the tolerance on some systems, see
/// [`ill_conditioned_spd_accepted_only_when_accurate`].)
#[test]
fn random_spectrum_spd_matches_faer() {
    spd_family_matches_faer(3, "spectrum spd", false, |n, rng| {
        (random_spd(n, 1e3, rng), gaussian_vec(n, rng))
    });
}

/// SPD matrices of a prescribed spectrum with `κ` log-uniform in `[10^3, 10^12]`: the
/// residual of Gauss-Jordan grows with `κ`, so many are rejected (the counts per decade
/// of `κ` are printed), but an accepted solution is as accurate as its residual
/// guarantees: with `η = ‖A x − b‖ / (‖A‖ ‖x‖ + ‖b‖) <= tol`,
/// `‖x − x*‖ <= η κ_∞ (‖x‖ + ‖x*‖)`, so the forward error against faer is bounded by
/// `2.5 tol κ_∞ + 30 n eps κ_2` (the second term for faer's own error). A rejected
/// system must have a non-positive pivot, a pivot ratio or growth beyond the escalation
/// condition, or a residual above the tolerance (checked from the report).
#[test]
fn ill_conditioned_spd_accepted_only_when_accurate() {
    let params = SolverParams::default();
    for n in SIZES {
        let nf = n as f64;
        let tol = params.tolerance::<f64>(n);
        let mut rng = rng_for(13, n, 0);
        // (systems, accepted) per decade of κ_2, 10^3 .. 10^12.
        let mut counts = [(0usize, 0usize); 10];
        for rep in 0..4 * REPEATS {
            let cond = 1e3 * 1e9f64.powf(rng.random::<f64>());
            let lambda: Vec<f64> = (0..n)
                .map(|i| match i {
                    0 => 1.0,
                    1 => 1.0 / cond,
                    _ => cond.powf(-rng.random::<f64>()),
                })
                .collect();
            let a = from_spectrum(&lambda, &mut rng);
            let b = gaussian_vec(n, &mut rng);
            let case = format!("ill-conditioned spd n={n} #{rep}");
            let (x, r) = solve_checked(&a, &b);
            let kappa = kappa2(&a);
            let decade = (kappa.log10().floor() as usize).clamp(3, 12) - 3;
            counts[decade].0 += 1;
            if r.accepted {
                counts[decade].1 += 1;
                let err = forward_error(&x, &faer_solve(&a, &b));
                let bound = 2.5 * tol * cond_inf(&a) + FORWARD_BOUND * nf * EPS * kappa;
                assert!(
                    err <= bound,
                    "{case}: accepted with forward error {err:e} > {bound:e}: {r:?}"
                );
            } else {
                assert!(
                    rejection_reason(n, &r).is_some(),
                    "{case}: rejected for no reason: {r:?}"
                );
            }
        }
        let line: Vec<String> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| c.0 > 0)
            .map(|(d, c)| format!("1e{}: {}/{}", d + 3, c.1, c.0))
            .collect();
        println!("n={n} accepted per decade of κ: {}", line.join(", "));
    }
}

// ---------------------------------------------------------------------------------------
// Exact results
// ---------------------------------------------------------------------------------------

/// For `n = 2` (one pivot block, no elimination) `x` is the block's inverse, formed as the
/// GPU does, times `b`, bit for bit; it is also Cramer's rule to a few ulps.
#[test]
fn n2_closed_form() {
    let mut rng = rng_for(4, 2, 0);
    for rep in 0..200 {
        let a00 = 0.1 + rng.random::<f64>();
        let a11 = 0.1 + rng.random::<f64>();
        let a10 = 0.99 * (a00 * a11).sqrt() * (2.0 * rng.random::<f64>() - 1.0);
        let b = [gaussian(&mut rng), gaussian(&mut rng)];
        let a = [a00, a10, f64::NAN, a11];
        let mut x = [f64::NAN; 2];
        let (good, ratio) = gj2_solve(2, &a, &b, &mut x);

        let det = a00.mul_add(a11, -(a10 * a10));
        let rdet = 1.0 / det;
        let (i00, i01, i11) = (a11 * rdet, -a10 * rdet, a00 * rdet);
        let expect = [i00.mul_add(b[0], i01 * b[1]), i01.mul_add(b[0], i11 * b[1])];
        assert!(good, "#{rep}: pivots not positive");
        assert_eq!(
            x.map(f64::to_bits),
            expect.map(f64::to_bits),
            "#{rep}: x = {x:?}, closed form {expect:?}"
        );
        // Pivots D_0 = a00 (ratio 1), D_1 = det / a00.
        assert_eq!(ratio, 1.0f64.min((det / a00) / a11), "#{rep}: ratio");
        // Cramer's rule, independently.
        let cramer = [
            (a11 * b[0] - a10 * b[1]) / (a00 * a11 - a10 * a10),
            (a00 * b[1] - a10 * b[0]) / (a00 * a11 - a10 * a10),
        ];
        let kappa = kappa2(&Mat::from_fn(2, 2, |i, j| [[a00, a10], [a10, a11]][i][j]));
        let err = forward_error(&x, &cramer);
        assert!(
            err <= 16.0 * EPS * kappa,
            "#{rep}: x = {x:?}, Cramer {cramer:?}, error {err:e}, κ {kappa:e}"
        );
    }
}

/// The identity: every multiplier is zero and every inverse block the identity, so
/// `x == b` exactly, with pivot ratio 1.
#[test]
fn identity_gives_b_exactly() {
    let family = |n, rng: &mut StdRng| {
        let mut b = gaussian_vec(n, rng);
        b[0] = 0.0;
        (Mat::<f64>::identity(n, n), b)
    };
    for (_, case, a, b) in random_systems(5, "identity", 1, family) {
        let (x, rep) = solve_checked(&a, &b);
        assert_eq!(x, b, "{case}");
        assert!(rep.positive_pivots && rep.accepted, "{case}: {rep:?}");
        assert_eq!(rep.pivot_ratio, 1.0, "{case}");
        assert_eq!(rep.residual, 0.0, "{case}");
    }
}

/// The strict upper triangle is never read: NaN, random garbage or the true symmetric
/// values there give the same bits.
#[test]
fn upper_triangle_not_read() {
    for (n, case, a, b) in random_systems(6, "gaussian gram", 1, gaussian_gram_system) {
        let mut results = Vec::new();
        let garbage = 1e300 * gaussian(&mut rng_for(6, n, 1));
        for upper in [f64::NAN, f64::INFINITY, garbage] {
            let buf = lower(&a, upper);
            let mut x = vec![f64::NAN; n];
            let out = gj2_solve(n, &buf, &b, &mut x);
            results.push((x, out));
        }
        // The full symmetric matrix.
        let full: Vec<f64> = (0..n * n).map(|e| a[(e % n, e / n)]).collect();
        let mut x = vec![f64::NAN; n];
        let out = gj2_solve(n, &full, &b, &mut x);
        results.push((x, out));
        let bits = |(x, (g, r)): &(Vec<f64>, (bool, f64))| {
            (
                x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                *g,
                r.to_bits(),
            )
        };
        let first = bits(&results[0]);
        assert!(first.1, "{case}: pivots not positive");
        assert!(results[0].0.iter().all(|v| v.is_finite()), "{case}");
        for r in &results[1..] {
            assert_eq!(
                bits(r),
                first,
                "{case}: result depends on the upper triangle"
            );
        }
    }
}

/// The report's residual and growth (product-form test, `(A x)_i` in two sums) are
/// [`residual_check`]'s up to rounding: the residuals within `4 (n + 2) eps` of each other
/// (each `r_i` is off by at most about `(n + 2) eps` times the denominator), the growths
/// within `8 eps` relative; NaN together.
fn assert_close_to_residual_check(case: &str, n: usize, check: &ResidualCheck, rep: &Gj2Report) {
    if check.residual.is_nan() {
        assert!(
            rep.residual.is_nan() && rep.growth.is_nan(),
            "{case}: {check:?} {rep:?}"
        );
        return;
    }
    let bound = 4.0 * (n + 2) as f64 * EPS;
    assert!(
        (check.residual - rep.residual).abs() <= bound,
        "{case}: residual {} against residual_check's {}",
        rep.residual,
        check.residual
    );
    assert!(
        (check.growth - rep.growth).abs() <= 8.0 * EPS * check.growth,
        "{case}: growth {} against residual_check's {}",
        rep.growth,
        check.growth
    );
}

/// `gj2_solve_checked` is `gj2_solve`, then level 0's rule in product form; longer
/// slices than `n` are fine and only their first `n` entries are used or written.
#[test]
fn checked_matches_unchecked_and_rule() {
    let params = SolverParams::default();
    let family = |n, rng: &mut StdRng| (regression_gram(n, rng), gaussian_vec(n, rng));
    for (n, case, a, b) in random_systems(7, "regression gram", 1, family) {
        let mut buf = lower(&a, f64::NAN);
        buf.extend([f64::NAN; 5]);
        let mut b_long = b.clone();
        b_long.push(f64::NAN);
        let mut x1 = vec![f64::NAN; n + 3];
        x1[n..].fill(7.0);
        let (good, ratio) = gj2_solve(n, &buf, &b_long, &mut x1);
        assert_eq!(&x1[n..], &[7.0; 3], "{case}: wrote past x[n-1]");
        let mut x2 = vec![f64::NAN; n];
        let rep = gj2_solve_checked(n, &buf, &b, &mut x2, &params);
        assert_eq!(
            x1[..n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            x2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{case}"
        );
        assert_eq!(
            (good, ratio.to_bits()),
            (rep.positive_pivots, rep.pivot_ratio.to_bits())
        );
        let check = residual_check(n, &buf, &b, &x2);
        assert_close_to_residual_check(&case, n, &check, &rep);
        // The product form decides as residual_check's quotients do (away from boundaries).
        assert_eq!(
            rep.accepted,
            rejection_reason(n, &rep).is_none(),
            "{case}: {rep:?}"
        );
        // A tight residual tolerance and escalation condition reject the same system.
        let strict = SolverParams {
            residual_tolerance: Some(0.0),
            ..params
        };
        let mut x3 = vec![f64::NAN; n];
        let rep3 = gj2_solve_checked(n, &buf, &b, &mut x3, &strict);
        assert_eq!(rep3.accepted, rep.residual == 0.0 && rep.accepted, "{case}");
        let cond = SolverParams {
            escalation_condition: Some(0.5 / rep.pivot_ratio),
            ..params
        };
        let rep4 = gj2_solve_checked(n, &buf, &b, &mut x3, &cond);
        assert!(
            !rep4.accepted,
            "{case}: pivot ratio {} accepted at threshold {}",
            rep.pivot_ratio,
            0.5 / rep.pivot_ratio
        );
    }
}

// ---------------------------------------------------------------------------------------
// Hard cases
// ---------------------------------------------------------------------------------------

/// Random indefinite nonsingular matrices (`|λ|` in `[0.01, 1]`, both signs): some pivot
/// block is not positive definite (Sylvester's law of inertia), so they are rejected with
/// `positive_pivots == false` and a NaN pivot ratio, without panicking.
#[test]
fn indefinite_rejected() {
    let family = |n, rng: &mut StdRng| (random_indefinite(n, rng), gaussian_vec(n, rng));
    for (_, case, a, b) in random_systems(8, "indefinite", REPEATS, family) {
        let (_, r) = solve_checked(&a, &b);
        assert_not_positive_definite(&case, &r);
    }
}

/// Singular Gram matrices (regression features with two equal columns, so two equal rows
/// and columns in `A`, bit for bit): never accepted. Which check rejects them (a
/// non-positive pivot, the pivot ratio, the growth or the residual) is printed.
#[test]
fn singular_gram_rejected() {
    for n in SIZES {
        let mut rng = rng_for(9, n, 0);
        for rep in 0..REPEATS {
            let m = 4 * n;
            let mut f = Mat::from_fn(m, n, |_, k| if k == 0 { 1.0 } else { gaussian(&mut rng) });
            // Column q duplicates column p (for n = 2: the constant column).
            let (p, q) = if n == 2 {
                (0, 1)
            } else {
                let p = rng.random_range(0..n - 1);
                (p, rng.random_range(p + 1..n))
            };
            for s in 0..m {
                f[(s, q)] = f[(s, p)];
            }
            let a = gram(&f);
            let b = gaussian_vec(n, &mut rng);
            let (x, r) = solve_checked(&a, &b);
            let case = format!("singular gram n={n} #{rep} (col {q} = col {p})");
            assert!(!r.accepted, "{case}: accepted: {r:?}, x = {x:?}");
            let reason = rejection_reason(n, &r)
                .unwrap_or_else(|| panic!("{case}: rejected for no reason: {r:?}"));
            if rep == 0 {
                println!("{case}: rejected by {reason}: {r:?}");
            }
        }
    }
}

/// Graded SPD matrices `D A D`, `A` with unit diagonal and `κ(A) <= 10^2`, `D` powers of
/// two over `2^±30` (so `κ(D A D)` up to ~`10^20`): accepted, with the accuracy of the
/// equilibrated matrix.
#[test]
fn graded_spd_accepted() {
    const GRADING_BITS: i32 = 30;
    let mut worst = Worst::default();
    for n in SIZES {
        let nf = n as f64;
        for (v, increasing) in [false, true].into_iter().enumerate() {
            let mut rng = rng_for(10, n, v as u64);
            let d: Vec<f64> = (0..n)
                .map(|i| {
                    let e = (GRADING_BITS as f64 * i as f64 / (nf - 1.0)).round() as i32;
                    2f64.powi(if increasing { e - GRADING_BITS } else { -e })
                })
                .collect();
            for rep in 0..REPEATS {
                let s = random_spd(n, 1e2, &mut rng);
                let eq = Mat::from_fn(n, n, |i, j| s[(i, j)] / (s[(i, i)] * s[(j, j)]).sqrt());
                let eq = symmetrize(&eq);
                let a = Mat::from_fn(n, n, |i, j| d[i] * d[j] * eq[(i, j)]);
                let b = gaussian_vec(n, &mut rng);
                let case = format!(
                    "graded {} n={n} #{rep}",
                    if increasing { "up" } else { "down" }
                );
                let (x, r) = solve_checked(&a, &b);
                assert!(r.accepted, "{case}: not accepted: {r:?}");
                worst.record(
                    "graded residual / (n eps)",
                    relative_residual(&a, &b, &x) / (nf * EPS),
                    &case,
                    RESIDUAL_BOUND,
                );
                // Reference through the equilibrated matrix (exact scaling: D is powers of 2).
                let db: Vec<f64> = b.iter().zip(&d).map(|(p, q)| p / q).collect();
                let y_ref = faer_solve(&eq, &db);
                let y: Vec<f64> = x.iter().zip(&d).map(|(p, q)| p * q).collect();
                worst.record(
                    "graded forward error of D x / (n eps κ(A))",
                    forward_error(&y, &y_ref) / (nf * EPS * kappa2(&eq)),
                    &case,
                    FORWARD_BOUND,
                );
            }
        }
    }
    worst.print();
}

/// Nonsingular, well-conditioned symmetric matrices whose leading `2 x 2` block is
/// indefinite (`det < 0`) or negative definite (`p00 < 0`, `det > 0`), and ones whose only
/// bad block is a later one: all rejected as not positive definite (the flag is sticky),
/// with a NaN pivot ratio. The 2 x 2 pivots still eliminate a nonsingular block, so `x`
/// is finite and close to faer's (the blocks are well conditioned), and the report's
/// residual is that of `x`.
#[test]
fn non_positive_pivot_block_rejected_consistently() {
    let blocks: [(&str, [f64; 3]); 3] = [
        ("indefinite (det < 0)", [1.0, 2.0, 1.0]),
        ("negative definite (p00 < 0)", [-2.0, 1.0, -2.0]),
        ("zero diagonal (p00 = 0)", [0.0, 1.0, 0.0]),
    ];
    for n in SIZES {
        for (name, [p00, p01, p11]) in blocks {
            for at in [0, n / 2 - 1] {
                let mut rng = rng_for(11, n, at as u64);
                let j = 2 * at;
                // Identity-like SPD rest, weak coupling, the bad block at rows j, j+1.
                let mut a = Mat::from_fn(n, n, |i, k| {
                    if i == k {
                        4.0
                    } else if i > k {
                        0.1 * gaussian(&mut rng) / n as f64
                    } else {
                        0.0
                    }
                });
                a[(j, j)] = p00;
                a[(j + 1, j)] = p01;
                a[(j + 1, j + 1)] = p11;
                let a = symmetrize(&a);
                assert!(
                    eigen(&a).0.iter().any(|&l| l < 0.0),
                    "{name}: test matrix is not indefinite"
                );
                let b = gaussian_vec(n, &mut rng);
                let case = format!("{name} block {at} n={n}");
                let (x, r) = solve_checked(&a, &b);
                assert_not_positive_definite(&case, &r);
                let check = residual_check(n, &lower(&a, f64::NAN), &b, &x);
                assert_close_to_residual_check(&case, n, &check, &r);
                let x_ref = faer_solve(&a, &b);
                let err = forward_error(&x, &x_ref);
                assert!(
                    err <= FORWARD_BOUND * n as f64 * EPS * kappa2(&a),
                    "{case}: forward error {err:e}, x = {x:?}"
                );
            }
        }
    }
}

/// NaN or an infinity anywhere in the lower triangle of `A`, or in `b`: no panic, not
/// accepted.
#[test]
fn non_finite_input_not_accepted() {
    for (n, case, a, b) in random_systems(12, "gaussian gram", 1, gaussian_gram_system) {
        let positions = [(0, 0), (1, 0), (n - 1, 0), (n / 2, n / 2), (n - 1, n - 1)];
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            for (r, c) in positions {
                let mut buf = lower(&a, f64::NAN);
                buf[r + c * n] = bad;
                let mut x = vec![f64::NAN; n];
                let rep = gj2_solve_checked(n, &buf, &b, &mut x, &SolverParams::default());
                assert!(!rep.accepted, "{case}: A({r},{c}) = {bad}: {rep:?}");
                if bad.is_nan() {
                    assert!(
                        !rep.positive_pivots || rep.residual.is_nan(),
                        "{case}: {rep:?}"
                    );
                }
            }
            for i in [0, n - 1] {
                let mut bb = b.clone();
                bb[i] = bad;
                let (_, rep) = solve_checked(&a, &bb);
                assert!(!rep.accepted, "{case}: b[{i}] = {bad}: {rep:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Input validation
// ---------------------------------------------------------------------------------------

fn call(n: usize, a_len: usize, b_len: usize, x_len: usize) {
    let a = vec![1.0; a_len];
    let b = vec![1.0; b_len];
    let mut x = vec![0.0; x_len];
    gj2_solve(n, &a, &b, &mut x);
}

#[test]
#[should_panic(expected = "is odd")]
fn panics_on_odd_n() {
    call(3, 9, 3, 3);
}

#[test]
#[should_panic(expected = "outside 2..=62")]
fn panics_on_n_zero() {
    call(0, 0, 0, 0);
}

#[test]
#[should_panic(expected = "outside 2..=62")]
fn panics_on_n_64() {
    call(64, 64 * 64, 64, 64);
}

#[test]
#[should_panic(expected = "a.len()")]
fn panics_on_short_a() {
    call(4, 15, 4, 4);
}

#[test]
#[should_panic(expected = "b.len()")]
fn panics_on_short_b() {
    call(4, 16, 3, 4);
}

#[test]
#[should_panic(expected = "x.len()")]
fn panics_on_short_x() {
    let a = vec![1.0; 16];
    let b = vec![1.0; 4];
    let mut x = vec![0.0; 3];
    gj2_solve_checked(4, &a, &b, &mut x, &SolverParams::default());
}
