//! Block `L D L^T` with `2 x 2` pivots in Gauss-Jordan form, `f64`: the CPU reference
//! ("mirror") of the one-warp GPU solver of the fused walk (`walk_gj`, `walk_check` and
//! `walk_solve` in `kernels/cuda/walk.cu`), reproduced bit for bit.
//!
//! `A = L D L^T` with `L` unit block lower triangular and `D` block diagonal of `2 x 2`
//! blocks `P_t` (no pivoting). In Gauss-Jordan form every row other than the pivot pair is
//! eliminated at each step (the rows above it too), so that no `L` is stored and there is
//! no back substitution: `x` of pair `t` is `P_t^{-1}` times the pair's final right-hand
//! side. The acceptance of [`gj2_solve_checked`] is that of level 0 of the escalating
//! strategy ([`Strategy::Escalating`](crate::Strategy::Escalating), `batch::escalate`) in
//! product form (the GPU's `walk_check`: no division on its path).
//!
//! # Layout
//! * `a`: `n x n` column-major, entry `(r, c)` at `a[r + c*n]`; only the **lower
//!   triangle** (`r >= c`) is read, the strict upper triangle may hold anything.
//! * `b`, `x`: length `n`.
//! * `n` even, `2 <= n <= 62`.

use crate::SolverParams;

/// Largest system size [`gj2_solve`] accepts.
pub const GJ2_MAX_N: usize = 62;

/// Row stride of the work array: `n` matrix columns and the right-hand side.
const STRIDE: usize = GJ2_MAX_N + 1;

/// Outcome of [`gj2_solve_checked`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gj2Report {
    /// Every pivot block had `p00 > 0` and `det > 0` (the matrix is numerically positive
    /// definite as far as the factorization can tell; false on NaN).
    pub positive_pivots: bool,
    /// `min(1, min_j D_j / A_jj)` over the scalar `L D L^T` pivots
    /// (`D_J = p00`, `D_{J+1} = det / p00` for every block); NaN unless
    /// [`positive_pivots`](Self::positive_pivots).
    pub pivot_ratio: f64,
    /// The normwise relative residual of `x`, `max_i |r_i| / (max_i sum_k |a_ik| *
    /// max_i |x_i| + max_i |b_i|)` (0 where the denominator is 0; NaN where some `r_i` is
    /// NaN or some `x_i` is not finite), with `r_i = b_i - (A x)_i` and `(A x)_i` summed
    /// as the sum over even `k` plus the sum over odd `k`, each in column order from 0:
    /// [`ResidualCheck::residual`](crate::batch::ResidualCheck::residual) up to rounding.
    pub residual: f64,
    /// The solution growth `max_i sum_k |s_i a_ik s_k| * max_i |x_i| t_i / max_i |s_i b_i|`
    /// (`s_i = 1 / sqrt(|a_ii|)`, `t_i = sqrt(|a_ii|)`, both 1 where `a_ii = 0`; 0 where the
    /// numerator is 0; NaN with the residual):
    /// [`ResidualCheck::growth`](crate::batch::ResidualCheck::growth) up to rounding.
    pub growth: f64,
    /// The solution is accepted by level 0's test in product form (see
    /// [`gj2_solve_checked`]): positive pivots, neither the growth nor the inverse pivot
    /// ratio above [`SolverParams::escalation_condition`], and the residual at most
    /// [`SolverParams::tolerance`] (NaN is not accepted).
    pub accepted: bool,
    /// The first solution failed the test and one step of iterative refinement ran
    /// (the numbers above are those of the refined solution).
    pub refined: bool,
}

