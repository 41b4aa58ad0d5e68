//! The secular equation of a rank-one modification of a diagonal matrix
//! (LAPACK `dlaed4`, `dlaed5`; Li 1994, LAPACK Working Note 89).
//!
//! All arithmetic is plain `+ - * /` and `sqrt` so that a CUDA version compiled with
//! `--fmad=false` rounds identically.

use crate::Real;

/// Iteration cap of [`secular_equation_root`] (the one of LAPACK `dlaed4`). The counts
/// observed are far below it (see `tests/stedc.rs`, which prints them).
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
/// * `k >= 3`: `f` is first evaluated at the midpoint of the interval (of
///   `(d_{k-1}, d_{k-1} + ρ z^T z]` for the last root); its sign halves the bracket and
///   picks the origin. Each step then solves a rational model of `f` (see
///   `model_root`): the two poles next to the root with their exact weights (Li's
///   fixed weights), and the remaining poles on each side replaced by one pole matching
///   their first and second derivatives (Gragg's second-order osculation), so that
///   convergence is fast also with clustered poles (typically 1 to 3 steps after the
///   midpoint; graded, multi-scale problems take a few more). Safeguards: if the model's root leaves the
///   bracket, Li's middle-way step of `dlaed4`; if that leaves it too, or if `|f|` fell
///   by less than half against the bracket end it replaces, bisection (geometric when
///   the bracket spans orders of magnitude on one side of the origin, whose end at the
///   pole is a positive lower bound on `|τ|`).
/// * Converged when `|f(λ)| <= ε (8 (Σ_j |z_j^2/(d_j - λ)| + 1/ρ) + |τ| f'(λ))`, a
///   bound on the rounding error of the evaluation of `f`, or when the step no longer
///   changes `τ` in floating point.
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
        _ => iterate(i, d, z, rho, delta),
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

/// The secular function at `τ` (relative to the origin pole), with the derivatives
/// split into the groups of the rational model of [`model_root`]: poles left of `a`,
/// pole `a`, pole `a + 1`, poles right of `a + 1`.
struct Evaluation<T> {
    f: T,
    /// `Σ_{j < a} z_j^2 / δ_j^2` and `Σ_{j < a} z_j^2 / δ_j^3` (half the second
    /// derivative of the left remainder).
    d_left: T,
    d2_left: T,
    /// `z_a^2 / δ_a^2`.
    d_a: T,
    /// `z_{a+1}^2 / δ_{a+1}^2`.
    d_b: T,
    /// `Σ_{j > a+1} z_j^2 / δ_j^2` and `Σ_{j > a+1} z_j^2 / δ_j^3`.
    d_right: T,
    d2_right: T,
    /// Bound on the rounding error of `f`, divided by ε.
    err: T,
}

/// Evaluates `f` at `λ = d_origin + τ`, writing `delta[j] = (d_j - d_origin) - τ`.
#[inline]
fn evaluate<T: Real>(
    d: &[T],
    z: &[T],
    rhoinv: T,
    origin: usize,
    a: usize,
    tau: T,
    delta: &mut [T],
) -> Evaluation<T> {
    let mut f = rhoinv;
    let mut d_left = T::ZERO;
    let mut d2_left = T::ZERO;
    let mut d_a = T::ZERO;
    let mut d_b = T::ZERO;
    let mut d_right = T::ZERO;
    let mut d2_right = T::ZERO;
    let mut abs_sum = T::ZERO;
    let d_origin = d[origin];
    for j in 0..d.len() {
        let dj = (d[j] - d_origin) - tau;
        delta[j] = dj;
        let t = z[j] / dj;
        let term = z[j] * t;
        let deriv = t * t;
        f += term;
        abs_sum += term.abs();
        if j < a {
            d_left += deriv;
            d2_left += deriv / dj;
        } else if j == a {
            d_a = deriv;
        } else if j == a + 1 {
            d_b = deriv;
        } else {
            d_right += deriv;
            d2_right += deriv / dj;
        }
    }
    let err =
        T::from_f64(8.0) * (abs_sum + rhoinv) + tau.abs() * (((d_left + d_a) + d_b) + d_right);
    Evaluation {
        f,
        d_left,
        d2_left,
        d_a,
        d_b,
        d_right,
        d2_right,
        err,
    }
}

