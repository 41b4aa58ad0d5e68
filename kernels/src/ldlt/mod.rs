//! `A = L D L^T` without pivoting for a small symmetric matrix (Abbas-Turki & Graillat
//! 2016, Section 3 and Algorithm 1; LAPACK's `dpotrf`/`dpotrs` without the square roots).
//!
//! `L` is unit lower triangular, `D` diagonal. The factorization is column by column,
//! as in eq. (5) of the paper, so that column `j`'s entries `L_{i,j}`, `i > j`, are
//! independent (the GPU kernels give them to different threads).

mod factor;
mod solve;

pub use factor::ldlt_factor;
pub use solve::ldlt_solve;

/// Why an `L D L^T` factorization stopped.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum LdltError {
    /// Pivot `D_{index,index}` (0-based) was not positive (or not finite): the matrix
    /// is not numerically positive definite.
    #[error("pivot {index} is not positive ({pivot:e}): matrix is not positive definite")]
    NotPositiveDefinite { index: usize, pivot: f64 },
}
