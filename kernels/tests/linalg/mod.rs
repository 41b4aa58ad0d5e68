//! Dense linear-algebra helpers shared by the CPU solver tests (`solvers.rs`, `gj2.rs`):
//! norms, residuals and forward errors in `f64`, faer's eigenvalues and dense solve as the
//! reference, and random test matrices (Gaussian vectors, prescribed spectra, SPD and
//! indefinite matrices).
//!
//! Each test binary uses a subset of them, hence `dead_code` is allowed.

#![allow(dead_code)]

use faer::prelude::*;
use faer::{Mat, Side};
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

// ---------------------------------------------------------------------------------------
// Small numerical helpers (f64)
// ---------------------------------------------------------------------------------------

/// `max` that propagates NaN.
pub fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

pub fn norm_inf(x: &[f64]) -> f64 {
    x.iter().fold(0.0, |m, v| nan_max(m, v.abs()))
}

/// Maximum absolute row sum, NaN-propagating.
pub fn mat_norm_inf(a: &Mat<f64>) -> f64 {
    (0..a.nrows()).fold(0.0, |m, i| {
        nan_max(m, (0..a.ncols()).map(|j| a[(i, j)].abs()).sum())
    })
}

pub fn mat_vec(a: &Mat<f64>, x: &[f64]) -> Vec<f64> {
    (0..a.nrows())
        .map(|i| x.iter().enumerate().map(|(j, xj)| a[(i, j)] * xj).sum())
        .collect()
}

pub fn sub(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(p, q)| p - q).collect()
}

/// `num / den`, 0 when both are 0.
pub fn ratio(num: f64, den: f64) -> f64 {
    if num == 0.0 && den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// `‖A x − b‖ / (‖A‖ ‖x‖ + ‖b‖)` in `f64` (NaN if `x` has a NaN).
pub fn relative_residual(a: &Mat<f64>, b: &[f64], x: &[f64]) -> f64 {
    let r = sub(&mat_vec(a, x), b);
    ratio(norm_inf(&r), mat_norm_inf(a) * norm_inf(x) + norm_inf(b))
}

/// Relative forward error `‖x − r‖ / ‖r‖`.
pub fn forward_error(x: &[f64], r: &[f64]) -> f64 {
    ratio(norm_inf(&sub(x, r)), norm_inf(r))
}

/// Eigenvalues (ascending) and eigenvectors (columns) of a symmetric matrix, by faer.
pub fn eigen(a: &Mat<f64>) -> (Vec<f64>, Mat<f64>) {
    let evd = a
        .self_adjoint_eigen(Side::Lower)
        .expect("faer self_adjoint_eigen");
    let s = evd.S().column_vector();
    ((0..a.nrows()).map(|i| s[i]).collect(), evd.U().to_owned())
}

pub fn cond2(lambda: &[f64]) -> f64 {
    let max = lambda.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
    let min = lambda
        .iter()
        .fold(f64::INFINITY, |m: f64, v| m.min(v.abs()));
    max / min
}

/// Dense solve by faer (LU with partial pivoting, `f64`).
pub fn faer_solve(a: &Mat<f64>, b: &[f64]) -> Vec<f64> {
    let rhs = Mat::from_fn(b.len(), 1, |i, _| b[i]);
    let x = a.partial_piv_lu().solve(&rhs);
    (0..b.len()).map(|i| x[(i, 0)]).collect()
}

// ---------------------------------------------------------------------------------------
// Random inputs
// ---------------------------------------------------------------------------------------

pub fn gaussian(rng: &mut StdRng) -> f64 {
    StandardNormal.sample(rng)
}

pub fn gaussian_vec(n: usize, rng: &mut StdRng) -> Vec<f64> {
    (0..n).map(|_| gaussian(rng)).collect()
}

pub fn random_orthogonal(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let g = Mat::from_fn(n, n, |_, _| gaussian(rng));
    g.qr().compute_Q()
}

/// `V diag(λ) V^T`, exactly symmetric.
pub fn from_spectrum(lambda: &[f64], rng: &mut StdRng) -> Mat<f64> {
    let n = lambda.len();
    let v = random_orthogonal(n, rng);
    let vl = Mat::from_fn(n, n, |i, j| v[(i, j)] * lambda[j]);
    let a = &vl * v.transpose();
    Mat::from_fn(n, n, |i, j| a[(i.max(j), i.min(j))])
}

/// Random SPD matrix: condition number log-uniform in `[1, max_cond]` (attained),
/// eigenvalues log-uniform in between, scaled by a random power of two.
pub fn random_spd(n: usize, max_cond: f64, rng: &mut StdRng) -> Mat<f64> {
    let scale = 2f64.powi(rng.random_range(-8..=8));
    spd_with_scale(n, max_cond, scale, rng)
}

/// Random SPD matrix with largest eigenvalue `scale` and condition number log-uniform in
/// `[1, max_cond]` (attained).
pub fn spd_with_scale(n: usize, max_cond: f64, scale: f64, rng: &mut StdRng) -> Mat<f64> {
    let cond = max_cond.powf(rng.random::<f64>());
    let lambda: Vec<f64> = (0..n)
        .map(|i| match i {
            0 => scale,
            1 => scale / cond,
            _ => scale * cond.powf(-rng.random::<f64>()),
        })
        .collect();
    from_spectrum(&lambda, rng)
}

/// Random indefinite (for `n >= 2`; negative definite for `n = 1`) nonsingular symmetric
/// matrix with `|λ|` in `[0.01, 1]`, both signs present.
pub fn random_indefinite(n: usize, rng: &mut StdRng) -> Mat<f64> {
    let lambda: Vec<f64> = (0..n)
        .map(|i| {
            let mag = 10f64.powf(-2.0 * rng.random::<f64>());
            let negative = match i {
                0 => true,
                1 => false,
                _ => rng.random::<bool>(),
            };
            if negative {
                -mag
            } else {
                mag
            }
        })
        .collect();
    from_spectrum(&lambda, rng)
}
