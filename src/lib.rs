//! `cva`: nested Monte Carlo credit valuation adjustment for portfolios with American
//! options (Abbas-Turki & Graillat 2016, Section 2), on the CPU, with the batched small
//! symmetric solvers of the `cva-kernels` crate.
//!
//! The binary (`cva run`, `cva bench`) is a thin layer over [`run::run`] and
//! [`bench`].

pub mod basis;
pub mod bench;
pub mod engine;
pub mod exposure;
pub mod gpu_engine;
pub mod model;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