/// Solves the symmetric system `A x = b` by block `L D L^T` with `2 x 2` pivots in
/// Gauss-Jordan form, in the exact arithmetic order of the GPU solver.
///
/// * `a`: `n x n` column-major, lower triangle read (see the [module](self) layout).
/// * `b`: length `n`; `x`: length `n`, overwritten (always, even when the pivots are
///   not positive: the GPU computes it regardless).
///
/// Returns `(positive_pivots, pivot_ratio)`: whether every pivot block had `p00 > 0` and
/// `det > 0`, and `min(1, min_j D_j / A_jj)` over the scalar pivots `D_J = p00`,
/// `D_{J+1} = det / p00` (NaN when the pivots are not positive).
///
/// # Algorithm
/// Work array `w[i][k]`, `i < n`, `k <= n`: `w[i][k] = A(max(i,k), min(i,k))` for `k < n`,
/// `w[i][n] = b_i` (GPU lane `i` holds row `i`). For every pair `t`, `J = 2t`, every row is
/// updated from a snapshot taken at the start of the step: the pair's columns
/// `c0[k] = w[k][J]`, `c1[k] = w[k][J+1]` (`J <= k < n`, read from row `k`),
/// `c0[n] = w[J][n]`, `c1[n] = w[J+1][n]`, and the row's own `u0 = w[i][J]`,
/// `u1 = w[i][J+1]`:
///
/// ```text
/// p00 = c0[J], p01 = c0[J+1], p11 = c1[J+1]
/// det = fma(p00, p11, -(p01 p01));  good &= p00 > 0 && det > 0;  rdet = 1 / det
/// m0 = fma(u0, p11, -u1 p01) - fma(u1, p01, -u1 p01)   (Kahan's difference of products;
/// m1 = fma(u1, p00, -u0 p01) - fma(u0, p01, -u0 p01)    0 for the pivot rows J, J+1)
/// l0 = m0 rdet, l1 = m1 rdet
/// J + 2 < n:  w[i][k] = fma(-rdet, fma(m1, c1[k], m0 c0[k]), w[i][k])  for k = J+2, J+3, n
/// otherwise:  w[i][n] = fma(-l1, c1[n], fma(-l0, c0[n], w[i][n]))
/// w[i][k] = fma(-l1, c1[k], fma(-l0, c0[k], w[i][k]))                  for J+4 <= k < n
/// P_t^{-1} = [[p11 rdet, -p01 rdet], [-p01 rdet, p00 rdet]]
/// ```
///
/// Then with `z_i = w[i][n]`: `x_J = fma(i00, z_J, i01 z_{J+1})`,
/// `x_{J+1} = fma(i01, z_J, i11 z_{J+1})`. The pivot rows go through the same formulas with
/// `m = 0`: finite values are unchanged, NaN and infinities propagate as on the GPU.
/// `1 / det` is the correctly rounded division (the GPU's reciprocal is correctly rounded
/// for `det` in `[2^-1000, 2^1001)`; outside that range the two may differ).
///
/// # Panics
/// If `n` is odd, `n < 2`, `n > 62`, `a.len() < n*n`, `b.len() < n` or `x.len() < n`.
#[track_caller]
pub fn gj2_solve(n: usize, a: &[f64], b: &[f64], x: &mut [f64]) -> (bool, f64) {
    gj2_eliminate(n, a, b, x, &mut [[0.0; 2]; GJ2_MAX_N / 2])
}

