use super::{
    relative_residual, residual_check, Method, SolverParams, Status, Strategy, SystemReport,
};
use crate::householder::householder_tridiagonalize;
use crate::ldlt::{ldlt_factor, ldlt_solve, LdltError};
use crate::pcr::{pcr_solve, pcr_workspace_len};
use crate::stedc::{stedc, truncated_eigen_solve, StedcWorkspace};
use crate::Real;

/// Per-thread scratch for [`solve_one`], sized for one `n`.
#[derive(Debug, Clone)]
pub struct Workspace<T: Real> {
    n: usize,
    /// `n x n`: the factored matrix, then `Q`.
    a: Vec<T>,
    /// `n x n`: eigenvectors of the tridiagonal matrix.
    z: Vec<T>,
    d: Vec<T>,
    e: Vec<T>,
    d_eig: Vec<T>,
    e_eig: Vec<T>,
    v: Vec<T>,
    tmp: Vec<T>,
    pcr: Vec<T>,
    stedc: StedcWorkspace<T>,
}

impl<T: Real> Workspace<T> {
    pub fn new(n: usize) -> Self {
        Self {
            n,
            a: vec![T::ZERO; n * n],
            z: vec![T::ZERO; n * n],
            d: vec![T::ZERO; n],
            e: vec![T::ZERO; n.saturating_sub(1)],
            d_eig: vec![T::ZERO; n],
            e_eig: vec![T::ZERO; n.saturating_sub(1)],
            v: vec![T::ZERO; n],
            tmp: vec![T::ZERO; n],
            pcr: vec![T::ZERO; pcr_workspace_len(n)],
            stedc: StedcWorkspace::new(n),
        }
    }
}

/// Copies the lower triangle of the column-major `n x n` matrix `src` into `dst`.
fn copy_lower<T: Real>(n: usize, src: &[T], dst: &mut [T]) {
    for c in 0..n {
        dst[c * n + c..(c + 1) * n].copy_from_slice(&src[c * n + c..(c + 1) * n]);
    }
}

/// `y = Q^T b` (`Q` column-major `n x n`).
fn q_transpose_times<T: Real>(n: usize, q: &[T], b: &[T], y: &mut [T]) {
    for (j, yj) in y.iter_mut().enumerate().take(n) {
        let mut acc = T::ZERO;
        for i in 0..n {
            acc += q[i + j * n] * b[i];
        }
        *yj = acc;
    }
}

/// `x = Q z` (`Q` column-major `n x n`).
fn q_times<T: Real>(n: usize, q: &[T], z: &[T], x: &mut [T]) {
    x[..n].fill(T::ZERO);
    for (j, &zj) in z.iter().enumerate().take(n) {
        for i in 0..n {
            x[i] += q[i + j * n] * zj;
        }
    }
}

