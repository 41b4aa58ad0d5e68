use super::PcrError;
use crate::Real;

/// Length of the `work` slice [`pcr_solve`] needs for size `n`: `6 n` (diagonal,
/// coupling and right-hand side of the permuted system, double-buffered so that every
/// step reads only the previous step's values).
pub fn pcr_workspace_len(n: usize) -> usize {
    6 * n
}

/// Solves the symmetric tridiagonal system `T z = v` in place (`v` becomes `z`) by
/// parallel cyclic reduction with the permutation of equations of Fig. 9 of
/// Abbas-Turki & Graillat (2016), so that any `n` works without zero padding.
///
/// * `d`: diagonal, length `n`; `e`: off-diagonal, length `n - 1` (`e[i] = T_{i+1,i}`).
/// * `v`: length `n`, right-hand side on entry, solution on exit.
/// * `work`: at least [`pcr_workspace_len`]`(n)` scratch entries.
///
/// The reduction is written as `ceil(log2 n)` steps in which every equation is updated
/// independently of the others (one GPU thread per equation).
///
/// # Algorithm
/// The system is kept as a sequence of independent symmetric tridiagonal subsystems
/// stored contiguously: per position `p`, the diagonal `d_p`, the coupling `c_p` to the
/// next equation of the same subsystem and the right-hand side `v_p`. Before step `s`
/// there are `2^s` subsystems; subsystem `b` holds the original unknowns
/// `z_{r + j 2^s}`, `j = 0, 1, ...` with `r = bitreverse_s(b)`. Step `s` updates
/// equation `j` of a subsystem with its neighbours `j -+ 1` (eq. (10), the paper's
/// `c_{i-1}` being `lo = c_{p-1}` and `c_i` being `hi = c_p`):
///
/// ```text
/// f = lo / d_{p-1}               g = hi / d_{p+1}
/// d'_p = (d_p - f lo) - g hi     v'_p = (v_p - f v_{p-1}) - g v_{p+1}
/// c'_p = -(g c_{p+1})            (coupling to equation j + 2)
/// ```
///
/// (terms without a neighbour in the subsystem are omitted; `c'` is computed once per
/// pair, so the reduced systems stay exactly symmetric). Equation `j` now couples only
/// with `j -+ 2`, and the permutation of Fig. 9 stores the even-`j` equations first and
/// the odd-`j` ones after them, so that the two new subsystems are again contiguous.
/// After `ceil(log2 n)` steps every subsystem is `1 x 1` (the last step solves the
/// `1 x 1` / `2 x 2` systems) and `z_r = v'_p / d'_p`.
///
/// # Errors
/// [`PcrError::Breakdown`] when a divisor is zero or a value (input included) is or
/// becomes non-finite;
/// `step` is the reduction step (`ceil(log2 n)` for the final division). `v` is then
/// left unchanged.
///
/// # Panics
/// If `d`, `v` are shorter than `n`, `e` shorter than `n - 1` or `work` shorter than
/// [`pcr_workspace_len`]`(n)`.
#[track_caller]
pub fn pcr_solve<T: Real>(
    n: usize,
    d: &[T],
    e: &[T],
    v: &mut [T],
    work: &mut [T],
) -> Result<(), PcrError> {
    if n == 0 {
        return Ok(());
    }
    assert!(d.len() >= n, "pcr_solve: d.len() = {} < n = {n}", d.len());
    assert!(
        e.len() >= n - 1,
        "pcr_solve: e.len() = {} < n - 1 = {}",
        e.len(),
        n - 1
    );
    assert!(v.len() >= n, "pcr_solve: v.len() = {} < n = {n}", v.len());
    assert!(
        work.len() >= pcr_workspace_len(n),
        "pcr_solve: work.len() = {} < {}",
        work.len(),
        pcr_workspace_len(n)
    );

    let (cur, next) = work[..6 * n].split_at_mut(3 * n);
    let mut cur = Buffers::new(cur, n);
    let mut next = Buffers::new(next, n);

    // Load (step 0 layout: one subsystem in the original order).
    cur.d.copy_from_slice(&d[..n]);
    cur.c[..n - 1].copy_from_slice(&e[..n - 1]);
    cur.c[n - 1] = T::ZERO;
    cur.v.copy_from_slice(&v[..n]);

    let steps = ceil_log2(n);
    for s in 0..steps {
        reduce_step(n, s, &cur, &mut next).map_err(|()| PcrError::Breakdown { step: s })?;
        std::mem::swap(&mut cur, &mut next);
    }

    // Every subsystem is now 1 x 1: subsystem b holds z_r, r = bitreverse(b).
    let breakdown = PcrError::Breakdown { step: steps };
    let mut p = 0;
    for b in 0..1usize << steps {
        let r = bit_reverse(b, steps);
        if r < n {
            if cur.d[p] == T::ZERO || !cur.d[p].is_finite() {
                return Err(breakdown);
            }
            let z = cur.v[p] / cur.d[p];
            if !z.is_finite() {
                return Err(breakdown);
            }
            // Stash in `next.v` so that `v` is untouched on error.
            next.v[r] = z;
            p += 1;
        }
    }
    v[..n].copy_from_slice(next.v);
    Ok(())
}

