use crate::Real;

/// `||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf)` for the symmetric `A` whose lower
/// triangle is stored column-major in `a` (leading dimension `n`), computed in the working
/// precision `T` (as the GPU kernels do) and returned as `f64`.
///
/// Returns NaN if `x` has a non-finite entry, and 0 when the denominator is 0
/// (`A = 0`, `b = 0`).
pub fn relative_residual<T: Real>(n: usize, a: &[T], b: &[T], x: &[T]) -> f64 {
    let mut r_max = T::ZERO;
    let mut a_max = T::ZERO;
    let mut x_max = T::ZERO;
    let mut b_max = T::ZERO;
    for r in 0..n {
        let mut acc = T::ZERO;
        let mut row = T::ZERO;
        for c in 0..n {
            let arc = if r >= c { a[r + c * n] } else { a[c + r * n] };
            acc += arc * x[c];
            row += arc.abs();
        }
        let ri = (b[r] - acc).abs();
        if ri.is_nan() || x[r].is_nan() || !x[r].is_finite() {
            return f64::NAN;
        }
        r_max = r_max.max(ri);
        a_max = a_max.max(row);
        x_max = x_max.max(x[r].abs());
        b_max = b_max.max(b[r].abs());
    }
    let den = a_max.to_f64() * x_max.to_f64() + b_max.to_f64();
    if den == 0.0 {
        0.0
    } else {
        r_max.to_f64() / den
    }
}