/// [`gj2_solve`], also writing every pivot block's `[p00, det]` into `piv[t]`.
#[track_caller]
fn gj2_eliminate(
    n: usize,
    a: &[f64],
    b: &[f64],
    x: &mut [f64],
    piv: &mut [[f64; 2]; GJ2_MAX_N / 2],
) -> (bool, f64) {
    assert!(
        (2..=GJ2_MAX_N).contains(&n),
        "gj2_solve: n = {n} outside 2..={GJ2_MAX_N}"
    );
    assert!(
        n.is_multiple_of(2),
        "gj2_solve: n = {n} is odd (2 x 2 pivot blocks)"
    );
    assert!(
        a.len() >= n * n,
        "gj2_solve: a.len() = {} < n*n = {}",
        a.len(),
        n * n
    );
    assert!(b.len() >= n, "gj2_solve: b.len() = {} < n = {n}", b.len());
    assert!(x.len() >= n, "gj2_solve: x.len() = {} < n = {n}", x.len());

    // w[i*STRIDE + k]: row i of the augmented symmetric matrix [A b].
    let mut w = [0.0f64; GJ2_MAX_N * STRIDE];
    for i in 0..n {
        let row = &mut w[i * STRIDE..i * STRIDE + n + 1];
        for (k, wk) in row.iter_mut().enumerate().take(n) {
            *wk = a[i.max(k) + i.min(k) * n];
        }
        row[n] = b[i];
    }
    // Blocks' inverses (i00, i01, i11) per pair.
    let mut inv = [[0.0f64; 3]; GJ2_MAX_N / 2];
    let mut good = true;
    let mut ratio = 1.0f64;
    let mut c0 = [0.0f64; STRIDE];
    let mut c1 = [0.0f64; STRIDE];
    for (t, inv_t) in inv.iter_mut().enumerate().take(n / 2) {
        let j = 2 * t;
        // Snapshot of the pair's columns (from rows J..n-1) and of its rows' right-hand sides.
        for k in j..n {
            c0[k] = w[k * STRIDE + j];
            c1[k] = w[k * STRIDE + j + 1];
        }
        c0[n] = w[j * STRIDE + n];
        c1[n] = w[(j + 1) * STRIDE + n];
        let (p00, p01, p11) = (c0[j], c0[j + 1], c1[j + 1]);
        let det = p00.mul_add(p11, -(p01 * p01));
        good = good && p00 > 0.0 && det > 0.0;
        if good {
            ratio = ratio.min(p00 / a[j + j * n]);
            ratio = ratio.min((det / p00) / a[(j + 1) + (j + 1) * n]);
        }
        let rdet = 1.0 / det;
        for i in 0..n {
            let row = &mut w[i * STRIDE..i * STRIDE + n + 1];
            let below = i != j && i != j + 1;
            let (u0, u1) = (row[j], row[j + 1]);
            // Kahan's difference of products (the subtracted product's rounding error
            // added back).
            let t0 = u1 * p01;
            let t1 = u0 * p01;
            let m0 = if below {
                u0.mul_add(p11, -t0) - u1.mul_add(p01, -t0)
            } else {
                0.0
            };
            let m1 = if below {
                u1.mul_add(p00, -t1) - u0.mul_add(p01, -t1)
            } else {
                0.0
            };
            let l0 = m0 * rdet;
            let l1 = m1 * rdet;
            if j + 2 < n {
                for k in [j + 2, j + 3, n] {
                    let tk = m1.mul_add(c1[k], m0 * c0[k]);
                    row[k] = (-rdet).mul_add(tk, row[k]);
                }
            } else {
                // The last pair: only the right-hand side is left (rows above it).
                row[n] = (-l1).mul_add(c1[n], (-l0).mul_add(c0[n], row[n]));
            }
            for k in j + 4..n {
                row[k] = (-l1).mul_add(c1[k], (-l0).mul_add(c0[k], row[k]));
            }
        }
        *inv_t = [p11 * rdet, -p01 * rdet, p00 * rdet];
        piv[t] = [p00, det];
    }
    // x = D^-1 z by the blocks' inverses.
    for (t, &[i00, i01, i11]) in inv.iter().enumerate().take(n / 2) {
        let j = 2 * t;
        let z0 = w[j * STRIDE + n];
        let z1 = w[(j + 1) * STRIDE + n];
        x[j] = i00.mul_add(z0, i01 * z1);
        x[j + 1] = i01.mul_add(z0, i11 * z1);
    }
    (good, if good { ratio } else { f64::NAN })
}