/// The permuted system: diagonal, coupling to the next equation of the same subsystem
/// (unused for the last one), right-hand side.
struct Buffers<'a, T> {
    d: &'a mut [T],
    c: &'a mut [T],
    v: &'a mut [T],
}

impl<'a, T> Buffers<'a, T> {
    fn new(buf: &'a mut [T], n: usize) -> Self {
        let (d, rest) = buf.split_at_mut(n);
        let (c, v) = rest.split_at_mut(n);
        Self { d, c, v }
    }
}

/// `ceil(log2 n)` for `n >= 1`.
fn ceil_log2(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

/// The `bits` low bits of `b`, reversed.
fn bit_reverse(b: usize, bits: usize) -> usize {
    let mut r = 0;
    for k in 0..bits {
        r |= ((b >> k) & 1) << (bits - 1 - k);
    }
    r
}

/// Number of `i < n` with `i = r (mod 2^s)`.
fn subsystem_len(n: usize, r: usize, s: usize) -> usize {
    if r < n {
        ((n - 1 - r) >> s) + 1
    } else {
        0
    }
}

/// One reduction step (eq. (10)) followed by the permutation of Fig. 9: reads `cur`
/// only and writes every equation of `next` (one GPU thread per equation).
fn reduce_step<T: Real>(
    n: usize,
    s: usize,
    cur: &Buffers<T>,
    next: &mut Buffers<T>,
) -> Result<(), ()> {
    let mut start = 0;
    for b in 0..1usize << s {
        let m = subsystem_len(n, bit_reverse(b, s), s);
        let half = m.div_ceil(2);
        for j in 0..m {
            let p = start + j;
            let mut dp = cur.d[p];
            let mut vp = cur.v[p];
            let mut cp = T::ZERO;
            if j > 0 {
                let lo = cur.c[p - 1];
                let dl = cur.d[p - 1];
                if dl == T::ZERO {
                    return Err(());
                }
                let f = lo / dl;
                dp -= f * lo;
                vp -= f * cur.v[p - 1];
            }
            if j + 1 < m {
                let hi = cur.c[p];
                let du = cur.d[p + 1];
                if du == T::ZERO {
                    return Err(());
                }
                let g = hi / du;
                dp -= g * hi;
                vp -= g * cur.v[p + 1];
                if j + 2 < m {
                    cp = -(g * cur.c[p + 1]);
                }
            }
            if !(dp.is_finite() && vp.is_finite() && cp.is_finite()) {
                return Err(());
            }
            let q = if j % 2 == 0 {
                start + j / 2
            } else {
                start + half + j / 2
            };
            next.d[q] = dp;
            next.c[q] = cp;
            next.v[q] = vp;
        }
        start += m;
    }
    debug_assert_eq!(start, n);
    Ok(())
}
