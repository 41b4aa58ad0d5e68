use crate::Real;

/// Reduces the symmetric `A` to tridiagonal `T` by Householder reflections,
/// `A = Q T Q^T` with `Q = H_n H_{n-1} ... H_3` orthogonal (Algorithm 2 of
/// Abbas-Turki & Graillat 2016, eqs. (11)-(14); LAPACK's `dsytd2` followed by
/// `dorgtr`, in the elimination order described under *Algorithm*).
///
/// * `a`: `n x n` column-major, leading dimension `lda >= n`. On entry the **lower
///   triangle** holds `A`. On exit the whole `n x n` block holds `Q` (column-major).
/// * `d`: length `n`; on exit the diagonal of `T`.
/// * `e`: length `n - 1` (empty when `n <= 1`); on exit the off-diagonal,
///   `e[i] = T_{i+1,i} = T_{i,i+1}`.
///
/// Never fails: a column that is already reduced (norm below the underflow threshold)
/// is skipped (its reflector is the identity). Non-finite input propagates to the
/// outputs (no check is made here).
///
/// # Algorithm
/// The elimination order is the paper's (and `tred2`'s): the **last row first**. With
/// 0-based indices (the paper's `H_n ... H_3` are `H_{n-1} ... H_2` here), step
/// `i = n-1, ..., 2` annihilates `A_{i,k}`, `k < i-1` (row `i` of the lower triangle,
/// i.e. column `i` of the upper triangle: the reflectors of `dsytd2` with `uplo = 'U'`
/// applied to `A^T = A`) with `H_i = I - u u^T / b` acting on indices `k < i`:
///
/// 1. eq. (11): `s = max_{k<i} |A_ik|`, `x_k = A_ik / s`, `k < i` (scaling against
///    overflow and underflow), `g = ||x||`, `u = x` except
///    `u_{i-1} = x_{i-1} + sign(x_{i-1}) g`; `T_{i,i-1} = -sign(x_{i-1}) g s`. If `s = 0`
///    or `sum_{k<i-1} x_k^2 < MIN_POSITIVE` the row is already reduced (to working
///    accuracy): `T_{i,i-1} = A_{i,i-1}` and `H_i = I`.
/// 2. eq. (12): `b = u^T u / 2 = g (g + |x_{i-1}|)`, `w = u / b`, `p = A_i w`
///    (`A_i` the current leading `i x i` block), `K = (w^T p) / 2`, `q = p - K u`.
/// 3. eq. (13): `A_i <- A_i - (q u^T + u q^T)` on the lower triangle of the block.
///
/// `u` is kept in row `i` of the lower triangle and `w = u/b` in column `i` of the upper
/// triangle (the paper's storage); `p` and `q` live in `d` until the diagonal is copied
/// out. Then `Q` is accumulated as in eq. (14) (the backward accumulation of LAPACK's
/// `dorg2l`): `Q_1 = I`, `Q_i = H_i Q_{i-1}` on the leading `i x i` block, `Q = Q_{n-1}`,
/// each column of the block updated independently (`Q_{:,c} -= w (u^T Q_{:,c})`),
/// overwriting the consumed `u`, `w`; a skipped step is not applied. `n = 1, 2` give
/// `Q = I`, `T = A`.
///
/// # Panics
/// If `lda < n`, `a.len() < lda*(n-1) + n`, `d.len() < n` or `e.len() < n - 1`.
#[track_caller]
pub fn householder_tridiagonalize<T: Real>(
    n: usize,
    a: &mut [T],
    lda: usize,
    d: &mut [T],
    e: &mut [T],
) {
    assert!(
        lda >= n,
        "householder_tridiagonalize: lda = {lda} < n = {n}"
    );
    if n == 0 {
        return;
    }
    assert!(
        a.len() >= lda * (n - 1) + n,
        "householder_tridiagonalize: a.len() = {} too small for n = {n}, lda = {lda}",
        a.len()
    );
    assert!(
        d.len() >= n,
        "householder_tridiagonalize: d.len() < n = {n}"
    );
    assert!(
        e.len() >= n - 1,
        "householder_tridiagonalize: e.len() < n - 1 = {}",
        n - 1
    );

    // First stage: T (eqs. (11)-(13)), last row first.
    for i in (2..n).rev() {
        reduce_row(i, a, lda, d, e);
    }
    if n >= 2 {
        e[0] = a[1];
    }
    for (k, dk) in d.iter_mut().enumerate().take(n) {
        *dk = a[k + k * lda];
    }

    // Second stage: Q = H_{n-1} ... H_2 (eq. (14)). Before iteration j the leading
    // j x j block holds Q_{j-1} = H_{j-1} ... H_2 (identity for j <= 2).
    a[0] = T::ONE;
    for j in 1..n {
        // Extend the identity to row and column j (their u, w were consumed).
        for k in 0..j {
            a[j + k * lda] = T::ZERO;
            a[k + j * lda] = T::ZERO;
        }
        a[j + j * lda] = T::ONE;
        if j + 1 < n {
            apply_reflector(j + 1, a, lda);
        }
    }
}

