use crate::Real;

/// Solves `T z = v` in place from `T = Z diag(λ) Z^T`, keeping only the eigenvalues with
/// `|λ_i| * condition_threshold >= max_j |λ_j|`: `z = Σ_{kept} (Z_i^T v / λ_i) Z_i`,
/// the minimum-norm least-squares solution of the truncated system (Section 1 of
/// Abbas-Turki & Graillat 2016: "discard the smallest eigenvalues").
///
/// * `lambda`: length `n`; `z`: `n x n` column-major, leading dimension `ldz`;
///   `v`: length `n`; `tmp`: scratch of length `n`.
///
/// An eigenvalue that is exactly zero is always discarded (also when all are zero).
/// With `Z` orthogonal the result is `T_k^+ v`, `T_k` the truncated matrix.
///
/// Returns the number of discarded eigenvalues.
///
/// # Panics
/// If `ldz < n` or a slice is shorter than stated above.
#[track_caller]
pub fn truncated_eigen_solve<T: Real>(
    n: usize,
    lambda: &[T],
    z: &[T],
    ldz: usize,
    v: &mut [T],
    tmp: &mut [T],
    condition_threshold: T,
) -> usize {
    if n == 0 {
        return 0;
    }
    assert!(ldz >= n, "truncated_eigen_solve: ldz = {ldz} < n = {n}");
    assert!(
        lambda.len() >= n,
        "truncated_eigen_solve: lambda shorter than n"
    );
    assert!(
        z.len() >= (n - 1) * ldz + n,
        "truncated_eigen_solve: z shorter than (n - 1) ldz + n"
    );
    assert!(v.len() >= n, "truncated_eigen_solve: v shorter than n");
    assert!(tmp.len() >= n, "truncated_eigen_solve: tmp shorter than n");

    let mut lmax = T::ZERO;
    for &l in &lambda[..n] {
        lmax = lmax.max(l.abs());
    }
    // tmp = diag(1/λ)_kept Z^T v
    let mut discarded = 0;
    for i in 0..n {
        let l = lambda[i];
        if l == T::ZERO || l.abs() * condition_threshold < lmax {
            tmp[i] = T::ZERO;
            discarded += 1;
            continue;
        }
        let col = &z[i * ldz..i * ldz + n];
        let mut acc = T::ZERO;
        for r in 0..n {
            acc += col[r] * v[r];
        }
        tmp[i] = acc / l;
    }
    // v = Z tmp
    for r in 0..n {
        let mut acc = T::ZERO;
        for i in 0..n {
            acc += z[r + i * ldz] * tmp[i];
        }
        v[r] = acc;
    }
    discarded
}