/// Roots for `k >= 3`. `a = i` for an interior root (bracketed by poles `a`, `a + 1`),
/// `a = k - 2` for the last one (right of poles `a`, `a + 1 = k - 1`).
fn iterate<T: Real>(i: usize, d: &[T], z: &[T], rho: T, delta: &mut [T]) -> Option<SecularRoot<T>> {
    let k = d.len();
    let last = i == k - 1;
    let a = if last { k - 2 } else { i };
    let two = T::from_f64(2.0);
    let four = T::from_f64(4.0);
    let rhoinv = T::ONE / rho;

    // Start at the midpoint of the interval (of (d_{k-1}, d_{k-1} + ρ z^T z] for the last
    // root); the sign of f there halves the bracket and picks the origin. The end at
    // the origin pole is replaced by a positive lower bound on |τ| (halved for safety),
    // so that bisection can be geometric when the root hugs the pole.
    let (origin, mut tau, mut lo, mut hi);
    let mut ev;
    if !last {
        let gap = d[i + 1] - d[i];
        let mid = gap / two;
        ev = evaluate(d, z, rhoinv, i, a, mid, delta);
        if ev.f >= T::ZERO {
            // z_i^2 / τ < 1/ρ + Σ_{j>i} z_j^2 / (gap/2).
            let mut right = T::ZERO;
            for &zj in &z[i + 1..] {
                right += zj * zj;
            }
            origin = i;
            tau = mid;
            hi = mid;
            lo = z[i] * z[i] / (two * (rhoinv + two * right / gap));
        } else {
            // z_{i+1}^2 / |τ| < Σ_{j<=i} z_j^2 / (gap/2).
            let mut left = T::ZERO;
            for &zj in &z[..=i] {
                left += zj * zj;
            }
            origin = i + 1;
            tau = mid - gap;
            lo = tau;
            hi = -(z[i + 1] * z[i + 1] * gap / (four * left));
        }
    } else {
        let mut znorm2 = T::ZERO;
        for &zj in z {
            znorm2 += zj * zj;
        }
        let ub = rho * znorm2;
        let mid = ub / two;
        origin = k - 1;
        tau = mid;
        ev = evaluate(d, z, rhoinv, origin, a, mid, delta);
        if ev.f <= T::ZERO {
            lo = mid;
            hi = ub;
        } else {
            // z_{k-1}^2 / τ < 1/ρ.
            lo = rho * z[k - 1] * z[k - 1] / two;
            hi = mid;
        }
    }
    let bracket_ok = lo < hi;
    if !bracket_ok {
        // Bounds spoiled by rounding: fall back to the plain interval.
        if origin == i + 1 && !last {
            hi = T::ZERO;
        } else {
            lo = T::ZERO;
        }
    }

    let half = T::from_f64(0.5);
    // f at the bracket ends (NaN: not evaluated).
    let mut f_lo = T::NAN;
    let mut f_hi = T::NAN;
    for iteration in 0..=SECULAR_MAX_ITERATIONS {
        let f = ev.f;
        if f.abs() <= T::EPSILON * ev.err {
            return Some(SecularRoot {
                lambda: d[origin] + tau,
                iterations: iteration,
            });
        }
        if iteration == SECULAR_MAX_ITERATIONS {
            break;
        }
        // Update the bracket; the step stalled if |f| fell by less than half against the
        // end it replaces (models overshooting from both sides).
        let stalled = if f < T::ZERO {
            let stalled = f.abs() > half * f_lo.abs();
            lo = tau;
            f_lo = f;
            stalled
        } else {
            let stalled = f.abs() > half * f_hi.abs();
            hi = tau;
            f_hi = f;
            stalled
        };
        // Rational model; if its root leaves the bracket, the plain middle way
        // (dlaed4); if that leaves it too, or after a stalled step, bisection.
        let mut next = if stalled {
            bisect(lo, hi)
        } else {
            model_root(&ev, d, z, delta, (origin, a, last), tau, hi)
        };
        if !stalled && (next == tau || !(next > lo && next < hi)) {
            next = middle_way_root(&ev, d, delta, (origin, a, last), tau);
            if next != tau && !(next > lo && next < hi) {
                next = bisect(lo, hi);
            }
        }
        if next == tau {
            // No representable progress: τ is the root to working precision.
            return Some(SecularRoot {
                lambda: d[origin] + tau,
                iterations: iteration + 1,
            });
        }
        tau = next;
        ev = evaluate(d, z, rhoinv, origin, a, tau, delta);
    }
    None
}

