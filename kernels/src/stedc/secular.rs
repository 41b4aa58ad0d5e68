//! The secular equation of a rank-one modification of a diagonal matrix
//! (LAPACK `dlaed4`, `dlaed5`; Li 1994, LAPACK Working Note 89).
//!
//! All arithmetic is plain `+ - * /` and `sqrt` so that a CUDA version compiled with
//! `--fmad=false` rounds identically.

use crate::Real;

/// Iteration cap of [`secular_equation_root`] (the one of LAPACK `dlaed4`). In the tests
/// the largest count observed is reported by `secular_iterations` in `tests/stedc.rs`.
pub const SECULAR_MAX_ITERATIONS: usize = 30;

/// A converged root of the secular equation, see [`secular_equation_root`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecularRoot<T> {
    /// The root `λ_i`.
    pub lambda: T,
    /// Rational-interpolation steps taken (0 for the closed forms `k <= 2`).
    pub iterations: usize,
}

/// The `i`-th root (0-based, ascending) of the secular equation
///
/// `f(λ) = 1/ρ + Σ_j z_j^2 / (d_j - λ) = 0`,
///
/// the `i`-th eigenvalue of `diag(d) + ρ z z^T` (LAPACK `dlaed4`, with `dlaed5` for
/// `k = 2`).
///
/// * `d`: length `k >= 1`, **strictly increasing**; `z`: length `k`, all `z_j != 0`;
///   `ρ > 0`. Then `d_i < λ_i < d_{i+1}` for `i < k - 1` and
///   `d_{k-1} < λ_{k-1} <= d_{k-1} + ρ z^T z`.
/// * `delta`: length `>= k`; on exit `delta[j] = d_j - λ_i` for `j < k`, computed
///   without cancellation: the iteration runs on `τ = λ - d_o` for the origin `d_o`,
///   the pole nearer to the root (`d_i` or `d_{i+1}`, chosen by the sign of `f` at
///   the midpoint; `d_{k-1}` for the last root), and `delta[j] = (d_j - d_o) - τ`.
///   These differences are what the Gu–Eisenstat (Löwner) recomputation of `z` and
///   the eigenvectors need.
///
/// # Method
/// * `k = 1`: `λ = d_0 + ρ z_0^2`. `k = 2`: the root of the quadratic equation
///   (`dlaed5`), taken in the form free of cancellation.
/// * `k >= 3`: the initial guess solves the model with the two poles bracketing the
///   root kept exactly and the other terms frozen at the midpoint (`dlaed4`). Each
///   step solves Li's "middle way" model `c + s/(d_a - λ) + S/(d_b - λ)`, where
///   `a, b` are the two poles bracketing the root (`k-2, k-1` for the last root) and
///   `s, S` osculate the sums over the poles at or left of `a` and right of `a`;
///   for interior roots, when `|f|` fails to drop by a factor of 10 the model is
///   switched to the fixed-weight one (the origin pole's weight `z_o^2` exact), and
///   back. A step in the wrong direction is replaced by a Newton step, and a step
///   leaving the bracket `(lo, hi)` (updated from the sign of `f`) by bisection.
/// * Converged when `|f(λ)| <= ε (8 (Σ_j |z_j^2/(d_j - λ)| + 1/ρ) + |τ| f'(λ))`, a
///   bound on the rounding error of the evaluation of `f`, or when the iterate stops
///   moving in floating point.
///
/// Returns `None` if not converged after [`SECULAR_MAX_ITERATIONS`] steps.
///
/// # Panics
/// If `k = 0`, `i >= k`, `z.len() != k` or `delta.len() < k`.
#[track_caller]
pub fn secular_equation_root<T: Real>(
    i: usize,
    d: &[T],
    z: &[T],
    rho: T,
    delta: &mut [T],
) -> Option<SecularRoot<T>> {
    let k = d.len();
    assert!(k >= 1, "secular equation of size 0");
    assert!(i < k, "root index {i} out of range for size {k}");
    assert_eq!(z.len(), k, "z must have the length of d");
    assert!(delta.len() >= k, "delta shorter than d");
    match k {
        1 => {
            let t = rho * z[0] * z[0];
            delta[0] = -t;
            Some(SecularRoot {
                lambda: d[0] + t,
                iterations: 0,
            })
        }
        2 => Some(two_poles(i, d, z, rho, delta)),
        _ if i == k - 1 => last_root(d, z, rho, delta),
        _ => interior_root(i, d, z, rho, delta),
    }
}

/// Root in `(p, q)` of `h(η) = c (p - η)(q - η) + s (q - η) + S (p - η)
/// = c η^2 - a η + b` with `p < q`, `s, S > 0` (so `h(p) > 0 > h(q)`): for either sign
/// of `c` it is `(a - sqrt(a^2 - 4bc)) / (2c)`, evaluated without cancellation.
#[inline]
fn root_between<T: Real>(a: T, b: T, c: T) -> T {
    let two = T::from_f64(2.0);
    let four = T::from_f64(4.0);
    let disc = (a * a - four * b * c).abs().sqrt();
    if a <= T::ZERO {
        (a - disc) / (two * c)
    } else {
        two * b / (a + disc)
    }
}

