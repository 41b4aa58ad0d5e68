//! Divide and conquer for `T = Z diag(λ) Z^T`, `T` symmetric tridiagonal
//! (Algorithm 3 of Abbas-Turki & Graillat 2016; Cuppen 1981; Gu & Eisenstat 1995;
//! LAPACK `dstedc`, `dlaed0`-`dlaed3`).
//!
//! The schedule is the one of the GPU kernel: the division tree is built top-down
//! breadth first, the leaves (`1 x 1` and `2 x 2` blocks) are solved in closed form,
//! and the merges run bottom-up, level by level, with no recursion.

use super::secular::secular_equation_root;
use super::StedcError;
use crate::Real;

/// Scratch space for [`stedc`] of sizes up to `n_max` (allocate once per thread).
///
/// Holds two `n_max x n_max` matrices (the sorted, deflated child eigenvectors and the
/// eigenvectors of the rank-one modification), a dozen vectors of length `n_max` and
/// the division tree (at most `2 n_max - 1` nodes). [`stedc`] allocates nothing.
#[derive(Debug, Clone)]
pub struct StedcWorkspace<T: Real> {
    n_max: usize,
    /// `N x N`, leading dimension `N`: child eigenvectors, columns in sorted order.
    q: Vec<T>,
    /// `K x K`, leading dimension `K`: `d_i - λ_j`, then the eigenvectors of the
    /// rank-one modification.
    w: Vec<T>,
    /// Poles in sorted order (all `N`, deflation rotations applied).
    d_sorted: Vec<T>,
    /// Updating vector in sorted order.
    z_sorted: Vec<T>,
    /// Non-deflated poles `δ` and weights `z` passed to the secular equation.
    d_kept: Vec<T>,
    z_kept: Vec<T>,
    /// Gu–Eisenstat updating vector `ẑ`.
    z_hat: Vec<T>,
    /// New eigenvalues: `K` secular roots, then the deflated poles.
    values: Vec<T>,
    /// Merge permutation of the children's eigenvalues.
    perm: Vec<usize>,
    /// Sorted positions of the non-deflated and deflated poles.
    kept: Vec<usize>,
    deflated: Vec<usize>,
    /// Final (ascending) position of each entry of `values`.
    rank: Vec<usize>,
    /// Division tree, breadth first: `(first row, size)` relative to the block.
    nodes: Vec<(usize, usize)>,
    /// Largest iteration count of a secular equation in the last [`stedc`] call.
    max_secular_iterations: usize,
}

impl<T: Real> StedcWorkspace<T> {
    /// Workspace for [`stedc`] with `n <= n_max`.
    pub fn new(n_max: usize) -> Self {
        let v = vec![T::ZERO; n_max];
        Self {
            n_max,
            q: vec![T::ZERO; n_max * n_max],
            w: vec![T::ZERO; n_max * n_max],
            d_sorted: v.clone(),
            z_sorted: v.clone(),
            d_kept: v.clone(),
            z_kept: v.clone(),
            z_hat: v.clone(),
            values: v,
            perm: vec![0; n_max],
            kept: Vec::with_capacity(n_max),
            deflated: Vec::with_capacity(n_max),
            rank: vec![0; n_max],
            nodes: Vec::with_capacity(2 * n_max.max(1)),
            max_secular_iterations: 0,
        }
    }

    /// Largest `n` this workspace serves.
    pub fn n_max(&self) -> usize {
        self.n_max
    }

    /// Largest number of iterations one secular equation took in the last [`stedc`]
    /// call (see [`SecularRoot::iterations`](super::SecularRoot)); a diagnostic for the
    /// load balance of the GPU kernel.
    pub fn max_secular_iterations(&self) -> usize {
        self.max_secular_iterations
    }
}

