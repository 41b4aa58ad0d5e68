//! Parallel cyclic reduction for a symmetric tridiagonal system `T z = v` of any size
//! `n`, with the paper's permutation of equations instead of zero padding
//! (Abbas-Turki & Graillat 2016, Section 4, eq. (10) and Fig. 9).

mod solve;

pub use solve::{pcr_solve, pcr_workspace_len};

/// Why parallel cyclic reduction failed.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum PcrError {
    /// A diagonal entry used as a divisor was zero or the reduction produced a
    /// non-finite value (the system is singular or reduction without pivoting broke down).
    #[error("cyclic reduction broke down at step {step}")]
    Breakdown { step: usize },
}