/// Root right of both poles `p < q` of the same quadratic (`c > 0`): the larger root
/// `(a + sqrt(a^2 - 4bc)) / (2c)`, evaluated without cancellation.
#[inline]
fn root_right<T: Real>(a: T, b: T, c: T) -> T {
    let two = T::from_f64(2.0);
    let four = T::from_f64(4.0);
    let disc = (a * a - four * b * c).abs().sqrt();
    if a >= T::ZERO {
        (a + disc) / (two * c)
    } else {
        two * b / (a - disc)
    }
}

/// `k = 2` in closed form (the role of LAPACK `dlaed5`). The quadratic is the model of
/// [`root_between`] with `c = 1/ρ`, multiplied through by `ρ`.
fn two_poles<T: Real>(i: usize, d: &[T], z: &[T], rho: T, delta: &mut [T]) -> SecularRoot<T> {
    let two = T::from_f64(2.0);
    let gap = d[1] - d[0];
    let w0 = z[0] * z[0];
    let w1 = z[1] * z[1];
    // Sign of ρ·gap·f(midpoint) decides the nearer pole for the first root.
    let origin_left = i == 0 && gap + two * rho * (w1 - w0) >= T::ZERO;
    if origin_left {
        // τ = λ - d_0 in (0, gap/2]; poles at p = 0, q = gap.
        let a = gap + rho * (w0 + w1);
        let b = rho * w0 * gap;
        let tau = root_between(a, b, T::ONE);
        delta[0] = -tau;
        delta[1] = gap - tau;
        SecularRoot {
            lambda: d[0] + tau,
            iterations: 0,
        }
    } else {
        // τ = λ - d_1; poles at p = -gap, q = 0.
        let a = rho * (w0 + w1) - gap;
        let b = -(rho * w1 * gap);
        let tau = if i == 0 {
            root_between(a, b, T::ONE)
        } else {
            root_right(a, b, T::ONE)
        };
        delta[0] = -gap - tau;
        delta[1] = -tau;
        SecularRoot {
            lambda: d[1] + tau,
            iterations: 0,
        }
    }
}

/// Values of the secular function at `τ` (relative to the origin pole), split into the
/// sum over poles `j <= split` (`ψ`) and `j > split` (`φ`).
struct Evaluation<T> {
    f: T,
    dpsi: T,
    dphi: T,
    /// Bound on the rounding error of `f`, divided by ε.
    err: T,
}

#[inline]
fn evaluate<T: Real>(
    d: &[T],
    z: &[T],
    rhoinv: T,
    origin: usize,
    split: usize,
    tau: T,
    delta: &mut [T],
) -> Evaluation<T> {
    let mut psi = T::ZERO;
    let mut dpsi = T::ZERO;
    let mut phi = T::ZERO;
    let mut dphi = T::ZERO;
    let mut abs_sum = T::ZERO;
    let d_origin = d[origin];
    for j in 0..d.len() {
        let dj = (d[j] - d_origin) - tau;
        delta[j] = dj;
        let t = z[j] / dj;
        let term = z[j] * t;
        if j <= split {
            psi += term;
            dpsi += t * t;
        } else {
            phi += term;
            dphi += t * t;
        }
        abs_sum += term.abs();
    }
    let f = rhoinv + psi + phi;
    let err = T::from_f64(8.0) * (abs_sum + rhoinv) + tau.abs() * (dpsi + dphi);
    Evaluation { f, dpsi, dphi, err }
}

