//! Tests of the level-0 and level-1 solvers — `ldlt_factor`/`ldlt_solve`,
//! `householder_tridiagonalize` and `pcr_solve` — against faer in `f64` as the
//! independent reference, in both `f32` and `f64`.
//!
//! Every check is a LAPACK-style scaled error (`eps` the working precision's machine
//! epsilon, norms are 1-norms unless stated):
//!
//! | check | scaled error | bound |
//! |---|---|---|
//! | `L D L^T` backward | `‖A − L D L^T‖ / (n eps ‖A‖)` | 30 |
//! | `L D L^T` solve residual | `‖A x − b‖ / ((‖A‖ ‖x‖ + ‖b‖) n eps)` | 30 |
//! | `L D L^T` vs faer solve | `‖x − x_faer‖_∞ / (‖x_faer‖_∞ n eps κ_2(A))` | 30 |
//! | Householder backward | `‖A − Q T Q^T‖ / (n eps ‖A‖)` | 30 |
//! | Householder orthogonality | `‖I − Q^T Q‖ / (n eps)` | 30 |
//! | Householder eigenvalues | `max_i |λ_i(T) − λ_i(A)| / (n eps ‖A‖_2)` | 30 |
//! | PCR residual | `‖T z − v‖ / ((‖T‖ ‖z‖ + ‖v‖) n eps)` | 30 |
//! | PCR vs faer solve | `‖z − z_faer‖_∞ / (‖z_faer‖_∞ n eps κ_2(T))` | 30 |
//!
//! Inputs are generated in `f64`, rounded to the working precision, and the reference
//! quantities are computed (by faer, in `f64`) from the *rounded* inputs, so that the
//! measured errors are those of the algorithms. Outputs and scratch are poisoned with
//! NaN before each call; errors are reduced with a maximum that propagates NaN, so an
//! unwritten output fails the check. The maxima over all cases are printed
//! (`cargo test ... -- --nocapture`).

use std::collections::BTreeMap;

use cva_kernels::householder::householder_tridiagonalize;
use cva_kernels::ldlt::{ldlt_factor, ldlt_solve, LdltError};
use cva_kernels::pcr::{pcr_solve, pcr_workspace_len, PcrError};
use cva_kernels::Real;
use faer::prelude::*;
use faer::{Mat, Side};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

const SIZES: [usize; 10] = [1, 2, 3, 7, 16, 30, 31, 33, 63, 64];
/// Bound on every scaled error (see the module documentation).
const BOUND: f64 = 30.0;
/// Extra leading-dimension padding exercised for the dense routines.
const LDA_PADS: [usize; 2] = [0, 3];

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// `max` that propagates NaN (unlike `f64::max`).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Collects the worst scaled error of every check and the cases above their bound.
#[derive(Default)]
struct Checker {
    worst: BTreeMap<String, (f64, f64)>,
    failures: Vec<String>,
}

impl Checker {
    fn record<T: Real>(&mut self, check: &str, case: &str, value: f64, bound: f64) {
        let key = format!("{check} [{}]", T::NAME);
        let entry = self.worst.entry(key.clone()).or_insert((0.0, bound));
        entry.0 = nan_max(entry.0, value);
        if value.is_nan() || value > bound {
            self.failures
                .push(format!("{key}: {case}: {value:e} > {bound}"));
        }
    }

    fn expect<T: Real>(&mut self, ok: bool, what: &str, case: &str) {
        if !ok {
            self.failures.push(format!("[{}] {case}: {what}", T::NAME));
        }
    }