/// Solves one system `A x = b` with `strategy`, starting the escalation at `start`.
///
/// `a`: `n x n` column-major, lower triangle read; `b`, `x`: length `n`. This is the
/// scalar code that each GPU thread block mirrors; [`solve_batched`](super::solve_batched)
/// calls it for every system.
#[allow(clippy::too_many_arguments)]
pub fn solve_one<T: Real>(
    n: usize,
    a: &[T],
    b: &[T],
    x: &mut [T],
    strategy: Strategy,
    params: &SolverParams,
    start: Method,
    ws: &mut Workspace<T>,
) -> SystemReport {
    assert_eq!(
        ws.n, n,
        "workspace built for n = {}, system has n = {n}",
        ws.n
    );
    let first = match strategy {
        Strategy::Ldlt | Strategy::Escalating if start == Method::Ldlt => Method::Ldlt,
        Strategy::Ldlt => Method::Ldlt,
        Strategy::HouseholderPcr => Method::HouseholderPcr,
        Strategy::DivideConquer => Method::DivideConquer,
        Strategy::Escalating => start,
    };
    let escalate = strategy == Strategy::Escalating;
    let fail = |x: &mut [T], method, status| {
        x[..n].fill(T::NAN);
        SystemReport {
            method,
            status,
            residual: f64::NAN,
            discarded: 0,
        }
    };
    let finite_input = (0..n).all(|c| (c..n).all(|r| a[r + c * n].is_finite()))
        && b[..n].iter().all(|v| v.is_finite());
    if !finite_input {
        return fail(x, first, Status::NonFiniteInput);
    }
    let tol = params.tolerance::<T>(n);
    // Equilibrated condition number beyond which a solve is not trusted.
    let threshold = params.escalation_condition::<T>();
    // Status Ok with a finite solution, or Failed with x set to NaN.
    let finish = |x: &mut [T], method, residual: f64, discarded: u32| {
        let finite = !residual.is_nan() && x[..n].iter().all(|v| v.is_finite());
        if !finite {
            x[..n].fill(T::NAN);
        }
        SystemReport {
            method,
            status: if finite { Status::Ok } else { Status::Failed },
            residual: if finite { residual } else { f64::NAN },
            discarded,
        }
    };
    // Set when a solution's growth proved the system ill-conditioned beyond the threshold:
    // Householder + PCR is then skipped, as the paper advises.
    let mut ill_conditioned = false;

    // Level 0: L D L^T.
    if first == Method::Ldlt {
        copy_lower(n, a, &mut ws.a);
        match ldlt_factor(n, &mut ws.a, n) {
            Ok(()) => {
                x[..n].copy_from_slice(&b[..n]);
                ldlt_solve(n, &ws.a, n, x);
                let check = residual_check(n, a, b, x);
                // D_jj / A_jj: for the last unknown it is 1 / (A_jj (A^{-1})_jj), so a small
                // ratio proves the equilibrated matrix ill-conditioned beyond 1 / ratio.
                let pivot_ratio = (0..n)
                    .map(|j| ws.a[j + j * n] / a[j + j * n])
                    .fold(T::ONE, |m, v| m.min(v))
                    .to_f64();
                ill_conditioned = check.growth > threshold || pivot_ratio * threshold < 1.0;
                if !escalate || check.residual <= tol && !ill_conditioned {
                    return finish(x, Method::Ldlt, check.residual, 0);
                }
            }
            Err(_) if !escalate => return fail(x, Method::Ldlt, Status::NotPositiveDefinite),
            Err(LdltError::NotPositiveDefinite { index, pivot }) => {
                // A pivot that is tiny against its diagonal entry marks a (numerically)
                // singular matrix rather than an indefinite one: straight to divide and
                // conquer, since PCR would return an arbitrary solution of it.
                let diag = a[index + index * n].abs().to_f64();
                let tiny = pivot.abs() * threshold < diag;
                ill_conditioned = tiny || pivot.is_nan();
            }
        }
    }

    // Level 1: Householder tridiagonalization (shared with level 2), then PCR.
    copy_lower(n, a, &mut ws.a);
    householder_tridiagonalize(n, &mut ws.a, n, &mut ws.d, &mut ws.e);
    q_transpose_times(n, &ws.a, b, &mut ws.v);
    if first <= Method::HouseholderPcr && !ill_conditioned {
        ws.tmp.copy_from_slice(&ws.v);
        let pcr = pcr_solve(n, &ws.d, &ws.e, &mut ws.tmp, &mut ws.pcr);
        if pcr.is_ok() {
            q_times(n, &ws.a, &ws.tmp, x);
            let check = residual_check(n, a, b, x);
            if !escalate || check.residual <= tol && check.growth <= threshold {
                return finish(x, Method::HouseholderPcr, check.residual, 0);
            }
        } else if !escalate {
            return fail(x, Method::HouseholderPcr, Status::Failed);
        }
    }

    // Level 2: divide and conquer on T, truncated solve.
    ws.d_eig.copy_from_slice(&ws.d);
    ws.e_eig.copy_from_slice(&ws.e);
    if stedc(n, &mut ws.d_eig, &mut ws.e_eig, &mut ws.z, n, &mut ws.stedc).is_err() {
        return fail(x, Method::DivideConquer, Status::Failed);
    }
    let discarded = truncated_eigen_solve(
        n,
        &ws.d_eig,
        &ws.z,
        n,
        &mut ws.v,
        &mut ws.tmp,
        T::from_f64(params.condition_threshold),
    );
    q_times(n, &ws.a, &ws.v, x);
    let residual = relative_residual(n, a, b, x);
    finish(x, Method::DivideConquer, residual, discarded as u32)
}
