//! Batched small dense solvers for the `cva` engine, with a CPU reference
//! implementation of every algorithm (this crate) and CUDA kernels that mirror it.
//!
//! # The batched symmetric solver
//! [`solve_batched`] solves `batch` independent symmetric systems `A_i x_i = b_i`,
//! `1 <= n <= 64`, in `f32` or `f64`, by the methods of Abbas-Turki & Graillat (2016),
//! *Resolving small random symmetric linear systems on GPUs*:
//!
//! | level | method | module | paper |
//! |---|---|---|---|
//! | 0 | `A = L D L^T` without pivoting | [`ldlt`] | Algorithm 1 |
//! | 1 | `A = Q T Q^T` (Householder), then `T z = Q^T b` by parallel cyclic reduction | [`householder`], [`pcr`] | Algorithm 2, Fig. 9 |
//! | 2 | `T = Z Λ Z^T` by divide and conquer, solve with the eigenvalues kept by a condition threshold | [`stedc`] | Algorithm 3 |
//!
//! The [`Strategy`] chooses one method or the escalation between them; every system gets
//! a [`SystemReport`] (method, status, relative residual, discarded eigenvalues).
//!
//! # Layout
//! See [`SymmetricBatch`]: matrix `i` is the `n x n` column-major block
//! `a[i*n*n .. (i+1)*n*n]`, of which only the **lower triangle** (`a[r + c*n]`, `r >= c`)
//! is read; right-hand side `i` is `b[i*n .. (i+1)*n]`; solution `i` is `x[i*n .. (i+1)*n]`.

pub mod basis;
pub mod batch;
pub mod cuda;
pub mod families;
pub mod gj2;
pub mod householder;
pub mod ldlt;
pub mod pcr;
pub mod real;
pub mod stedc;

pub use batch::{
    solve_batched, BatchSummary, Method, SolverParams, Status, Strategy, SymmetricBatch,
    SystemReport,
};
pub use real::Real;

/// Largest system size the solvers accept (the GPU kernels keep one matrix in shared memory).
pub const MAX_N: usize = 64;
