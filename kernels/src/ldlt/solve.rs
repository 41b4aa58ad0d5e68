use crate::Real;

/// Solves `L D L^T x = b` in place (`b` becomes `x`), given the output of
/// [`ldlt_factor`](super::ldlt_factor): forward substitution with `L`, division by `D`,
/// back substitution with `L^T`.
///
/// * `a`: the factored `n x n` column-major matrix, leading dimension `lda`: `D` on the
///   diagonal, the unit lower triangular `L` below it (only the lower triangle is read).
/// * `b`: length `n`.
///
/// # Algorithm
/// Both triangular solves sweep the columns of `L` (Abbas-Turki & Graillat 2016,
/// Section 3.1; LAPACK's `dpotrs` without square roots). Once `y_j` is final, every
/// `y_i`, `i > j`, is updated independently (one GPU thread each):
///
/// ```text
/// forward:  for j = 0..n-1:      y_i -= L_ij y_j      for i > j
/// diagonal: y_i /= D_ii                               for every i
/// backward: for j = n-1 down to 0: x_i -= L_ji x_j    for i < j
/// ```
///
/// No check is made: a factor from a successful [`ldlt_factor`](super::ldlt_factor)
/// has positive pivots, so the divisions are defined.
///
/// # Panics
/// If `lda < n`, `a.len() < lda*(n-1) + n` or `b.len() < n`.
#[track_caller]
pub fn ldlt_solve<T: Real>(n: usize, a: &[T], lda: usize, b: &mut [T]) {
    assert!(lda >= n, "ldlt_solve: lda = {lda} < n = {n}");
    if n == 0 {
        return;
    }
    assert!(
        a.len() >= lda * (n - 1) + n,
        "ldlt_solve: a.len() = {} too small for n = {n}, lda = {lda}",
        a.len()
    );
    assert!(b.len() >= n, "ldlt_solve: b.len() = {} < n = {n}", b.len());
    // L y = b.
    for j in 0..n {
        let yj = b[j];
        for i in j + 1..n {
            b[i] -= a[i + j * lda] * yj;
        }
    }
    // D w = y.
    for i in 0..n {
        b[i] /= a[i + i * lda];
    }
    // L^T x = w.
    for j in (0..n).rev() {
        let xj = b[j];
        for i in 0..j {
            b[i] -= a[j + i * lda] * xj;
        }
    }
}
