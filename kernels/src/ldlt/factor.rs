use super::LdltError;
use crate::Real;

/// Factors `A = L D L^T` in place (Algorithm 1 of Abbas-Turki & Graillat 2016, scalar form).
///
/// * `a`: `n x n` column-major with leading dimension `lda >= n`; entry `(r, c)` is
///   `a[r + c*lda]`. On entry the **lower triangle** holds `A` (the strict upper triangle
///   is neither read nor written). On exit `D_{j,j}` is on the diagonal and `L_{i,j}`,
///   `i > j`, in the strict lower triangle.
///
/// # Algorithm
/// Left-looking, column by column, as eq. (5) of the paper (LAPACK's `dpotf2` without
/// square roots): for `j = 0, ..., n-1`
///
/// ```text
/// D_jj = A_jj - sum_{k<j} L_jk (L_jk D_kk)
/// L_ij = (A_ij - sum_{k<j} L_ik (L_jk D_kk)) / D_jj        for every i > j
/// ```
///
/// The sums are accumulated in increasing `k`, each term subtracted from the running
/// value that starts at `A`; `L_ij = s / D_jj` is a true division. Once `D_jj` is known
/// the `L_ij`, `i > j`, are independent of one another (one GPU thread each); the
/// arithmetic order above is the contract the CUDA kernel reproduces.
///
/// # Errors
/// [`LdltError::NotPositiveDefinite`] at the first pivot that is `<= 0` or not finite;
/// `a` is then partly overwritten (columns `< index` hold their factors).
///
/// # Panics
/// If `a.len() < lda*(n-1) + n` or `lda < n`.
#[track_caller]
pub fn ldlt_factor<T: Real>(n: usize, a: &mut [T], lda: usize) -> Result<(), LdltError> {
    assert!(lda >= n, "ldlt_factor: lda = {lda} < n = {n}");
    if n == 0 {
        return Ok(());
    }
    assert!(
        a.len() >= lda * (n - 1) + n,
        "ldlt_factor: a.len() = {} too small for n = {n}, lda = {lda}",
        a.len()
    );
    for j in 0..n {
        // Pivot D_jj (one thread on the GPU).
        let mut pivot = a[j + j * lda];
        for k in 0..j {
            let ljk = a[j + k * lda];
            pivot -= ljk * (ljk * a[k + k * lda]);
        }
        // NaN and infinities are not finite.
        if !pivot.is_finite() || pivot <= T::ZERO {
            return Err(LdltError::NotPositiveDefinite {
                index: j,
                pivot: pivot.to_f64(),
            });
        }
        a[j + j * lda] = pivot;
        // Column j of L: every row i > j independently (one thread each on the GPU).
        for i in j + 1..n {
            let mut s = a[i + j * lda];
            for k in 0..j {
                let ljk = a[j + k * lda];
                s -= a[i + k * lda] * (ljk * a[k + k * lda]);
            }
            a[i + j * lda] = s / pivot;
        }
    }
    Ok(())
}