/// Midpoint of `(lo, hi)`: geometric when both ends have one sign and differ by more
/// than a factor of 4 (a root close to the origin pole is then reached in
/// `O(log log)` steps), arithmetic otherwise.
fn bisect<T: Real>(lo: T, hi: T) -> T {
    let four = T::from_f64(4.0);
    if lo > T::ZERO && hi > four * lo {
        lo.sqrt() * hi.sqrt()
    } else if hi < T::ZERO && lo < four * hi {
        -((-lo).sqrt() * (-hi).sqrt())
    } else {
        (lo + hi) / T::from_f64(2.0)
    }
}

/// Root `t` of the two-pole model `c + s/(pa - t) + sb/(pb - t) = 0`, `pa < pb`,
/// `s, sb > 0`: between the poles, or (`last`) right of both (`None` if `c <= 0`,
/// when there is none). The positions are relative to the origin pole, one of them
/// 0, so that a root hugging it keeps its relative accuracy: in `t` the model is
/// `c t^2 - (c (pa + pb) + s + sb) t + (c pa pb + s pb + sb pa) = 0`.
#[inline]
fn two_pole_root<T: Real>(c: T, (pa, s): (T, T), (pb, sb): (T, T), last: bool) -> Option<T> {
    let a = c * (pa + pb) + s + sb;
    let b = c * pa * pb + s * pb + sb * pa;
    if !last {
        Some(root_between(a, b, c))
    } else if c > T::ZERO {
        Some(root_right(a, b, c))
    } else {
        None
    }
}

/// Li's middle-way step (LAPACK `dlaed4`): `ψ = Σ_{j<=a}` osculated by one pole at
/// pole `a`, `φ = Σ_{j>a}` by one at pole `a + 1`; for the last root, a Newton step
/// when the model has no root right of the poles. Returns the new `τ`.
fn middle_way_root<T: Real>(
    ev: &Evaluation<T>,
    d: &[T],
    delta: &[T],
    (origin, a, last): (usize, usize, bool),
    tau: T,
) -> T {
    let f = ev.f;
    let p = delta[a];
    let q = delta[a + 1];
    let dpsi = ev.d_left + ev.d_a;
    let dphi = ev.d_b + ev.d_right;
    let c = f - p * dpsi - q * dphi;
    let pa = (d[a] - d[origin], dpsi * p * p);
    let pb = (d[a + 1] - d[origin], dphi * q * q);
    two_pole_root(c, pa, pb, last).unwrap_or(tau - f / (dpsi + dphi))
}

/// Inner iterations of [`model_root`].
const MODEL_ITERATIONS: usize = 8;