/// Step `i` of the first stage: builds `H_i` from row `i` and applies it to the leading
/// `i x i` block (eqs. (11)-(13)). `d[0..i]` is scratch for `p` then `q`.
fn reduce_row<T: Real>(i: usize, a: &mut [T], lda: usize, d: &mut [T], e: &mut [T]) {
    let l = i - 1;
    // Scale of row i (left of the diagonal).
    let mut scale = T::ZERO;
    for k in 0..i {
        scale = scale.max(a[i + k * lda].abs());
    }
    let mut sigma = T::ZERO;
    if scale != T::ZERO {
        for k in 0..l {
            let x = a[i + k * lda] / scale;
            sigma += x * x;
        }
    }
    if scale == T::ZERO || sigma < T::MIN_POSITIVE {
        // Already reduced: H_i = I, marked by w = 0 in column i.
        e[l] = a[i + l * lda];
        for k in 0..i {
            a[i + k * lda] = T::ZERO;
            a[k + i * lda] = T::ZERO;
        }
        return;
    }
    // eq. (11): u in row i.
    for k in 0..l {
        a[i + k * lda] /= scale;
    }
    let f = a[i + l * lda] / scale;
    let g = (sigma + f * f).sqrt();
    let alpha = -g.copysign(f);
    e[l] = alpha * scale;
    a[i + l * lda] = f - alpha;
    // eq. (12): b, w = u / b in column i.
    let b = g * (g + f.abs());
    for k in 0..i {
        a[k + i * lda] = a[i + k * lda] / b;
    }
    // p = A_i w (symmetric block, lower triangle read), one row per thread.
    for r in 0..i {
        let mut p = T::ZERO;
        for c in 0..i {
            let arc = if c <= r {
                a[r + c * lda]
            } else {
                a[c + r * lda]
            };
            p += arc * a[c + i * lda];
        }
        d[r] = p;
    }
    // K = w^T p / 2 (one thread).
    let mut kk = T::ZERO;
    for r in 0..i {
        kk += a[r + i * lda] * d[r];
    }
    kk *= T::from_f64(0.5);
    // q = p - K u, in place of p.
    for r in 0..i {
        d[r] -= kk * a[i + r * lda];
    }
    // eq. (13): A_i -= q u^T + u q^T on the lower triangle, one column per thread.
    for c in 0..i {
        let uc = a[i + c * lda];
        let qc = d[c];
        for r in c..i {
            let ur = a[i + r * lda];
            a[r + c * lda] -= d[r] * uc + ur * qc;
        }
    }
}

/// `Q <- H_i Q` on the leading `i x i` block, `H_i = I - u w^T` (`w = u/b`, so
/// `u w^T = u u^T / b`): `u` in row `i` of `a`, `w` in column `i`, both over `0..i`.
/// Every column `c < i` is updated independently (one GPU thread each):
/// `s = u^T Q_{:,c}`, `Q_{:,c} -= w s`. A skipped step (`w = 0`) is not applied.
fn apply_reflector<T: Real>(i: usize, a: &mut [T], lda: usize) {
    if a[(i - 1) + i * lda] == T::ZERO {
        return;
    }
    for c in 0..i {
        let mut s = T::ZERO;
        for r in 0..i {
            s += a[i + r * lda] * a[r + c * lda];
        }
        for r in 0..i {
            let wr = a[r + i * lda];
            a[r + c * lda] -= wr * s;
        }
    }
}