/// [`gj2_solve`], then the acceptance of level 0 of the escalating strategy
/// (`batch::escalate`) in product form, with `thr = params.escalation_condition::<f64>()`
/// and `tol = params.tolerance::<f64>(n)`: with `r_i`, `s_i`, `t_i` as in
/// [`Gj2Report::residual`] and [`Gj2Report::growth`],
///
/// ```text
/// bad      = some r_i is NaN or some x_i is not finite
/// ill      = some scalar pivot D_i thr < a_ii   (D_J = p00 as p00 thr < a_JJ;
///                                              D_{J+1} = det / p00 as det thr < a_{J+1,J+1} p00)
///            || max_i sum_k |s_i a_ik s_k| * max_i |x_i| t_i > thr * max_i |s_i b_i|
/// accepted = positive_pivots && !bad && !ill
///            && max_i |r_i| <= tol * (max_i sum_k |a_ik| * max_i |x_i| + max_i |b_i|)
/// ```
///
/// `residual_check`'s tests (`residual <= tol`, `growth <= thr`, `pivot_ratio * thr >= 1`)
/// with the divisions multiplied out, so the two agree except at rounding boundaries.
/// Where the test fails with positive pivots, one step of iterative refinement in the
/// working precision (Skeel 1980): `x_i += d_i` with `d` from [`gj2_solve`] of `A d = r`
/// (`r` as summed for the test), and the test again. The elimination is not backward
/// stable as `L D L^T` with substitutions is (its residual grows with the condition
/// number); the refinement step makes up for it. The GPU's `walk_solve` (`walk_gj`,
/// `walk_matrix_norms`, `walk_check`) does the same operations.
///
/// `x` is always written (not reset to NaN when rejected).
///
/// # Panics
/// As [`gj2_solve`].
#[track_caller]
pub fn gj2_solve_checked(
    n: usize,
    a: &[f64],
    b: &[f64],
    x: &mut [f64],
    params: &SolverParams,
) -> Gj2Report {
    let thr = params.escalation_condition::<f64>();
    let tol = params.tolerance::<f64>(n);
    let mut piv = [[0.0f64; 2]; GJ2_MAX_N / 2];
    let (positive_pivots, pivot_ratio) = gj2_eliminate(n, a, b, x, &mut piv);
    let entry = |i: usize, k: usize| a[i.max(k) + i.min(k) * n];

    // The parts that depend on A and b alone (walk_matrix_norms), and the pivot test.
    let (mut a_max, mut sa_max, mut b_max, mut sb_max) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut s = [1.0f64; GJ2_MAX_N];
    let mut t = [1.0f64; GJ2_MAX_N];
    for i in 0..n {
        let d = entry(i, i).abs();
        if d > 0.0 {
            s[i] = 1.0 / d.sqrt();
            t[i] = d.sqrt();
        }
    }
    let mut pivot_ill = false;
    for i in 0..n {
        let (mut rsum, mut srow) = (0.0f64, 0.0f64);
        for k in 0..n {
            let arc = entry(i, k);
            rsum += arc.abs();
            srow += (s[i] * arc * s[k]).abs();
        }
        a_max = a_max.max(rsum);
        sa_max = sa_max.max(srow);
        b_max = b_max.max(b[i].abs());
        sb_max = sb_max.max((s[i] * b[i]).abs());
        let [p00, det] = piv[i / 2];
        let aii = entry(i, i);
        pivot_ill |= if i % 2 == 1 {
            det * thr < aii * p00
        } else {
            p00 * thr < aii
        };
    }

    // walk_check: the residual in two sums, the maxima, the test.
    let test = |x: &[f64], r: &mut [f64; GJ2_MAX_N], refined: bool| {
        let (mut r_max, mut x_max, mut sx_max) = (0.0f64, 0.0f64, 0.0f64);
        let mut bad = false;
        for i in 0..n {
            let (mut acc0, mut acc1) = (0.0f64, 0.0f64);
            for k in (0..n).step_by(2) {
                acc0 += entry(i, k) * x[k];
                acc1 += entry(i, k + 1) * x[k + 1];
            }
            r[i] = b[i] - (acc0 + acc1);
            let ri = r[i].abs();
            bad |= ri.is_nan() || !x[i].is_finite();
            r_max = r_max.max(ri);
            x_max = x_max.max(x[i].abs());
            sx_max = sx_max.max(x[i].abs() * t[i]);
        }
        if bad {
            return Gj2Report {
                positive_pivots,
                pivot_ratio,
                residual: f64::NAN,
                growth: f64::NAN,
                accepted: false,
                refined,
            };
        }
        let den = a_max * x_max + b_max;
        let sax = sa_max * sx_max;
        Gj2Report {
            positive_pivots,
            pivot_ratio,
            residual: if den == 0.0 { 0.0 } else { r_max / den },
            growth: if sax == 0.0 { 0.0 } else { sax / sb_max },
            // (GPU: !(sax > thr * sb_max), false only where sax > thr * sb_max)
            accepted: positive_pivots
                && !pivot_ill
                && r_max <= tol * den
                && sax.partial_cmp(&(thr * sb_max)) != Some(std::cmp::Ordering::Greater),
            refined,
        }
    };
    let mut r = [0.0f64; GJ2_MAX_N];
    let first = test(x, &mut r, false);
    if first.accepted || !positive_pivots {
        return first;
    }
    let mut d = [0.0f64; GJ2_MAX_N];
    gj2_solve(n, a, &r[..n], &mut d[..n]);
    for (xi, di) in x.iter_mut().zip(&d).take(n) {
        *xi += di;
    }
    test(x, &mut r, true)
}