/// Eigendecomposition `T = Z diag(λ) Z^T` of a symmetric tridiagonal matrix by divide
/// and conquer (Algorithm 3 of Abbas-Turki & Graillat 2016; Gu & Eisenstat 1995;
/// LAPACK `dstedc` with `compz = 'I'`).
///
/// * `d`: length `n`; on entry the diagonal, on exit the eigenvalues **ascending**.
/// * `e`: length `n - 1`; on entry the off-diagonal; destroyed.
/// * `z`: `n x n` column-major, leading dimension `ldz >= n`; on exit column `j` is the
///   unit eigenvector of `d[j]`. Rows `n..ldz` are not touched.
///
/// # Method
/// 1. `T` is scaled by a power of two to max-norm about 1 (exact).
/// 2. `T` splits where `|e_i| <= ε sqrt(|d_i|) sqrt(|d_{i+1}|)` (the test of `dstedc`);
///    each unreduced block is solved independently.
/// 3. An unreduced block of size `s > 2` is torn after its first `m = floor(s/2)` rows
///    (Cuppen): with `β` the off-diagonal coupling rows `m - 1` and `m` (0-based),
///    `T = diag(T_1, T_2) + |β| v v^T`, `v = ê_{m-1} + sign(β) ê_m`, where `T_1`, `T_2`
///    have `|β|` subtracted from their last and first diagonal entries; recursively
///    down to `1 x 1` and `2 x 2` leaves (solved by a Jacobi rotation, stable like
///    `dlaev2`). The merges then run bottom-up: with `T_k = Q_k D_k Q_k^T`,
///    `T = Q (D + ρ u u^T) Q^T`, `Q = diag(Q_1, Q_2)`, `ρ = 2 |β|`,
///    `u = (last row of Q_1, sign(β) first row of Q_2) / sqrt(2)`, `||u|| = 1`.
/// 4. Deflation (`dlaed2`), with `tol = 8 ε max(max_i |D_i|, ρ)`: a pole with
///    `ρ |u_i| <= tol` is kept as an eigenvalue; two poles (adjacent among the
///    non-deflated, in ascending order) with `|(D_j - D_i) c s| <= tol` after the
///    Givens rotation that zeroes `u_i` are decoupled, the rotation applied to `Q`.
///    Each deflation perturbs `T` by at most `tol`.
/// 5. The `K` remaining poles `δ` (strictly increasing) give `K` roots of the secular
///    equation ([`secular_equation_root`](super::secular_equation_root), `dlaed4`),
///    solved on the merge scaled by a power of two to `max(max_i |D_i|, ρ) ~ 1`.
/// 6. Löwner / Gu–Eisenstat: `ẑ_i^2 = Π_j (λ_j - δ_i) / (ρ Π_{j≠i} (δ_j - δ_i))`, so that
///    the `λ` are the exact eigenvalues of `diag(δ) + ρ ẑ ẑ^T`; its eigenvectors
///    `(diag(δ) - λ_j)^{-1} ẑ`, normalised, are numerically orthogonal (`dlaed3`).
/// 7. `Z = Q W` for the non-deflated columns; eigenvalues and columns are merged
///    ascending.
///
/// # Errors
/// [`StedcError::NotConverged`] if a secular equation does not converge,
/// [`StedcError::NonFinite`] on non-finite input or output. On error `d` and `z` hold
/// partial results.
///
/// # Panics
/// If `n > work.n_max()`, `d.len() < n`, `e.len() < n - 1`, `ldz < n` or `z` is shorter
/// than `(n - 1) ldz + n`.
#[track_caller]
pub fn stedc<T: Real>(
    n: usize,
    d: &mut [T],
    e: &mut [T],
    z: &mut [T],
    ldz: usize,
    work: &mut StedcWorkspace<T>,
) -> Result<(), StedcError> {
    assert!(
        n <= work.n_max,
        "stedc: n = {n} exceeds the workspace's n_max = {}",
        work.n_max
    );
    work.max_secular_iterations = 0;
    if n == 0 {
        return Ok(());
    }
    assert!(d.len() >= n, "stedc: d has length {} < n = {n}", d.len());
    assert!(e.len() >= n - 1, "stedc: e has length {} < n - 1", e.len());
    assert!(ldz >= n, "stedc: ldz = {ldz} < n = {n}");
    assert!(
        z.len() >= (n - 1) * ldz + n,
        "stedc: z has length {} < (n - 1) ldz + n",
        z.len()
    );

    let d = &mut d[..n];
    let e = &mut e[..n - 1];
    if d.iter().chain(e.iter()).any(|x| !x.is_finite()) {
        return Err(StedcError::NonFinite);
    }
    for c in 0..n {
        for r in 0..n {
            z[r + c * ldz] = T::ZERO;
        }
    }
    let mut anorm = T::ZERO;
    for &x in d.iter().chain(e.iter()) {
        anorm = anorm.max(x.abs());
    }
    if anorm == T::ZERO {
        for c in 0..n {
            z[c + c * ldz] = T::ONE;
        }
        return Ok(());
    }

    // Scale to max-norm in [1, 2) by a power of two (exact barring underflow).
    let exponent = ilogb(anorm);
    for x in d.iter_mut().chain(e.iter_mut()) {
        *x = scale_pow2(*x, -exponent);
    }

    // Split into unreduced blocks and solve each.
    let mut start = 0;
    let mut blocks = 0;
    for i in 0..n {
        let end_here = i == n - 1 || {
            let tiny = T::EPSILON * d[i].abs().sqrt() * d[i + 1].abs().sqrt();
            if e[i].abs() <= tiny {
                e[i] = T::ZERO;
                true
            } else {
                false
            }
        };
        if end_here {
            solve_unreduced(start, i + 1 - start, d, e, z, ldz, work)?;
            blocks += 1;
            start = i + 1;
        }
    }

    // Blocks each come out ascending; merge them into one ascending order.
    if blocks > 1 {
        sort_columns(n, d, z, ldz, work);
    }

    for x in d.iter_mut() {
        *x = scale_pow2(*x, exponent);
    }
    if d.iter().any(|x| !x.is_finite()) {
        return Err(StedcError::NonFinite);
    }
    for c in 0..n {
        for r in 0..n {
            if !z[r + c * ldz].is_finite() {
                return Err(StedcError::NonFinite);
            }
        }
    }
    Ok(())
}

