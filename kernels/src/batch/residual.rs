use crate::Real;

/// `||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf)` for the symmetric `A` whose lower
/// triangle is stored column-major in `a` (leading dimension `n`), computed in the working
/// precision `T` (as the GPU kernels do) and returned as `f64`.
///
/// Returns NaN if `x` has a non-finite entry, and 0 when the denominator is 0
/// (`A = 0`, `b = 0`).
pub fn relative_residual<T: Real>(n: usize, a: &[T], b: &[T], x: &[T]) -> f64 {
    residual_check(n, a, b, x).residual
}

/// The two numbers the escalating strategy looks at after a solve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResidualCheck {
    /// [`relative_residual`].
    pub residual: f64,
    /// Solution growth of the equilibrated system: with `S = diag(|a_ii|^{-1/2})` (1 where
    /// `a_ii = 0`), `||S A S||_inf ||S^{-1} x||_inf / ||S b||_inf`. Since
    /// `||y|| <= ||M^{-1}|| ||c||` for `M y = c`, it is a lower bound on the condition number
    /// `κ_inf(S A S)`: large only for systems that no diagonal scaling makes well
    /// conditioned (graded matrices are not flagged, near-singular ones are). Infinite
    /// when `b = 0` and `x != 0`, 0 when `x = 0`; NaN with the residual.
    pub growth: f64,
}

/// [`relative_residual`] and the solution growth, in one pass.
pub fn residual_check<T: Real>(n: usize, a: &[T], b: &[T], x: &[T]) -> ResidualCheck {
    let mut r_max = T::ZERO;
    let mut a_max = T::ZERO;
    let mut x_max = T::ZERO;
    let mut b_max = T::ZERO;
    // Equilibration S = diag(|a_ii|^{-1/2}).
    let mut scale = [T::ONE; crate::MAX_N];
    for (r, sr) in scale.iter_mut().enumerate().take(n) {
        let d = a[r + r * n].abs();
        if d > T::ZERO {
            *sr = T::ONE / d.sqrt();
        }
    }
    let (mut sa_max, mut sx_max, mut sb_max) = (T::ZERO, T::ZERO, T::ZERO);
    for r in 0..n {
        let mut acc = T::ZERO;
        let mut row = T::ZERO;
        let mut srow = T::ZERO;
        for c in 0..n {
            let arc = if r >= c { a[r + c * n] } else { a[c + r * n] };
            acc += arc * x[c];
            row += arc.abs();
            srow += (scale[r] * arc * scale[c]).abs();
        }
        sa_max = sa_max.max(srow);
        sx_max = sx_max.max((x[r] / scale[r]).abs());
        sb_max = sb_max.max((scale[r] * b[r]).abs());
        let ri = (b[r] - acc).abs();
        if ri.is_nan() || x[r].is_nan() || !x[r].is_finite() {
            return ResidualCheck {
                residual: f64::NAN,
                growth: f64::NAN,
            };
        }
        r_max = r_max.max(ri);
        a_max = a_max.max(row);
        x_max = x_max.max(x[r].abs());
        b_max = b_max.max(b[r].abs());
    }
    let ax = a_max.to_f64() * x_max.to_f64();
    let den = ax + b_max.to_f64();
    let residual = if den == 0.0 {
        0.0
    } else {
        r_max.to_f64() / den
    };
    let sax = sa_max.to_f64() * sx_max.to_f64();
    let growth = if sax == 0.0 {
        0.0
    } else {
        sax / sb_max.to_f64()
    };
    ResidualCheck { residual, growth }
}
