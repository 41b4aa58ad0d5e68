//! Tests of the divide-and-conquer tridiagonal eigensolver (`stedc`), its secular
//! equation solver and the truncated eigen-solve, against faer in `f64` as an
//! independent reference.
//!
//! Accuracy is measured LAPACK-style and must stay below 30:
//! * residual `||T - Z Λ Z^T||_F / (n ε ||T||_F)`,
//! * orthogonality `||I - Z^T Z||_F / (n ε)`,
//! * eigenvalues `max_i |λ_i - λ_i^ref| / (n ε ||T||_F)`, and `λ` ascending,
//!
//! with `ε` the epsilon of the precision under test; `f32` runs are compared with the
//! `f64` reference of the `f32`-rounded matrix. Outputs are poisoned with NaN before
//! each call, and every reduction is a max that propagates NaN. Run with
//! `--nocapture` to see the worst ratios.

use cva_kernels::stedc::{
    secular_equation_root, stedc, truncated_eigen_solve, StedcError, StedcWorkspace,
    SECULAR_MAX_ITERATIONS,
};
use cva_kernels::Real;
use faer::{Mat, Side};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

const SIZES: [usize; 10] = [1, 2, 3, 7, 16, 30, 31, 33, 63, 64];
const BOUND: f64 = 30.0;
/// Random matrices per size in `random_matrices`.
const TRIALS: usize = 20;

/// `max` that propagates NaN.
fn nanmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn normal(rng: &mut StdRng) -> f64 {
    StandardNormal.sample(rng)
}

/// Worst ratios over a family of matrices.
#[derive(Debug, Clone, Copy, Default)]
struct Ratios {
    residual: f64,
    orthogonality: f64,
    eigenvalues: f64,
    count: usize,
    /// Largest iteration count of one secular equation.
    iterations: usize,
}

impl Ratios {
    fn join(self, o: Ratios) -> Ratios {
        Ratios {
            residual: nanmax(self.residual, o.residual),
            orthogonality: nanmax(self.orthogonality, o.orthogonality),
            eigenvalues: nanmax(self.eigenvalues, o.eigenvalues),
            count: self.count + o.count,
            iterations: self.iterations.max(o.iterations),
        }
    }

    fn report_and_check(self, name: &str, precision: &str) {
        println!(
            "{name:<34} {precision}: {:>4} matrices, residual {:6.3}, orthogonality {:6.3}, eigenvalues {:6.3}, secular iterations <= {}",
            self.count, self.residual, self.orthogonality, self.eigenvalues, self.iterations
        );
        for (what, r) in [
            ("residual", self.residual),
            ("orthogonality", self.orthogonality),
            ("eigenvalues", self.eigenvalues),
        ] {
            assert!(
                r <= BOUND,
                "{name} ({precision}): {what} ratio {r} exceeds {BOUND} (or is NaN)"
            );
        }
    }
}