/// `floor(log2 |x|)` for finite `x != 0`, read from the exponent bits (C's `ilogb`).
/// Any power of two would do: scaling by one is exact, so the results do not depend
/// on it (barring underflow).
fn ilogb<T: Real>(x: T) -> i32 {
    let mut v = x.to_f64().abs();
    let mut shift = 0;
    if v < f64::MIN_POSITIVE {
        // Subnormal in f64: bring it into the normal range first.
        v *= 2f64.powi(64);
        shift = 64;
    }
    let biased = ((v.to_bits() >> 52) & 0x7ff) as i32;
    biased - 1023 - shift
}

/// `x 2^k`, by factors of at most `2^64` so that every factor is representable in `f32`.
fn scale_pow2<T: Real>(mut x: T, mut k: i32) -> T {
    while k != 0 {
        let step = k.clamp(-64, 64);
        x *= T::from_f64(2f64.powi(step));
        k -= step;
    }
    x
}

/// Sorts `d[..n]` ascending and permutes the columns of `z` alike (ranks, then a
/// scatter through the workspace; all `d` finite here).
fn sort_columns<T: Real>(
    n: usize,
    d: &mut [T],
    z: &mut [T],
    ldz: usize,
    ws: &mut StedcWorkspace<T>,
) {
    ranks(&d[..n], &mut ws.rank[..n]);
    for c in 0..n {
        let dst = ws.rank[c];
        ws.values[dst] = d[c];
        for r in 0..n {
            ws.q[r + dst * n] = z[r + c * ldz];
        }
    }
    for c in 0..n {
        d[c] = ws.values[c];
        for r in 0..n {
            z[r + c * ldz] = ws.q[r + c * n];
        }
    }
}