    fn finish(self, test: &str) {
        println!("{test}: maximum scaled errors");
        for (key, (worst, bound)) in &self.worst {
            println!("  {key:<48} {worst:>10.3e}   (bound {bound})");
        }
        assert!(
            self.failures.is_empty(),
            "{test}: {} failure(s):\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

fn rng_for(test: u64, n: usize, variant: u64) -> StdRng {
    StdRng::seed_from_u64(test * 1_000_003 + (n as u64) * 1_009 + variant)
}

fn gaussian(rng: &mut StdRng) -> f64 {
    StandardNormal.sample(rng)
}

/// `x` rounded to `T` and back.
fn round<T: Real>(x: f64) -> f64 {
    T::from_f64(x).to_f64()
}

/// Symmetric matrix with every entry rounded to `T`.
fn round_sym<T: Real>(a: &Mat<f64>) -> Mat<f64> {
    let n = a.nrows();
    Mat::from_fn(n, n, |i, j| round::<T>(a[(i.max(j), i.min(j))]))
}

/// 1-norm (maximum column sum), NaN-propagating.
fn norm1(a: &Mat<f64>) -> f64 {
    let mut m = 0.0;
    for j in 0..a.ncols() {
        let s: f64 = (0..a.nrows()).map(|i| a[(i, j)].abs()).sum();
        m = nan_max(m, s);
    }
    m
}

fn vnorm1(x: &[f64]) -> f64 {
    x.iter().map(|v| v.abs()).sum()
}

fn vnorm_inf(x: &[f64]) -> f64 {
    x.iter().fold(0.0, |m, v| nan_max(m, v.abs()))
}

fn mat_vec(a: &Mat<f64>, x: &[f64]) -> Vec<f64> {
    (0..a.nrows())
        .map(|i| (0..a.ncols()).map(|j| a[(i, j)] * x[j]).sum())
        .collect()
}

/// Scaled error `num / den`, exact zero when both vanish (the zero matrix).
fn ratio(num: f64, den: f64) -> f64 {
    if num == 0.0 && den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// Eigenvalues of a symmetric matrix, ascending (faer, `f64`).
fn eigenvalues(a: &Mat<f64>) -> Vec<f64> {
    a.self_adjoint_eigenvalues(Side::Lower)
        .expect("faer eigenvalues")
}

/// `κ_2` of a symmetric matrix from its eigenvalues.
fn cond2(a: &Mat<f64>) -> f64 {
    let ev = eigenvalues(a);
    let max = ev.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
    let min = ev.iter().fold(f64::INFINITY, |m: f64, v| m.min(v.abs()));
    max / min
}

/// Dense solve by faer (`f64`, LU with partial pivoting).
fn faer_solve(a: &Mat<f64>, b: &[f64]) -> Vec<f64> {
    let n = a.nrows();
    let rhs = Mat::from_fn(n, 1, |i, _| b[i]);
    let x = a.partial_piv_lu().solve(&rhs);
    (0..n).map(|i| x[(i, 0)]).collect()
}

/// Column-major `n x n` buffer with leading dimension `lda`: the lower triangle of `a`
/// (rounded to `T`), NaN in the strict upper triangle and the padding rows.
fn poisoned_lower<T: Real>(a: &Mat<f64>, lda: usize) -> Vec<T> {
    let n = a.nrows();
    let mut buf = vec![T::NAN; lda * n];
    for c in 0..n {
        for r in c..n {
            buf[r + c * lda] = T::from_f64(a[(r, c)]);
        }
    }
    buf
}

/// `true` when the padding rows `n..lda` of every column are still NaN.
fn padding_untouched<T: Real>(buf: &[T], n: usize, lda: usize) -> bool {
    (0..n).all(|c| (n..lda).all(|r| buf[r + c * lda].is_nan()))
}

/// Random orthogonal `n x n` matrix (Q factor of a Gaussian matrix).
fn random_orthogonal(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let g = Mat::from_fn(n, n, |_, _| gaussian(rng));
    g.qr().compute_Q()
}

/// Random SPD matrix `V diag(λ) V^T` with `λ` log-uniform in `[1/cond, 1]`.
fn random_spd_cond(n: usize, cond: f64, rng: &mut StdRng) -> Mat<f64> {
    let v = random_orthogonal(n, rng);
    let lam: Vec<f64> = (0..n).map(|_| cond.powf(-rng.random::<f64>())).collect();
    let vl = Mat::from_fn(n, n, |i, j| v[(i, j)] * lam[j]);
    let a = &vl * v.transpose();
    // Exactly symmetric.
    Mat::from_fn(n, n, |i, j| a[(i.max(j), i.min(j))])
}

/// Random well-conditioned SPD matrix `G G^T / n + I/2`.
fn random_spd(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let g = Mat::from_fn(n, n, |_, _| gaussian(rng));
    let a = &g * g.transpose();
    Mat::from_fn(n, n, |i, j| {
        a[(i.max(j), i.min(j))] / n as f64 + if i == j { 0.5 } else { 0.0 }
    })
}

/// Random symmetric (indefinite) Gaussian matrix.
fn random_symmetric(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let g = Mat::from_fn(n, n, |_, _| gaussian(rng));
    Mat::from_fn(n, n, |i, j| g[(i.max(j), i.min(j))])
}

/// Equicorrelation matrix `Ξ_ρ` (eq. (6) of the paper).
fn equicorrelation(n: usize, rho: f64) -> Mat<f64> {
    Mat::from_fn(n, n, |i, j| if i == j { 1.0 } else { rho })
}

// ---------------------------------------------------------------------------------------
// L D L^T
// ---------------------------------------------------------------------------------------

/// Factors and solves with `a` (already rounded to `T`); records the three checks.
fn ldlt_case<T: Real>(chk: &mut Checker, case: &str, a: &Mat<f64>, lda: usize, rng: &mut StdRng) {
    let n = a.nrows();
    let eps = T::EPSILON.to_f64();
    let nf = n as f64;
    let mut buf = poisoned_lower::<T>(a, lda);
    if let Err(err) = ldlt_factor(n, &mut buf, lda) {
        chk.expect::<T>(false, &format!("ldlt_factor failed: {err}"), case);
        return;
    }
    let upper_untouched = (0..n).all(|c| (0..c).all(|r| buf[r + c * lda].is_nan()));
    chk.expect::<T>(upper_untouched, "strict upper triangle written", case);
    chk.expect::<T>(padding_untouched(&buf, n, lda), "padding written", case);

    // ‖A − L D L^T‖ / (n eps ‖A‖).
    let l = Mat::from_fn(n, n, |i, j| match i.cmp(&j) {
        std::cmp::Ordering::Greater => buf[i + j * lda].to_f64(),
        std::cmp::Ordering::Equal => 1.0,
        std::cmp::Ordering::Less => 0.0,
    });
    let ld = Mat::from_fn(n, n, |i, j| l[(i, j)] * buf[j + j * lda].to_f64());
    let r = a - &ld * l.transpose();
    let norm_a = norm1(a);
    chk.record::<T>(
        "ldlt backward",
        case,
        ratio(norm1(&r), nf * eps * norm_a),
        BOUND,
    );

    // Solve with a random right-hand side, b rounded to T.
    let x_true: Vec<f64> = (0..n).map(|_| gaussian(rng)).collect();
    let b: Vec<f64> = mat_vec(a, &x_true).into_iter().map(round::<T>).collect();
    let mut x_t: Vec<T> = b.iter().map(|&v| T::from_f64(v)).collect();
    ldlt_solve(n, &buf, lda, &mut x_t);
    let x: Vec<f64> = x_t.iter().map(|v| v.to_f64()).collect();
    let ax = mat_vec(a, &x);
    let res: Vec<f64> = ax.iter().zip(&b).map(|(p, q)| p - q).collect();
    let den = (norm_a * vnorm1(&x) + vnorm1(&b)) * nf * eps;
    chk.record::<T>("ldlt solve residual", case, ratio(vnorm1(&res), den), BOUND);

    let x_ref = faer_solve(a, &b);
    let diff: Vec<f64> = x.iter().zip(&x_ref).map(|(p, q)| p - q).collect();
    let den = vnorm_inf(&x_ref) * nf * eps * cond2(a);
    chk.record::<T>(
        "ldlt solve vs faer",
        case,
        ratio(vnorm_inf(&diff), den),
        BOUND,
    );
}

fn ldlt_random_for<T: Real>(chk: &mut Checker) {
    for &n in &SIZES {
        for (v, &pad) in LDA_PADS.iter().enumerate() {
            let lda = n + pad;
            let mut rng = rng_for(1, n, v as u64 + if T::NAME == "f32" { 0 } else { 50 });
            let a = round_sym::<T>(&random_spd(n, &mut rng));
            ldlt_case::<T>(
                chk,
                &format!("G G^T/n + I/2, n={n}, lda={lda}"),
                &a,
                lda,
                &mut rng,
            );
            let cond = if T::NAME == "f32" { 1e3 } else { 1e8 };
            let a = round_sym::<T>(&random_spd_cond(n, cond, &mut rng));
            ldlt_case::<T>(
                chk,
                &format!("cond {cond:e}, n={n}, lda={lda}"),
                &a,
                lda,
                &mut rng,
            );
        }
        let mut rng = rng_for(2, n, 0);
        for rho in [0.3, 0.9, 0.99] {
            let a = round_sym::<T>(&equicorrelation(n, rho));
            ldlt_case::<T>(chk, &format!("Xi_{rho}, n={n}"), &a, n, &mut rng);
        }
    }
}

/// Random SPD matrices (well conditioned and with prescribed condition number) and
/// `Ξ_ρ`: backward error of the factorization, residual of the solve and agreement
/// with faer's dense solve.
#[test]
fn ldlt_random_spd_against_faer() {
    let mut chk = Checker::default();
    ldlt_random_for::<f32>(&mut chk);
    ldlt_random_for::<f64>(&mut chk);
    chk.finish("ldlt_random_spd_against_faer");
}

fn ldlt_indefinite_for<T: Real>() {
    for &n in &SIZES {
        let mut ks = vec![0, n / 2, n - 1];
        ks.dedup();
        for &k in &ks {
            // A = L D L^T with unit lower L and D_kk = -1, D_jj in [1, 2] otherwise.
            let mut rng = rng_for(3, n, k as u64);
            let l = Mat::from_fn(n, n, |i, j| match i.cmp(&j) {
                std::cmp::Ordering::Greater => rng.random_range(-0.5..0.5) / (n as f64).sqrt(),
                std::cmp::Ordering::Equal => 1.0,
                std::cmp::Ordering::Less => 0.0,
            });
            let dv: Vec<f64> = (0..n)
                .map(|j| {
                    if j == k {
                        -1.0
                    } else {
                        rng.random_range(1.0..2.0)
                    }
                })
                .collect();
            let ld = Mat::from_fn(n, n, |i, j| l[(i, j)] * dv[j]);
            let a = round_sym::<T>(&(&ld * l.transpose()));
            let mut buf = poisoned_lower::<T>(&a, n);
            match ldlt_factor(n, &mut buf, n) {
                Err(LdltError::NotPositiveDefinite { index, pivot }) => {
                    assert_eq!(index, k, "[{}] n={n}: wrong failing pivot", T::NAME);
                    assert!(
                        (pivot + 1.0).abs() < 1e-2,
                        "[{}] n={n}, k={k}: pivot {pivot} should be about -1",
                        T::NAME
                    );
                }
                Ok(()) => panic!("[{}] n={n}, k={k}: indefinite matrix factored", T::NAME),
            }
        }
    }
    // Exact zero pivot: [[1, 1], [1, 1]] fails at index 1 with pivot 0.
    let mut a = vec![T::ONE, T::ONE, T::NAN, T::ONE];
    assert_eq!(
        ldlt_factor(2, &mut a, 2),
        Err(LdltError::NotPositiveDefinite {
            index: 1,
            pivot: 0.0
        })
    );
    // -I fails at once.
    let mut a = vec![-T::ONE, T::ZERO, T::NAN, -T::ONE];
    assert!(matches!(
        ldlt_factor(2, &mut a, 2),
        Err(LdltError::NotPositiveDefinite { index: 0, .. })
    ));
    // A NaN pivot is reported, not propagated.
    let mut a = vec![T::NAN, T::ZERO, T::NAN, T::ONE];
    match ldlt_factor(2, &mut a, 2) {
        Err(LdltError::NotPositiveDefinite { index: 0, pivot }) => assert!(pivot.is_nan()),
        other => panic!("[{}] NaN pivot: {other:?}", T::NAME),
    }
    // A NaN below the first pivot poisons the second pivot.
    let mut a = vec![T::ONE, T::NAN, T::NAN, T::ONE];
    assert!(matches!(
        ldlt_factor(2, &mut a, 2),
        Err(LdltError::NotPositiveDefinite { index: 1, .. })
    ));
    // n = 0 is a no-op.
    assert_eq!(ldlt_factor::<T>(0, &mut [], 0), Ok(()));
}

/// Indefinite matrices built as `L D L^T` with `D_kk = -1`: the error must name pivot
/// `k` (and report a pivot near `-1`); exact zero, negative and NaN pivots.
#[test]
fn ldlt_indefinite_reports_first_bad_pivot() {
    ldlt_indefinite_for::<f32>();
    ldlt_indefinite_for::<f64>();
}

// ---------------------------------------------------------------------------------------
// Householder tridiagonalization
// ---------------------------------------------------------------------------------------

struct Tridiagonalization {
    q: Mat<f64>,
    d: Vec<f64>,
    e: Vec<f64>,
}

/// Runs `householder_tridiagonalize` on `a` (already rounded to `T`), with NaN in the
/// strict upper triangle, the padding and `d`, `e`; records the three checks.
fn householder_case<T: Real>(
    chk: &mut Checker,
    case: &str,
    a: &Mat<f64>,
    lda: usize,
) -> Tridiagonalization {
    let n = a.nrows();
    let eps = T::EPSILON.to_f64();
    let nf = n as f64;
    let mut buf = poisoned_lower::<T>(a, lda);
    let mut d = vec![T::NAN; n];
    let mut e = vec![T::NAN; n.saturating_sub(1)];
    householder_tridiagonalize(n, &mut buf, lda, &mut d, &mut e);
    chk.expect::<T>(padding_untouched(&buf, n, lda), "padding written", case);

    let q = Mat::from_fn(n, n, |i, j| buf[i + j * lda].to_f64());
    let d: Vec<f64> = d.iter().map(|v| v.to_f64()).collect();
    let e: Vec<f64> = e.iter().map(|v| v.to_f64()).collect();
    let t = tridiagonal(&d, &e);

    // ‖A − Q T Q^T‖ / (n eps ‖A‖) (NaN if anything was left unwritten).
    let r = a - &(&q * &t) * q.transpose();
    let norm_a = norm1(a);
    chk.record::<T>(
        "householder backward",
        case,
        ratio(norm1(&r), nf * eps * norm_a),
        BOUND,
    );

    // ‖I − Q^T Q‖ / (n eps).
    let o = Mat::<f64>::identity(n, n) - q.transpose() * &q;
    chk.record::<T>(
        "householder orthogonality",
        case,
        norm1(&o) / (nf * eps),
        BOUND,
    );

    // Eigenvalues of T against faer's eigenvalues of A.
    if d.iter().chain(&e).all(|v| v.is_finite()) {
        let ev_a = eigenvalues(a);
        let ev_t = eigenvalues(&t);
        let norm2 = ev_a.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
        let err = ev_a
            .iter()
            .zip(&ev_t)
            .fold(0.0, |m, (p, q)| nan_max(m, (p - q).abs()));
        chk.record::<T>(
            "householder eigenvalues",
            case,
            ratio(err, nf * eps * norm2),
            BOUND,
        );
    } else {
        chk.record::<T>("householder eigenvalues", case, f64::NAN, BOUND);
    }
    Tridiagonalization { q, d, e }
}

fn tridiagonal(d: &[f64], e: &[f64]) -> Mat<f64> {
    let n = d.len();
    Mat::from_fn(n, n, |i, j| {
        if i == j {
            d[i]
        } else if i == j + 1 {
            e[j]
        } else if j == i + 1 {
            e[i]
        } else {
            0.0
        }
    })
}

fn householder_random_for<T: Real>(chk: &mut Checker) {
    let (tiny, huge) = if T::NAME == "f32" {
        (1e-18, 1e18)
    } else {
        (1e-150, 1e150)
    };
    for &n in &SIZES {
        for (v, &pad) in LDA_PADS.iter().enumerate() {
            let lda = n + pad;
            let mut rng = rng_for(4, n, v as u64 + if T::NAME == "f32" { 0 } else { 50 });
            let a = round_sym::<T>(&random_symmetric(n, &mut rng));
            householder_case::<T>(
                chk,
                &format!("symmetric Gaussian, n={n}, lda={lda}"),
                &a,
                lda,
            );
            let a = round_sym::<T>(&random_spd_cond(n, 1e6, &mut rng));
            householder_case::<T>(chk, &format!("SPD cond 1e6, n={n}, lda={lda}"), &a, lda);
        }
        // Scaling: the squared norms would under/overflow without the row scaling.
        let mut rng = rng_for(5, n, 0);
        let g = random_symmetric(n, &mut rng);
        for s in [tiny, huge] {
            let a = round_sym::<T>(&Mat::from_fn(n, n, |i, j| g[(i, j)] * s));
            householder_case::<T>(chk, &format!("Gaussian * {s:e}, n={n}"), &a, n);
        }
    }
}

/// Random symmetric (indefinite, SPD with condition 1e6, scaled by tiny and huge
/// factors) matrices: backward error, orthogonality of `Q`, eigenvalues of `T` against
/// faer's eigenvalues of `A`; the strict upper triangle, padding and `d`, `e` are NaN on
/// entry.
#[test]
fn householder_random_against_faer() {
    let mut chk = Checker::default();
    householder_random_for::<f32>(&mut chk);
    householder_random_for::<f64>(&mut chk);
    chk.finish("householder_random_against_faer");
}

fn householder_structured_for<T: Real>(chk: &mut Checker) {
    for &n in &SIZES {
        let mut rng = rng_for(6, n, if T::NAME == "f32" { 0 } else { 50 });
        // Already tridiagonal / diagonal / identity / zero: every step is skipped, so
        // the result is exact: Q = I, d = diag(A), e = subdiag(A).
        let tri = round_sym::<T>(&Mat::from_fn(n, n, |i, j| {
            if i.abs_diff(j) <= 1 {
                gaussian(&mut rng)
            } else {
                0.0
            }
        }));
        let diag = Mat::from_fn(n, n, |i, j| {
            if i == j {
                round::<T>(gaussian(&mut rng))
            } else {
                0.0
            }
        });
        let cases = [
            ("tridiagonal", tri),
            ("diagonal", diag),
            ("identity", Mat::<f64>::identity(n, n)),
            ("zero", Mat::<f64>::zeros(n, n)),
        ];
        for (name, a) in cases {
            let case = format!("{name}, n={n}");
            let r = householder_case::<T>(chk, &case, &a, n);
            let exact = (0..n).all(|i| {
                r.d[i] == a[(i, i)]
                    && (i + 1 == n || r.e[i] == a[(i + 1, i)])
                    && (0..n).all(|j| r.q[(i, j)] == if i == j { 1.0 } else { 0.0 })
            });
            chk.expect::<T>(
                exact,
                "already tridiagonal: expected Q = I and T = A exactly",
                &case,
            );
        }

        // Equicorrelation Ξ_ρ: eigenvalues 1 + (n-1)ρ (once) and 1 - ρ (n-1 times).
        for rho in [0.3, 0.9, 0.99] {
            let a = round_sym::<T>(&equicorrelation(n, rho));
            let case = format!("Xi_{rho}, n={n}");
            let r = householder_case::<T>(chk, &case, &a, n);
            let rho_t = round::<T>(rho);
            let mut exact: Vec<f64> = (0..n)
                .map(|i| {
                    if i == 0 {
                        1.0 + (n as f64 - 1.0) * rho_t
                    } else {
                        1.0 - rho_t
                    }
                })
                .collect();
            exact.sort_by(f64::total_cmp);
            let ev_t = eigenvalues(&tridiagonal(&r.d, &r.e));
            let err = exact
                .iter()
                .zip(&ev_t)
                .fold(0.0, |m, (p, q)| nan_max(m, (p - q).abs()));
            let scale = n as f64 * T::EPSILON.to_f64() * exact[n - 1];
            chk.record::<T>(
                "householder Xi_rho exact eigenvalues",
                &case,
                err / scale,
                BOUND,
            );
        }

        // A zero row/column in the middle: some, but not all, steps are skipped.
        if n >= 3 {
            let k = n / 2;
            let g = random_symmetric(n, &mut rng);
            let a = round_sym::<T>(&Mat::from_fn(n, n, |i, j| {
                if (i == k || j == k) && i != j {
                    0.0
                } else {
                    g[(i, j)]
                }
            }));
            householder_case::<T>(chk, &format!("zero row {k}, n={n}"), &a, n);
            // Block diagonal: the rows of the second block are reduced independently.
            let a = round_sym::<T>(&Mat::from_fn(n, n, |i, j| {
                if (i < k) == (j < k) {
                    g[(i, j)]
                } else {
                    0.0
                }
            }));
            householder_case::<T>(chk, &format!("block diagonal at {k}, n={n}"), &a, n);
        }
    }
}

/// Structured matrices: already tridiagonal, diagonal, identity and zero (all steps
/// skipped, exact result), `Ξ_ρ` (against its closed-form eigenvalues too), a zero
/// row/column and a block-diagonal matrix (some steps skipped).
#[test]
fn householder_structured_matrices() {
    let mut chk = Checker::default();
    householder_structured_for::<f32>(&mut chk);
    householder_structured_for::<f64>(&mut chk);
    chk.finish("householder_structured_matrices");
}

// ---------------------------------------------------------------------------------------
// Parallel cyclic reduction
// ---------------------------------------------------------------------------------------

/// Runs `pcr_solve` on (`d`, `e`, `v`) rounded to `T` with a NaN-poisoned workspace of
/// exactly `pcr_workspace_len(n)` entries. On error `v` must be unchanged.
fn run_pcr<T: Real>(d: &[f64], e: &[f64], v: &[f64]) -> Result<Vec<f64>, PcrError> {
    let n = d.len();
    let d_t: Vec<T> = d.iter().map(|&x| T::from_f64(x)).collect();
    let e_t: Vec<T> = e.iter().map(|&x| T::from_f64(x)).collect();
    let mut v_t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    let v_in = v_t.clone();
    let mut work = vec![T::NAN; pcr_workspace_len(n)];
    match pcr_solve(n, &d_t, &e_t, &mut v_t, &mut work) {
        Ok(()) => Ok(v_t.iter().map(|x| x.to_f64()).collect()),
        Err(err) => {
            let unchanged = v_t
                .iter()
                .zip(&v_in)
                .all(|(p, q)| p == q || (p.is_nan() && q.is_nan()));
            assert!(unchanged, "[{}] pcr_solve modified v on error", T::NAME);
            Err(err)
        }
    }
}

fn pcr_random_for<T: Real>(chk: &mut Checker) {
    let eps = T::EPSILON.to_f64();
    for &n in &SIZES {
        for (variant, mixed_signs) in [(0, false), (1, true), (2, true)] {
            let mut rng = rng_for(7, n, variant + if T::NAME == "f32" { 0 } else { 50 });
            let e: Vec<f64> = (0..n.saturating_sub(1))
                .map(|_| round::<T>(rng.random_range(-1.0..1.0)))
                .collect();
            let d: Vec<f64> = (0..n)
                .map(|i| {
                    let off = if i > 0 { e[i - 1].abs() } else { 0.0 }
                        + if i + 1 < n { e[i].abs() } else { 0.0 };
                    let sign = if mixed_signs && rng.random::<bool>() {
                        -1.0
                    } else {
                        1.0
                    };
                    round::<T>(sign * (off + rng.random_range(0.05..1.0)))
                })
                .collect();
            let v: Vec<f64> = (0..n).map(|_| round::<T>(gaussian(&mut rng))).collect();
            let case = format!(
                "diag. dominant{}, n={n}, seed {variant}",
                if mixed_signs { " (mixed signs)" } else { "" }
            );
            let z = match run_pcr::<T>(&d, &e, &v) {
                Ok(z) => z,
                Err(err) => {
                    chk.expect::<T>(false, &format!("pcr_solve failed: {err}"), &case);
                    continue;
                }
            };
            let t = tridiagonal(&d, &e);
            let tz = mat_vec(&t, &z);
            let res: Vec<f64> = tz.iter().zip(&v).map(|(p, q)| p - q).collect();
            let nf = n as f64;
            let den = (norm1(&t) * vnorm1(&z) + vnorm1(&v)) * nf * eps;
            chk.record::<T>("pcr residual", &case, ratio(vnorm1(&res), den), BOUND);

            let z_ref = faer_solve(&t, &v);
            let diff: Vec<f64> = z.iter().zip(&z_ref).map(|(p, q)| p - q).collect();
            let den = vnorm_inf(&z_ref) * nf * eps * cond2(&t);
            chk.record::<T>(
                "pcr vs faer solve",
                &case,
                ratio(vnorm_inf(&diff), den),
                BOUND,
            );
        }
    }
}

/// Random diagonally dominant symmetric tridiagonal systems (positive and mixed-sign
/// diagonals) for every size: relative residual and agreement with faer's dense solve.
#[test]
fn pcr_random_diagonally_dominant_against_faer() {
    let mut chk = Checker::default();
    pcr_random_for::<f32>(&mut chk);
    pcr_random_for::<f64>(&mut chk);
    assert_eq!(pcr_workspace_len(0), 0);
    chk.finish("pcr_random_diagonally_dominant_against_faer");
}

fn pcr_special_for<T: Real>() {
    let name = T::NAME;
    // n = 1 and n = 2, exact.
    assert_eq!(run_pcr::<T>(&[4.0], &[], &[2.0]), Ok(vec![0.5]));
    assert_eq!(
        run_pcr::<T>(&[2.0, 1.0], &[1.0], &[3.0, 3.0]),
        Ok(vec![0.0, 3.0])
    );
    assert_eq!(
        run_pcr::<T>(&[2.0, 2.0], &[1.0], &[3.0, 3.0]),
        Ok(vec![1.0, 1.0])
    );
    assert_eq!(
        run_pcr::<T>(&[2.0, 4.0], &[0.0], &[1.0, 1.0]),
        Ok(vec![0.5, 0.25])
    );
    // n = 0 is a no-op.
    assert_eq!(pcr_solve::<T>(0, &[], &[], &mut [], &mut []), Ok(()));

    // Zero / singular divisors.
    assert_eq!(
        run_pcr::<T>(&[0.0], &[], &[1.0]),
        Err(PcrError::Breakdown { step: 0 })
    );
    assert!(
        run_pcr::<T>(&[1.0, 1.0], &[1.0], &[1.0, 2.0]).is_err(),
        "[{name}] singular 2x2"
    );
    // Nonsingular but zero pivots: PCR without pivoting breaks down, and says so.
    assert!(
        run_pcr::<T>(&[0.0, 0.0], &[1.0], &[1.0, 2.0]).is_err(),
        "[{name}] zero diagonal"
    );

    for &n in &SIZES {
        let ones = vec![1.0; n];
        // Singular: path-graph Laplacian (null vector of ones).
        if n >= 2 {
            let d: Vec<f64> = (0..n)
                .map(|i| if i == 0 || i + 1 == n { 1.0 } else { 2.0 })
                .collect();
            let e = vec![-1.0; n - 1];
            match run_pcr::<T>(&d, &e, &ones) {
                Err(_) => {}
                Ok(z) => panic!("[{name}] n={n}: singular Laplacian solved silently: {z:?}"),
            }
        }
        // Singular: an isolated zero equation in the middle of a dominant system.
        if n >= 3 {
            let k = n / 2;
            let d: Vec<f64> = (0..n).map(|i| if i == k { 0.0 } else { 3.0 }).collect();
            let e: Vec<f64> = (0..n - 1)
                .map(|i| if i + 1 == k || i == k { 0.0 } else { 1.0 })
                .collect();
            assert!(
                run_pcr::<T>(&d, &e, &ones).is_err(),
                "[{name}] n={n}: zero equation"
            );
            // Singular: a rank-one 2x2 block [[1, 2], [2, 4]] decoupled from the rest.
            let mut d = vec![3.0; n];
            let mut e = vec![1.0; n - 1];
            d[k - 1] = 1.0;
            d[k] = 4.0;
            e[k - 1] = 2.0;
            if k >= 2 {
                e[k - 2] = 0.0;
            }
            if k < n - 1 {
                e[k] = 0.0;
            }
            assert!(
                run_pcr::<T>(&d, &e, &ones).is_err(),
                "[{name}] n={n}: rank-one block"
            );
        }
        // Non-finite input is reported.
        let d = vec![4.0; n];
        let e = vec![1.0; n.saturating_sub(1)];
        let mut v = ones.clone();
        v[n / 2] = f64::NAN;
        assert!(
            run_pcr::<T>(&d, &e, &v).is_err(),
            "[{name}] n={n}: NaN in v"
        );
        let mut d_inf = d.clone();
        d_inf[n - 1] = f64::INFINITY;
        assert!(
            run_pcr::<T>(&d_inf, &e, &ones).is_err(),
            "[{name}] n={n}: inf in d"
        );
        if n >= 2 {
            let mut e_nan = e.clone();
            e_nan[0] = f64::NAN;
            assert!(
                run_pcr::<T>(&d, &e_nan, &ones).is_err(),
                "[{name}] n={n}: NaN in e"
            );
        }
    }
}

/// `n = 1, 2` in closed form, singular systems (zero equation, rank-one block, path
/// Laplacian), zero pivots of a nonsingular matrix and non-finite input: all must be
/// reported as `Err` with `v` left unchanged.
#[test]
fn pcr_small_singular_and_nonfinite() {
    pcr_special_for::<f32>();
    pcr_special_for::<f64>();
}
