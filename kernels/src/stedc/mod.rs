//! Divide and conquer for the symmetric tridiagonal eigenproblem `T = Z Λ Z^T`
//! (Abbas-Turki & Graillat 2016, Section 5 and Algorithm 3; Cuppen 1981;
//! Gu & Eisenstat 1995; LAPACK's `dstedc`/`dlaed0`-`dlaed4`), and the solve of
//! `T z = v` by the eigendecomposition truncated at a condition threshold.

mod divide_conquer;
mod secular;
mod truncated_solve;

pub use divide_conquer::{stedc, StedcWorkspace};
pub use secular::{secular_equation_root, SecularRoot, SECULAR_MAX_ITERATIONS};
pub use truncated_solve::truncated_eigen_solve;

/// Why the divide-and-conquer eigensolver failed.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum StedcError {
    /// The secular equation of the merge of size `size` did not converge for root `index`.
    #[error("secular equation did not converge (root {index} of a merge of size {size})")]
    NotConverged { index: usize, size: usize },
    /// Non-finite input or output.
    #[error("non-finite value in the tridiagonal matrix or its eigendecomposition")]
    NonFinite,
}
