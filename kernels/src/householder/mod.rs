//! Householder reduction of a small symmetric matrix to tridiagonal form,
//! `A = Q T Q^T` (Abbas-Turki & Graillat 2016, Section 4.2, eqs. (11)-(14) and
//! Algorithm 2; LAPACK's `dsytd2` + `dorgtr`).

mod tridiagonalize;

pub use tridiagonalize::householder_tridiagonalize;