/// Roots `0 <= i < k - 1` for `k >= 3`: `λ_i` in `(d_i, d_{i+1})`.
fn interior_root<T: Real>(
    i: usize,
    d: &[T],
    z: &[T],
    rho: T,
    delta: &mut [T],
) -> Option<SecularRoot<T>> {
    let k = d.len();
    let ip1 = i + 1;
    let two = T::from_f64(2.0);
    let tenth = T::from_f64(0.1);
    let rhoinv = T::ONE / rho;
    let gap = d[ip1] - d[i];
    let mid = gap / two;

    // Initial guess: poles i and i+1 exact, the others frozen at the midpoint.
    let mut c0 = rhoinv;
    for j in 0..k {
        if j != i && j != ip1 {
            c0 += z[j] * z[j] / ((d[j] - d[i]) - mid);
        }
    }
    let wi = z[i] * z[i];
    let wip1 = z[ip1] * z[ip1];
    let fmid = c0 - wi / mid + wip1 / (gap - mid);
    let (origin, mut lo, mut hi, mut tau);
    if fmid >= T::ZERO {
        // Root in (d_i, midpoint]: origin d_i, poles at p = 0, q = gap.
        origin = i;
        lo = T::ZERO;
        hi = mid;
        tau = root_between(c0 * gap + wi + wip1, wi * gap, c0);
    } else {
        // Root in (midpoint, d_{i+1}): origin d_{i+1}, poles at p = -gap, q = 0.
        origin = ip1;
        lo = -mid;
        hi = T::ZERO;
        tau = root_between(wi + wip1 - c0 * gap, -(wip1 * gap), c0);
    }
    if !(tau > lo && tau < hi) {
        tau = (lo + hi) / two;
    }

    let mut fixed_weight = false;
    let mut f_prev = T::ZERO;
    for iteration in 0..SECULAR_MAX_ITERATIONS {
        let ev = evaluate(d, z, rhoinv, origin, i, tau, delta);
        let f = ev.f;
        if f.abs() <= T::EPSILON * ev.err {
            return Some(SecularRoot {
                lambda: d[origin] + tau,
                iterations: iteration,
            });
        }
        if f < T::ZERO {
            lo = tau;
        } else {
            hi = tau;
        }
        if iteration > 0 && f * f_prev > T::ZERO && f.abs() > tenth * f_prev.abs() {
            fixed_weight = !fixed_weight;
        }
        f_prev = f;

        let df = ev.dpsi + ev.dphi;
        let p = delta[i];
        let q = delta[ip1];
        let c = if !fixed_weight {
            // Middle way: ψ osculated by a pole at d_i, φ by a pole at d_{i+1}.
            f - p * ev.dpsi - q * ev.dphi
        } else if origin == i {
            let r = z[i] / p;
            f - q * df - (p - q) * (r * r)
        } else {
            let r = z[ip1] / q;
            f - p * df - (q - p) * (r * r)
        };
        let a = (p + q) * f - p * q * df;
        let b = p * q * f;
        let mut eta = root_between(a, b, c);
        if !eta.is_finite() || f * eta >= T::ZERO {
            eta = -f / df;
        }
        let mut next = tau + eta;
        if !(next > lo && next < hi) {
            next = if f < T::ZERO {
                (tau + hi) / two
            } else {
                (tau + lo) / two
            };
        }
        if next == tau {
            // No representable progress: τ is the root to working precision.
            return Some(SecularRoot {
                lambda: d[origin] + tau,
                iterations: iteration + 1,
            });
        }
        tau = next;
    }
    None
}

/// The last root `λ_{k-1}` in `(d_{k-1}, d_{k-1} + ρ z^T z]` for `k >= 3`, with origin
/// `d_{k-1}`.
fn last_root<T: Real>(d: &[T], z: &[T], rho: T, delta: &mut [T]) -> Option<SecularRoot<T>> {
    let k = d.len();
    let n1 = k - 1;
    let n2 = k - 2;
    let two = T::from_f64(2.0);
    let rhoinv = T::ONE / rho;
    let mut znorm2 = T::ZERO;
    for &zj in z {
        znorm2 += zj * zj;
    }
    let ub = rho * znorm2;
    let mid = ub / two;

    // Initial guess: poles k-2 and k-1 exact, the others frozen at τ = mid.
    let mut c0 = rhoinv;
    for j in 0..n2 {
        c0 += z[j] * z[j] / ((d[j] - d[n1]) - mid);
    }
    let s = z[n2] * z[n2];
    let sl = z[n1] * z[n1];
    let pgap = d[n2] - d[n1];
    let fmid = c0 + s / (pgap - mid) - sl / mid;
    let a0 = c0 * pgap + s + sl;
    let b0 = sl * pgap;
    let (mut lo, mut hi, mut tau);
    if fmid <= T::ZERO {
        lo = mid;
        hi = ub;
        tau = if c0 > T::ZERO {
            root_right(a0, b0, c0)
        } else {
            ub
        };
    } else {
        // Here c0 > fmid > 0.
        lo = T::ZERO;
        hi = mid;
        tau = root_right(a0, b0, c0);
    }
    if !(tau > lo && tau < hi) {
        tau = (lo + hi) / two;
    }

    for iteration in 0..SECULAR_MAX_ITERATIONS {
        let ev = evaluate(d, z, rhoinv, n1, n2, tau, delta);
        let f = ev.f;
        if f.abs() <= T::EPSILON * ev.err {
            return Some(SecularRoot {
                lambda: d[n1] + tau,
                iterations: iteration,
            });
        }
        if f < T::ZERO {
            lo = tau;
        } else {
            hi = tau;
        }
        let df = ev.dpsi + ev.dphi;
        let p = delta[n2];
        let q = delta[n1];
        // Middle way: ψ (poles 0..=k-2) osculated at d_{k-2}; φ is the last pole itself.
        let c = f - p * ev.dpsi - q * ev.dphi;
        let mut eta = if c > T::ZERO {
            let a = (p + q) * f - p * q * df;
            let b = p * q * f;
            root_right(a, b, c)
        } else {
            -f / df
        };
        if !eta.is_finite() || f * eta >= T::ZERO {
            eta = -f / df;
        }
        let mut next = tau + eta;
        if !(next > lo && next < hi) {
            next = if f < T::ZERO {
                (tau + hi) / two
            } else {
                (tau + lo) / two
            };
        }
        if next == tau {
            return Some(SecularRoot {
                lambda: d[n1] + tau,
                iterations: iteration + 1,
            });
        }
        tau = next;
    }
    None
}