/// The root `τ'` (relative to the origin pole) of a rational model of `f` around the
/// current point `τ` (`delta[j] = d_j - λ`), with `η = τ' - τ`:
///
/// `g(η) = c + s_L/(p_L - η) + z_a^2/(δ_a - η) + z_{a+1}^2/(δ_{a+1} - η) + s_R/(p_R - η)`.
///
/// The two poles next to the root keep their exact weights (Li's fixed-weight idea).
/// The remainder on each side, `R(η) = Σ_{j<a} z_j^2/(δ_j - η)` (and likewise right of
/// `a + 1`), is replaced by one pole matching `R'` and `R''` at `η = 0` (Gragg's
/// osculation to second order): `p_L = R'(0) / (R''(0)/2)`, a weighted harmonic mean of
/// the remainder's poles and so left of `δ_a`, and `s_L = R'(0) p_L^2`; `c` makes
/// `g(0) = f`. So `g` matches `f`, `f'` and the curvature of the far poles, and stays
/// accurate when a remainder is dominated by a distant heavy pole behind nearby light
/// ones (where osculating at the next pole, as `dlaed4`'s middle way does, converges
/// only linearly). The model's root, between poles `a` and `a + 1` (interior) or
/// between pole `k - 1` and `hi_outer` (last root), is found by a few safeguarded
/// middle-way iterations on `g` itself (the role of LAPACK `dlaed6`), stopped at the
/// rounding level of `g`. They run in coordinates relative to the origin pole, so that
/// a root within a few ulps of it is not rounded onto it.
fn model_root<T: Real>(
    ev: &Evaluation<T>,
    d: &[T],
    z: &[T],
    delta: &[T],
    (origin, a, last): (usize, usize, bool),
    tau: T,
    hi_outer: T,
) -> T {
    // Pole positions relative to the origin pole (the origin itself is exactly 0, so
    // a model root hugging it keeps its relative accuracy), their weights, and their
    // distances to the current point.
    let mut pos = [T::ZERO; 4];
    let mut weights = [T::ZERO; 4];
    let mut dist = [T::ZERO; 4];
    let mut m = 0;
    // Left remainder R: one pole at distance R'/(R''/2) (a weighted harmonic mean of
    // its poles' distances, so left of pole a) with weight R' distance^2.
    let p_left = ev.d_left / ev.d2_left;
    if ev.d_left > T::ZERO && p_left.is_finite() {
        dist[m] = p_left;
        pos[m] = p_left + tau;
        weights[m] = ev.d_left * p_left * p_left;
        m += 1;
    }
    let ia = m;
    for j in [a, a + 1] {
        dist[m] = delta[j];
        pos[m] = d[j] - d[origin];
        weights[m] = z[j] * z[j];
        m += 1;
    }
    let p_right = ev.d_right / ev.d2_right;
    if ev.d_right > T::ZERO && p_right.is_finite() {
        dist[m] = p_right;
        pos[m] = p_right + tau;
        weights[m] = ev.d_right * p_right * p_right;
        m += 1;
    }
    let mut c = ev.f;
    for l in 0..m {
        c -= weights[l] / dist[l];
    }

    let (mut lo, mut hi) = if last {
        (pos[ia + 1], hi_outer)
    } else {
        (pos[ia], pos[ia + 1])
    };
    let mut t = tau;
    for _ in 0..MODEL_ITERATIONS {
        let mut g = c;
        let mut g_abs = c.abs();
        let mut dpsi = T::ZERO;
        let mut dphi = T::ZERO;
        for l in 0..m {
            let dl = pos[l] - t;
            let r = weights[l] / dl;
            g += r;
            g_abs += r.abs();
            if l <= ia {
                dpsi += r / dl;
            } else {
                dphi += r / dl;
            }
        }
        // Converged to the rounding level of g.
        if g.abs() <= T::EPSILON * g_abs {
            break;
        }
        if g < T::ZERO {
            lo = t;
        } else {
            hi = t;
        }
        let dg = dpsi + dphi;
        let p = pos[ia] - t;
        let q = pos[ia + 1] - t;
        // Middle way on g: poles ..=a osculated at pole a, the others at pole a+1.
        let cm = g - p * dpsi - q * dphi;
        let mut next = two_pole_root(
            cm,
            (pos[ia], dpsi * p * p),
            (pos[ia + 1], dphi * q * q),
            last,
        )
        .unwrap_or(t - g / dg);
        if !next.is_finite() || g * (next - t) > T::ZERO {
            // Wrong direction: Newton.
            next = t - g / dg;
        }
        if next == t {
            break;
        }
        if !(next > lo && next < hi) {
            next = bisect(lo, hi);
        }
        let done = (next - t).abs() <= T::EPSILON * next.abs();
        t = next;
        if done {
            break;
        }
    }
    t
}