/// `rank[a]` = position of `v[a]` in the stable ascending order: the number of entries
/// smaller, plus the number of equal entries before it. A permutation for finite `v`.
fn ranks<T: Real>(v: &[T], rank: &mut [usize]) {
    for a in 0..v.len() {
        let mut r = 0;
        for b in 0..v.len() {
            if v[b] < v[a] || (v[b] == v[a] && b < a) {
                r += 1;
            }
        }
        rank[a] = r;
    }
}

/// Eigendecomposition of the unreduced block `start..start + size` (all its
/// off-diagonals non-negligible), written into `d[start..]` and the diagonal block of
/// `z`, eigenvalues ascending.
fn solve_unreduced<T: Real>(
    start: usize,
    size: usize,
    d: &mut [T],
    e: &[T],
    z: &mut [T],
    ldz: usize,
    ws: &mut StedcWorkspace<T>,
) -> Result<(), StedcError> {
    // Division tree, breadth first (the fixed schedule of the GPU kernel).
    ws.nodes.clear();
    ws.nodes.push((0, size));
    let mut head = 0;
    while head < ws.nodes.len() {
        let (first, len) = ws.nodes[head];
        head += 1;
        if len > 2 {
            let m = len / 2;
            ws.nodes.push((first, m));
            ws.nodes.push((first + m, len - m));
        }
    }
    // Cuppen's tearing, top-down: subtract |e| from the two diagonals beside each cut.
    for &(first, len) in &ws.nodes {
        if len > 2 {
            let cut = start + first + len / 2 - 1;
            let a = e[cut].abs();
            d[cut] -= a;
            d[cut + 1] -= a;
        }
    }
    // Leaves, then merges, bottom-up (reverse breadth-first order).
    for idx in (0..ws.nodes.len()).rev() {
        let (first, len) = ws.nodes[idx];
        let s = start + first;
        match len {
            1 => z[s + s * ldz] = T::ONE,
            2 => solve_2x2(s, d, e, z, ldz),
            _ => {
                let n1 = len / 2;
                let e_cut = e[s + n1 - 1];
                merge(
                    len,
                    n1,
                    &mut d[s..s + len],
                    &mut z[s + s * ldz..],
                    ldz,
                    e_cut,
                    ws,
                )?;
            }
        }
    }
    Ok(())
}

/// `2 x 2` leaf `[[a, b], [b, c]]` at rows `s, s+1`, by one Jacobi rotation
/// (Golub & Van Loan's symmetric Schur decomposition; stable like LAPACK `dlaev2`):
/// `t = tan θ` is the smaller root of `t^2 + 2τt - 1 = 0`, `τ = (c - a) / (2b)`, and the
/// eigenvalues `a - t b`, `c + t b` have absolute error `O(ε (|a| + |b|))`.
fn solve_2x2<T: Real>(s: usize, d: &mut [T], e: &[T], z: &mut [T], ldz: usize) {
    let a = d[s];
    let c = d[s + 1];
    let b = e[s];
    let (t, cs, sn) = if b == T::ZERO {
        (T::ZERO, T::ONE, T::ZERO)
    } else {
        let two = T::from_f64(2.0);
        let tau = (c - a) / (two * b);
        let big = T::ONE / T::EPSILON.sqrt();
        let t = if tau.abs() > big {
            // sqrt(1 + τ^2) = |τ| to working precision.
            T::ONE / (two * tau)
        } else {
            T::ONE.copysign(tau) / (tau.abs() + (T::ONE + tau * tau).sqrt())
        };
        let cs = T::ONE / (T::ONE + t * t).sqrt();
        (t, cs, t * cs)
    };
    let la = a - t * b;
    let lc = c + t * b;
    // Columns: (cs, -sn) for la, (sn, cs) for lc.
    let (l0, v0, l1, v1) = if la <= lc {
        (la, (cs, -sn), lc, (sn, cs))
    } else {
        (lc, (sn, cs), la, (cs, -sn))
    };
    d[s] = l0;
    d[s + 1] = l1;
    z[s + s * ldz] = v0.0;
    z[s + 1 + s * ldz] = v0.1;
    z[s + (s + 1) * ldz] = v1.0;
    z[s + 1 + (s + 1) * ldz] = v1.1;
}