/// Dense symmetric tridiagonal matrix.
fn dense(d: &[f64], e: &[f64]) -> Mat<f64> {
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

fn frobenius(m: &Mat<f64>) -> f64 {
    let mut s = 0.0;
    for j in 0..m.ncols() {
        for i in 0..m.nrows() {
            s += m[(i, j)] * m[(i, j)];
        }
    }
    s.sqrt()
}

/// faer's eigendecomposition (eigenvalues ascending, eigenvectors as columns).
fn reference_eigen(t: &Mat<f64>) -> (Vec<f64>, Mat<f64>) {
    let evd = t.self_adjoint_eigen(Side::Lower).expect("faer evd");
    let s = evd.S().column_vector();
    let lambda = (0..t.nrows()).map(|i| s[i]).collect();
    (lambda, evd.U().to_owned())
}

/// Runs `stedc` in precision `T` on `(d, e)` rounded to `T`, with leading dimension
/// `n + pad`. Returns the rounded matrix (in `f64`), the eigenvalues and the
/// eigenvectors (`n x n`, in `f64`).
#[allow(clippy::type_complexity)]
fn run_stedc<T: Real>(
    d: &[f64],
    e: &[f64],
    pad: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Mat<f64>, usize) {
    let n = d.len();
    let ldz = n + pad;
    let mut dt: Vec<T> = d.iter().map(|&x| T::from_f64(x)).collect();
    let mut et: Vec<T> = e.iter().map(|&x| T::from_f64(x)).collect();
    let dr: Vec<f64> = dt.iter().map(|x| x.to_f64()).collect();
    let er: Vec<f64> = et.iter().map(|x| x.to_f64()).collect();
    let mut z = vec![T::NAN; ldz * n];
    let mut ws = StedcWorkspace::<T>::new(64);
    if let Err(err) = stedc(n, &mut dt, &mut et, &mut z, ldz, &mut ws) {
        panic!(
            "stedc failed ({}, n = {n}): {err}\nd = {d:?}\ne = {e:?}",
            T::NAME
        );
    }
    // Rows n..ldz (padding) must be untouched.
    for c in 0..n {
        for r in n..ldz {
            assert!(z[r + c * ldz].is_nan(), "stedc wrote into the padding");
        }
    }
    let zm = Mat::from_fn(n, n, |i, j| z[i + j * ldz].to_f64());
    let lambda = dt.iter().map(|x| x.to_f64()).collect();
    (dr, er, lambda, zm, ws.max_secular_iterations())
}

/// Accuracy ratios of `stedc` in precision `T` on one matrix.
fn check<T: Real>(d: &[f64], e: &[f64], pad: usize) -> Ratios {
    check_scaled::<T>(d, e, pad, 1.0)
}

/// As [`check`], with the rounded matrix and the eigenvalues multiplied by `descale`
/// (a power of two, so exactly) before the ratios are measured in `f64`.
fn check_scaled<T: Real>(d: &[f64], e: &[f64], pad: usize, descale: f64) -> Ratios {
    let n = d.len();
    let eps = T::EPSILON.to_f64();
    let (dr, er, lambda, zm, iterations) = run_stedc::<T>(d, e, pad);
    let dr: Vec<f64> = dr.iter().map(|x| x * descale).collect();
    let er: Vec<f64> = er.iter().map(|x| x * descale).collect();
    let lambda: Vec<f64> = lambda.iter().map(|x| x * descale).collect();
    let t = dense(&dr, &er);
    let tnorm = frobenius(&t);
    let scale = if tnorm > 0.0 { tnorm } else { 1.0 };
    let nf = n as f64;

    let mut recon = t.clone();
    for j in 0..n {
        for i in 0..n {
            let mut s = 0.0;
            for k in 0..n {
                s += zm[(i, k)] * lambda[k] * zm[(j, k)];
            }
            recon[(i, j)] -= s;
        }
    }
    let residual = frobenius(&recon) / (nf * eps * scale);

    let mut ortho = Mat::<f64>::identity(n, n);
    for j in 0..n {
        for i in 0..n {
            let mut s = 0.0;
            for k in 0..n {
                s += zm[(k, i)] * zm[(k, j)];
            }
            ortho[(i, j)] -= s;
        }
    }
    let orthogonality = frobenius(&ortho) / (nf * eps);

    let (reference, _) = reference_eigen(&t);
    let mut eigenvalues = 0.0f64;
    for i in 0..n {
        eigenvalues = nanmax(
            eigenvalues,
            (lambda[i] - reference[i]).abs() / (nf * eps * scale),
        );
        // Not ascending (or NaN): poison the ratio.
        if i > 0 && lambda[i - 1].partial_cmp(&lambda[i]) == Some(std::cmp::Ordering::Greater)
            || lambda[i].is_nan()
        {
            eigenvalues = f64::NAN;
        }
    }
    Ratios {
        residual,
        orthogonality,
        eigenvalues,
        count: 1,
        iterations,
    }
}

/// Runs a family in both precisions and checks the bound.
fn check_family(name: &str, family: &[(Vec<f64>, Vec<f64>)]) {
    let mut r64 = Ratios::default();
    let mut r32 = Ratios::default();
    for (k, (d, e)) in family.iter().enumerate() {
        r64 = r64.join(check::<f64>(d, e, k % 3));
        r32 = r32.join(check::<f32>(d, e, k % 3));
    }
    r64.report_and_check(name, "f64");
    r32.report_and_check(name, "f32");
}

/// Tridiagonal with eigenvalues `lambda` (to `f64` accuracy): Lanczos on
/// `diag(lambda)` from a random start, with full reorthogonalisation; on breakdown
/// (exactly repeated eigenvalues) `e_k = 0` and a fresh orthogonal start.
fn lanczos(lambda: &[f64], rng: &mut StdRng) -> (Vec<f64>, Vec<f64>) {
    let n = lambda.len();
    let mut basis: Vec<Vec<f64>> = Vec::with_capacity(n);
    let mut d = vec![0.0; n];
    let mut e = vec![0.0; n.saturating_sub(1)];
    let orthonormalize = |v: &mut Vec<f64>, basis: &[Vec<f64>]| -> f64 {
        for _ in 0..2 {
            for b in basis {
                let c: f64 = v.iter().zip(b).map(|(x, y)| x * y).sum();
                for (x, y) in v.iter_mut().zip(b) {
                    *x -= c * y;
                }
            }
        }
        let nrm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        nrm
    };
    let mut q: Vec<f64> = (0..n).map(|_| normal(rng)).collect();
    let nrm = orthonormalize(&mut q, &basis);
    q.iter_mut().for_each(|x| *x /= nrm);
    for k in 0..n {
        let mut r: Vec<f64> = q.iter().zip(lambda).map(|(x, l)| x * l).collect();
        d[k] = r.iter().zip(&q).map(|(x, y)| x * y).sum();
        basis.push(q.clone());
        if k + 1 == n {
            break;
        }
        let mut beta = orthonormalize(&mut r, &basis);
        if beta <= 1e-13 * lambda.iter().fold(0.0f64, |m, x| m.max(x.abs())) {
            beta = 0.0;
            loop {
                r = (0..n).map(|_| normal(rng)).collect();
                let nrm = orthonormalize(&mut r, &basis);
                if nrm > 1e-3 {
                    r.iter_mut().for_each(|x| *x /= nrm);
                    break;
                }
            }
        } else {
            r.iter_mut().for_each(|x| *x /= beta);
        }
        e[k] = beta;
        q = r;
    }
    (d, e)
}

#[test]
fn random_matrices() {
    let mut r64 = Ratios::default();
    let mut r32 = Ratios::default();
    for &n in &SIZES {
        let mut rng = StdRng::seed_from_u64(1000 + n as u64);
        let mut s64 = Ratios::default();
        let mut s32 = Ratios::default();
        for trial in 0..TRIALS {
            let d: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
            let e: Vec<f64> = (0..n.saturating_sub(1)).map(|_| normal(&mut rng)).collect();
            s64 = s64.join(check::<f64>(&d, &e, trial % 3));
            s32 = s32.join(check::<f32>(&d, &e, trial % 3));
        }
        s64.report_and_check(&format!("random n={n}"), "f64");
        s32.report_and_check(&format!("random n={n}"), "f32");
        r64 = r64.join(s64);
        r32 = r32.join(s32);
    }
    r64.report_and_check("random (all sizes)", "f64");
    r32.report_and_check("random (all sizes)", "f32");
}

#[test]
fn identity_and_repeated_eigenvalues() {
    let mut family = Vec::new();
    let mut rng = StdRng::seed_from_u64(7);
    for &n in &SIZES {
        // Identity.
        family.push((vec![1.0; n], vec![0.0; n.saturating_sub(1)]));
        // Equal diagonal, tiny off-diagonals of several magnitudes.
        for mag in [1e-300, 1e-17, 1e-14, 1e-10, 1e-7, 1e-4] {
            let e = (0..n.saturating_sub(1))
                .map(|_| mag * normal(&mut rng))
                .collect();
            family.push((vec![1.0; n], e));
        }
        // (n-1)-fold eigenvalue 1: identity plus the rank-one block [[1, 1], [1, 1]].
        if n >= 2 {
            let k = n / 2 - usize::from(n % 2 == 0);
            let mut d = vec![1.0; n];
            let mut e = vec![0.0; n - 1];
            d[k] = 2.0;
            d[k + 1] = 2.0;
            e[k] = 1.0;
            family.push((d, e));
        }
        // Spectrum {1 (n-1 times), 4} through Lanczos (breakdowns give zero e's).
        let mut lambda = vec![1.0; n];
        lambda[n - 1] = 4.0;
        family.push(lanczos(&lambda, &mut rng));
    }
    check_family("identity / repeated eigenvalues", &family);
}

#[test]
fn zero_off_diagonals() {
    let mut family = Vec::new();
    let mut rng = StdRng::seed_from_u64(11);
    for &n in &SIZES {
        let m = n.saturating_sub(1);
        // Diagonal matrix (only sorting).
        let d: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        family.push((d, vec![0.0; m]));
        for trial in 0..6 {
            let d: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
            let e: Vec<f64> = (0..m)
                .map(|i| {
                    let u: f64 = rng.random();
                    if u < 0.3 {
                        0.0
                    } else if u < 0.45 {
                        // Negligible relative to the neighbouring diagonals.
                        1e-20 * (d[i] * d[i + 1]).abs().sqrt()
                    } else if trial % 2 == 0 && u < 0.5 {
                        1e-9
                    } else {
                        normal(&mut rng)
                    }
                })
                .collect();
            family.push((d, e));
        }
        // One single coupling.
        if n >= 2 {
            let d: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
            let mut e = vec![0.0; m];
            e[m / 2] = 1.0;
            family.push((d, e));
        }
    }
    check_family("zero off-diagonals (splitting)", &family);
}

#[test]
fn graded_matrices() {
    let mut family = Vec::new();
    let mut rng = StdRng::seed_from_u64(13);
    for &n in &SIZES {
        for &range in &[1e10f64, 1e20, 1e30] {
            let g = if n > 1 {
                (1.0 / range).powf(1.0 / (n as f64 - 1.0))
            } else {
                1.0
            };
            for reversed in [false, true] {
                let scale = |i: f64| -> f64 {
                    let p = if reversed { n as f64 - 1.0 - i } else { i };
                    g.powf(p)
                };
                let d: Vec<f64> = (0..n).map(|i| scale(i as f64) * normal(&mut rng)).collect();
                let e: Vec<f64> = (0..n.saturating_sub(1))
                    .map(|i| scale(i as f64 + 0.5) * normal(&mut rng))
                    .collect();
                family.push((d, e));
            }
            // Graded in the middle (large at both ends).
            let d: Vec<f64> = (0..n)
                .map(|i| {
                    let x = (2.0 * i as f64 / (n.max(2) - 1) as f64 - 1.0).abs();
                    range.powf(x - 1.0) * normal(&mut rng)
                })
                .collect();
            let e: Vec<f64> = (0..n.saturating_sub(1))
                .map(|i| {
                    let x = (2.0 * (i as f64 + 0.5) / (n.max(2) - 1) as f64 - 1.0).abs();
                    range.powf(x - 1.0) * normal(&mut rng)
                })
                .collect();
            family.push((d, e));
        }
    }
    check_family("graded", &family);
}

/// Wilkinson `W_{2m+1}^+`: `d_i = |m - i|`, `e_i = 1`.
fn wilkinson(n: usize) -> (Vec<f64>, Vec<f64>) {
    let m = (n / 2) as f64;
    (
        (0..n).map(|i| (m - i as f64).abs()).collect(),
        vec![1.0; n.saturating_sub(1)],
    )
}

#[test]
fn wilkinson_matrices() {
    let mut family = Vec::new();
    for n in [1, 3, 5, 7, 21, 31, 33, 63] {
        family.push(wilkinson(n));
    }
    check_family("Wilkinson W+", &family);
}

#[test]
fn glued_wilkinson_matrices() {
    let mut family = Vec::new();
    for (block, copies) in [(21, 3), (7, 9), (15, 4), (31, 2), (5, 12), (3, 21)] {
        for glue in [1e-14, 1e-10, 1e-6, 1e-3] {
            let (bd, be) = wilkinson(block);
            let mut d = Vec::new();
            let mut e = Vec::new();
            for c in 0..copies {
                d.extend_from_slice(&bd);
                e.extend_from_slice(&be);
                if c + 1 < copies {
                    e.push(glue);
                }
            }
            family.push((d, e));
        }
    }
    check_family("glued Wilkinson", &family);
}

#[test]
fn clustered_eigenvalues() {
    let mut family = Vec::new();
    let mut rng = StdRng::seed_from_u64(17);
    for &n in &SIZES {
        for &width in &[1e-14, 1e-10, 1e-6] {
            // Three clusters.
            let lambda: Vec<f64> = (0..n)
                .map(|i| [-1.0, 0.5, 2.0][i % 3] + width * normal(&mut rng))
                .collect();
            family.push(lanczos(&lambda, &mut rng));
            // One cluster and one outlier.
            let mut lambda: Vec<f64> = (0..n).map(|_| 1.0 + width * normal(&mut rng)).collect();
            lambda[0] = 10.0;
            family.push(lanczos(&lambda, &mut rng));
        }
        // Arithmetic cluster 1 + k 1e-10.
        let lambda: Vec<f64> = (0..n).map(|k| 1.0 + 1e-10 * k as f64).collect();
        family.push(lanczos(&lambda, &mut rng));
        // Equal diagonal with small off-diagonals: eigenvalues clustered around 1.
        let e: Vec<f64> = (0..n.saturating_sub(1))
            .map(|_| 1e-8 * normal(&mut rng))
            .collect();
        family.push((vec![1.0; n], e));
    }
    check_family("clustered eigenvalues", &family);
}

#[test]
fn negative_and_zero_eigenvalues() {
    let mut family = Vec::new();
    let mut rng = StdRng::seed_from_u64(19);
    for &n in &SIZES {
        // Zero diagonal, unit off-diagonal: eigenvalues 2 cos(kπ/(n+1)), ± pairs, 0 for odd n.
        family.push((vec![0.0; n], vec![1.0; n.saturating_sub(1)]));
        // Minus the path Laplacian: eigenvalues <= 0, one exactly 0.
        if n >= 2 {
            let mut d = vec![-2.0; n];
            d[0] = -1.0;
            d[n - 1] = -1.0;
            family.push((d, vec![1.0; n - 1]));
        }
        // Indefinite prescribed spectrum with zeros.
        let lambda: Vec<f64> = (0..n)
            .map(|i| {
                if i % 4 == 0 {
                    0.0
                } else {
                    3.0 * normal(&mut rng)
                }
            })
            .collect();
        family.push(lanczos(&lambda, &mut rng));
    }
    check_family("negative and zero eigenvalues", &family);
}

#[test]
fn non_finite_input_is_an_error() {
    let mut ws = StedcWorkspace::<f64>::new(4);
    for bad in [f64::NAN, f64::INFINITY] {
        let mut d = vec![1.0, bad, 2.0, 3.0];
        let mut e = vec![1.0; 3];
        let mut z = vec![f64::NAN; 16];
        assert_eq!(
            stedc(4, &mut d, &mut e, &mut z, 4, &mut ws),
            Err(StedcError::NonFinite)
        );
        let mut d = vec![1.0; 4];
        let mut e = vec![1.0, 1.0, bad];
        assert_eq!(
            stedc(4, &mut d, &mut e, &mut z, 4, &mut ws),
            Err(StedcError::NonFinite)
        );
    }
}

#[test]
fn extreme_scaling() {
    // The same random matrices scaled by powers of two to the ends of each precision's
    // range (the ratios are measured after exact descaling).
    let mut rng = StdRng::seed_from_u64(23);
    let mut r64 = Ratios::default();
    let mut r32 = Ratios::default();
    for &n in &SIZES {
        let d: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        let e: Vec<f64> = (0..n.saturating_sub(1)).map(|_| normal(&mut rng)).collect();
        for (p64, p32) in [(-1000, -120), (-500, -60), (500, 60), (1000, 120)] {
            let s = 2f64.powi(p64);
            let ds: Vec<f64> = d.iter().map(|x| x * s).collect();
            let es: Vec<f64> = e.iter().map(|x| x * s).collect();
            r64 = r64.join(check_scaled::<f64>(&ds, &es, 0, 1.0 / s));
            let s = 2f64.powi(p32);
            let ds: Vec<f64> = d.iter().map(|x| x * s).collect();
            let es: Vec<f64> = e.iter().map(|x| x * s).collect();
            r32 = r32.join(check_scaled::<f32>(&ds, &es, 0, 1.0 / s));
        }
    }
    r64.report_and_check("extreme scaling", "f64");
    r32.report_and_check("extreme scaling", "f32");
}

/// Secular equation roots against faer's eigenvalues of `diag(d) + ρ z z^T`; reports the
/// largest number of iterations.
fn secular_case<T: Real>(d: &[f64], z: &[f64], rho: f64) -> (f64, f64, usize) {
    let k = d.len();
    let eps = T::EPSILON.to_f64();
    let dt: Vec<T> = d.iter().map(|&x| T::from_f64(x)).collect();
    let zt: Vec<T> = z.iter().map(|&x| T::from_f64(x)).collect();
    let rt = T::from_f64(rho);
    let (dr, zr, rr): (Vec<f64>, Vec<f64>, f64) = (
        dt.iter().map(|x| x.to_f64()).collect(),
        zt.iter().map(|x| x.to_f64()).collect(),
        rt.to_f64(),
    );
    let m = Mat::from_fn(k, k, |i, j| {
        rr * zr[i] * zr[j] + if i == j { dr[i] } else { 0.0 }
    });
    let (reference, _) = reference_eigen(&m);
    let scale =
        dr.iter().fold(0.0f64, |a, x| a.max(x.abs())) + rr * zr.iter().map(|x| x * x).sum::<f64>();
    let mut delta = vec![T::NAN; k];
    let (mut worst_value, mut worst_delta, mut iters) = (0.0f64, 0.0f64, 0usize);
    for i in 0..k {
        let root = secular_equation_root(i, &dt, &zt, rt, &mut delta).expect("not converged");
        let l = root.lambda.to_f64();
        iters = iters.max(root.iterations);
        worst_value = nanmax(
            worst_value,
            (l - reference[i]).abs() / (k as f64 * eps * scale),
        );
        // Bracketing d_i < λ_i < d_{i+1}, seen in the differences (λ_i itself may round
        // onto a pole).
        assert!(
            delta[i].to_f64() < 0.0 && (i + 1 == k || delta[i + 1].to_f64() > 0.0),
            "root {i} outside its interval"
        );
        for j in 0..k {
            // delta_j is d_j - λ_i to a few ulps of max(|d_j - d_o|, |λ_i - d_o|).
            let err = ((dr[j] - l) - delta[j].to_f64()).abs();
            worst_delta = nanmax(worst_delta, err / (eps * (dr[j].abs() + l.abs())));
        }
    }
    (worst_value, worst_delta, iters)
}

#[test]
fn secular_equation() {
    let mut rng = StdRng::seed_from_u64(29);
    for name in ["f64", "f32"] {
        let (mut wv, mut wd, mut it) = (0.0f64, 0.0f64, 0usize);
        for k in 1..=64usize {
            for trial in 0..8 {
                let mut d: Vec<f64> = (0..k).map(|_| normal(&mut rng)).collect();
                if trial % 4 == 1 {
                    // Clustered poles.
                    d = (0..k).map(|i| (i / 4) as f64 + 1e-3 * i as f64).collect();
                }
                d.sort_by(|a, b| a.partial_cmp(b).unwrap());
                d.dedup();
                if d.len() != k {
                    continue;
                }
                let mut z: Vec<f64> = (0..k).map(|_| normal(&mut rng)).collect();
                if trial % 4 == 2 {
                    // Some tiny weights: roots very close to poles.
                    for (i, x) in z.iter_mut().enumerate() {
                        if i % 3 == 0 {
                            *x *= 1e-3;
                        }
                    }
                }
                let nz = z.iter().map(|x| x * x).sum::<f64>().sqrt();
                z.iter_mut().for_each(|x| *x /= nz);
                let rho = if trial % 4 == 3 {
                    1e-2
                } else {
                    0.1 + rng.random::<f64>()
                };
                let (v, dd, i) = if name == "f64" {
                    secular_case::<f64>(&d, &z, rho)
                } else {
                    secular_case::<f32>(&d, &z, rho)
                };
                wv = nanmax(wv, v);
                wd = nanmax(wd, dd);
                it = it.max(i);
            }
        }
        println!(
            "secular equation {name}: eigenvalue ratio {wv:.3}, delta ratio {wd:.3}, max iterations {it} (cap {SECULAR_MAX_ITERATIONS})"
        );
        assert!(
            wv <= BOUND && wd <= BOUND,
            "secular equation {name}: {wv} {wd}"
        );
    }
}

/// Truncated solve in precision `T` against a reference in `f64`. Returns the ratio
/// `||x - x_ref|| / (n ε κ ||x_ref||)`, `κ = max |λ| / min kept |λ|`, and checks the
/// count of discarded eigenvalues.
fn truncated_case<T: Real>(
    d: &[f64],
    e: &[f64],
    v: &[f64],
    threshold: f64,
    expected_discarded: usize,
    use_pinv: bool,
) -> f64 {
    let n = d.len();
    let eps = T::EPSILON.to_f64();
    let mut dt: Vec<T> = d.iter().map(|&x| T::from_f64(x)).collect();
    let mut et: Vec<T> = e.iter().map(|&x| T::from_f64(x)).collect();
    let t = dense(
        &dt.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
        &et.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
    );
    let mut z = vec![T::NAN; n * n];
    let mut ws = StedcWorkspace::<T>::new(n);
    stedc(n, &mut dt, &mut et, &mut z, n, &mut ws).expect("stedc");
    let mut x: Vec<T> = v.iter().map(|&a| T::from_f64(a)).collect();
    let vr: Vec<f64> = x.iter().map(|a| a.to_f64()).collect();
    let mut tmp = vec![T::NAN; n];
    let discarded = truncated_eigen_solve(n, &dt, &z, n, &mut x, &mut tmp, T::from_f64(threshold));
    assert_eq!(
        discarded,
        expected_discarded,
        "discarded count (n = {n}, {})",
        T::NAME
    );

    let (lambda, u) = reference_eigen(&t);
    let lmax = lambda.iter().fold(0.0f64, |a, l| a.max(l.abs()));
    let kept_min = lambda
        .iter()
        .filter(|l| l.abs() * threshold >= lmax)
        .fold(f64::INFINITY, |a, l| a.min(l.abs()));
    let reference: Vec<f64> = if use_pinv {
        // Minimum-norm least-squares solution through faer's SVD pseudo-inverse.
        let pinv = t.svd().expect("faer svd").pseudoinverse();
        (0..n)
            .map(|i| (0..n).map(|j| pinv[(i, j)] * vr[j]).sum())
            .collect()
    } else {
        let mut r = vec![0.0; n];
        for k in 0..n {
            if lambda[k].abs() * threshold >= lmax && lambda[k] != 0.0 {
                let c: f64 = (0..n).map(|i| u[(i, k)] * vr[i]).sum::<f64>() / lambda[k];
                for i in 0..n {
                    r[i] += c * u[(i, k)];
                }
            }
        }
        r
    };
    let diff = (0..n)
        .map(|i| (x[i].to_f64() - reference[i]).powi(2))
        .sum::<f64>()
        .sqrt();
    let rnorm = reference.iter().map(|a| a * a).sum::<f64>().sqrt();
    if rnorm == 0.0 {
        return if diff == 0.0 { 0.0 } else { f64::INFINITY };
    }
    let kappa = if kept_min.is_finite() {
        lmax / kept_min
    } else {
        1.0
    };
    diff / (n as f64 * eps * kappa * rnorm)
}

#[test]
fn truncated_solve_singular_and_small_eigenvalues() {
    let mut rng = StdRng::seed_from_u64(31);
    let threshold = 1e5;
    let (mut w_pinv64, mut w_pinv32, mut w_eig64, mut w_eig32) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for &n in &SIZES {
        // Path Laplacian: singular (null vector 1), minimum-norm solution = pinv(T) v.
        let mut d = vec![2.0; n];
        d[0] = 1.0;
        d[n - 1] = 1.0;
        if n == 1 {
            d[0] = 0.0;
        }
        let e = vec![-1.0; n.saturating_sub(1)];
        let v: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        // n = 1: T = [0], every eigenvalue discarded.
        let expected = 1;
        w_pinv64 = nanmax(
            w_pinv64,
            truncated_case::<f64>(&d, &e, &v, threshold, expected, true),
        );
        w_pinv32 = nanmax(
            w_pinv32,
            truncated_case::<f32>(&d, &e, &v, threshold, expected, true),
        );

        // Prescribed indefinite spectrum: some eigenvalues far below max/threshold (to
        // be discarded), the others far above it.
        for trial in 0..4 {
            let lambda: Vec<f64> = (0..n)
                .map(|i| {
                    let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                    match (i + trial) % 5 {
                        0 => 0.0,
                        1 => sign * 1e-9 * (1.0 + rng.random::<f64>()),
                        _ => sign * (0.05 + 5.0 * rng.random::<f64>()),
                    }
                })
                .collect();
            let lmax = lambda.iter().fold(0.0f64, |a, l| a.max(l.abs()));
            let expected = lambda.iter().filter(|l| l.abs() * threshold < lmax).count()
                + usize::from(lmax == 0.0) * n;
            let (d, e) = lanczos(&lambda, &mut rng);
            let v: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
            w_eig64 = nanmax(
                w_eig64,
                truncated_case::<f64>(&d, &e, &v, threshold, expected, false),
            );
            w_eig32 = nanmax(
                w_eig32,
                truncated_case::<f32>(&d, &e, &v, threshold, expected, false),
            );
        }
    }
    println!("truncated solve, singular Laplacian vs faer pinv      f64: {w_pinv64:.3}, f32: {w_pinv32:.3}");
    println!("truncated solve, small eigenvalues vs faer eigen-ref  f64: {w_eig64:.3}, f32: {w_eig32:.3}");
    for (what, r) in [
        ("pinv f64", w_pinv64),
        ("pinv f32", w_pinv32),
        ("eigen f64", w_eig64),
        ("eigen f32", w_eig32),
    ] {
        assert!(r <= BOUND, "truncated solve {what}: ratio {r}");
    }
}

#[test]
fn truncated_solve_keeps_everything_when_well_conditioned() {
    // With a loose threshold on a well-conditioned T the result is T^{-1} v.
    let n = 30;
    let mut rng = StdRng::seed_from_u64(37);
    let d: Vec<f64> = (0..n).map(|_| 4.0 + normal(&mut rng).abs()).collect();
    let e: Vec<f64> = (0..n - 1)
        .map(|_| normal(&mut rng).clamp(-1.0, 1.0))
        .collect();
    let v: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
    let r = truncated_case::<f64>(&d, &e, &v, 1e12, 0, true);
    println!("truncated solve, well conditioned (nothing discarded) f64: {r:.3}");
    assert!(r <= BOUND);
}

#[test]
fn workspace_reuse_is_deterministic() {
    // One workspace serving many sizes gives bit-identical results to a fresh one.
    let mut rng = StdRng::seed_from_u64(41);
    let mut shared = StedcWorkspace::<f64>::new(64);
    for &n in SIZES.iter().rev().chain(SIZES.iter()) {
        let d: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        let e: Vec<f64> = (0..n.saturating_sub(1)).map(|_| normal(&mut rng)).collect();
        let mut outputs = Vec::new();
        for fresh in [true, false] {
            let mut dd = d.clone();
            let mut ee = e.clone();
            let mut z = vec![f64::NAN; n * n];
            let mut own = StedcWorkspace::<f64>::new(n);
            let ws = if fresh { &mut own } else { &mut shared };
            stedc(n, &mut dd, &mut ee, &mut z, n, ws).expect("stedc");
            outputs.push((dd, z));
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&outputs[0].0),
            bits(&outputs[1].0),
            "eigenvalues, n = {n}"
        );
        assert_eq!(
            bits(&outputs[0].1),
            bits(&outputs[1].1),
            "eigenvectors, n = {n}"
        );
    }
}