/// Merge of a node of size `nn = n1 + n2` (LAPACK `dlaed1`-`dlaed3`).
///
/// On entry `d[..n1]`, `d[n1..nn]` are the children's eigenvalues (each ascending) and
/// `z` (leading dimension `ldz`, the node's diagonal block) holds their eigenvectors in
/// its two diagonal blocks; `e_cut` is the torn off-diagonal. On exit `d[..nn]` holds
/// the node's eigenvalues ascending and `z` its eigenvectors.
fn merge<T: Real>(
    nn: usize,
    n1: usize,
    d: &mut [T],
    z: &mut [T],
    ldz: usize,
    e_cut: T,
    ws: &mut StedcWorkspace<T>,
) -> Result<(), StedcError> {
    let inv_sqrt2 = T::from_f64(std::f64::consts::FRAC_1_SQRT_2);
    let rho = T::from_f64(2.0) * e_cut.abs();
    let sigma = T::ONE.copysign(e_cut);

    // Merge the two ascending lists of child eigenvalues (stable: left child first).
    {
        let (mut a, mut b) = (0, n1);
        for k in 0..nn {
            let take_left = b == nn || (a < n1 && d[a] <= d[b]);
            if take_left {
                ws.perm[k] = a;
                a += 1;
            } else {
                ws.perm[k] = b;
                b += 1;
            }
        }
    }
    // Sorted child eigenvectors (block diagonal, zeros written explicitly),
    // poles and updating vector u.
    let q = &mut ws.q[..nn * nn];
    for k in 0..nn {
        let src = ws.perm[k];
        let col = &mut q[k * nn..(k + 1) * nn];
        if src < n1 {
            for r in 0..n1 {
                col[r] = z[r + src * ldz];
            }
            for x in &mut col[n1..] {
                *x = T::ZERO;
            }
            ws.z_sorted[k] = z[(n1 - 1) + src * ldz] * inv_sqrt2;
        } else {
            for x in &mut col[..n1] {
                *x = T::ZERO;
            }
            for r in n1..nn {
                col[r] = z[r + src * ldz];
            }
            ws.z_sorted[k] = sigma * z[n1 + src * ldz] * inv_sqrt2;
        }
        ws.d_sorted[k] = d[src];
    }

    // Deflation (dlaed2).
    let mut dmax = T::ZERO;
    for &x in &ws.d_sorted[..nn] {
        dmax = dmax.max(x.abs());
    }
    let tol = T::from_f64(8.0) * T::EPSILON * dmax.max(rho);
    ws.kept.clear();
    ws.deflated.clear();
    let mut pending: Option<usize> = None;
    for k in 0..nn {
        if rho * ws.z_sorted[k].abs() <= tol {
            ws.deflated.push(k);
            continue;
        }
        let Some(p) = pending else {
            pending = Some(k);
            continue;
        };
        let zp = ws.z_sorted[p];
        let zk = ws.z_sorted[k];
        let tau = (zp * zp + zk * zk).sqrt();
        let c = zk / tau;
        let s = -(zp / tau);
        let gap = ws.d_sorted[k] - ws.d_sorted[p];
        if (gap * c * s).abs() <= tol {
            // Rotate u_p into u_k; pole p becomes an eigenvalue.
            ws.z_sorted[k] = tau;
            ws.z_sorted[p] = T::ZERO;
            for r in 0..nn {
                let x = q[r + p * nn];
                let y = q[r + k * nn];
                q[r + p * nn] = c * x + s * y;
                q[r + k * nn] = c * y - s * x;
            }
            let dp = ws.d_sorted[p];
            let dk = ws.d_sorted[k];
            ws.d_sorted[p] = dp * c * c + dk * s * s;
            ws.d_sorted[k] = dp * s * s + dk * c * c;
            ws.deflated.push(p);
        } else {
            ws.kept.push(p);
        }
        pending = Some(k);
    }
    if let Some(p) = pending {
        ws.kept.push(p);
    }

    // The secular equation is solved on the merge scaled by a power of two to
    // max(|D|, ρ) ~ 1, so that (z_j / δ_j)^2 cannot overflow in a small, deep merge.
    let exponent = ilogb(dmax.max(rho));
    let rho_scaled = scale_pow2(rho, -exponent);
    let kk = ws.kept.len();
    for (l, &k) in ws.kept.iter().enumerate() {
        ws.d_kept[l] = scale_pow2(ws.d_sorted[k], -exponent);
        ws.z_kept[l] = ws.z_sorted[k];
    }

    // Secular equation: column j of w holds d_kept[i] - λ_j (scaled).
    let w = &mut ws.w[..kk * kk];
    for j in 0..kk {
        let root = secular_equation_root(
            j,
            &ws.d_kept[..kk],
            &ws.z_kept[..kk],
            rho_scaled,
            &mut w[j * kk..(j + 1) * kk],
        )
        .ok_or(StedcError::NotConverged { index: j, size: nn })?;
        if !root.lambda.is_finite() {
            return Err(StedcError::NonFinite);
        }
        ws.values[j] = scale_pow2(root.lambda, exponent);
        ws.max_secular_iterations = ws.max_secular_iterations.max(root.iterations);
    }

    // Gu–Eisenstat: ẑ from the computed roots (the common factor 1/ρ and the scaling
    // are dropped: the eigenvectors are normalised), then the eigenvectors of diag(δ) + ρ ẑ ẑ^T.
    if kk == 1 {
        w[0] = T::ONE;
    } else if kk > 1 {
        for i in 0..kk {
            let mut prod = w[i + i * kk];
            for j in 0..kk {
                if j != i {
                    prod *= w[i + j * kk] / (ws.d_kept[i] - ws.d_kept[j]);
                }
            }
            ws.z_hat[i] = (-prod).sqrt().copysign(ws.z_kept[i]);
        }
        for j in 0..kk {
            let col = &mut w[j * kk..(j + 1) * kk];
            let mut vmax = T::ZERO;
            for (x, &zh) in col.iter_mut().zip(&ws.z_hat[..kk]) {
                *x = zh / *x;
                vmax = vmax.max(x.abs());
            }
            let mut norm2 = T::ZERO;
            for x in col.iter_mut() {
                *x /= vmax;
                norm2 += *x * *x;
            }
            let inv = T::ONE / norm2.sqrt();
            for x in col.iter_mut() {
                *x *= inv;
            }
        }
    }

    // Final order: the K roots (ascending) and the deflated poles, merged ascending.
    let nd = ws.deflated.len();
    for (t, &k) in ws.deflated.iter().enumerate() {
        ws.values[kk + t] = ws.d_sorted[k];
    }
    ranks(&ws.values[..nn], &mut ws.rank[..nn]);
    for j in 0..kk {
        let pos = ws.rank[j];
        d[pos] = ws.values[j];
        // Column pos of Z = Σ_l w[l, j] Q[:, kept[l]], accumulated in l order (the
        // same rounding as a dot product per row).
        let wcol = &w[j * kk..(j + 1) * kk];
        let zcol = &mut z[pos * ldz..pos * ldz + nn];
        zcol.fill(T::ZERO);
        for (&wl, &k) in wcol.iter().zip(ws.kept.iter()) {
            let qcol = &q[k * nn..(k + 1) * nn];
            for (x, &qv) in zcol.iter_mut().zip(qcol) {
                *x += qv * wl;
            }
        }
    }
    for t in 0..nd {
        let pos = ws.rank[kk + t];
        d[pos] = ws.values[kk + t];
        let k = ws.deflated[t];
        for r in 0..nn {
            z[r + pos * ldz] = q[r + k * nn];
        }
    }
    Ok(())
}
