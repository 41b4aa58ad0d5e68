//! CUDA backend of the batched symmetric solver.
//!
//! The kernels (`kernels/cuda/*.cu`) are embedded with `include_str!`, compiled at run
//! time by NVRTC for the device's own `sm_XY` with explicit numerics
//! (`--fmad=false --prec-div=true --prec-sqrt=true --ftz=false`, so that every
//! operation rounds as in the CPU code) and cached per device ([`module`]). Each
//! kernel is specialised for one system size `n` and one number of communicating
//! threads `n*`, so that loops over rows and columns unroll and rows live in
//! registers.
//!
//! | organisation | threads per system | paper |
//! |---|---|---|
//! | [`LdltOrganisation::Simd`] | 1, matrix in shared memory | Section 3.2, "SIMD version" |
//! | [`LdltOrganisation::Collaborative`] | `n` | Section 3.2, "collaborative" |
//! | [`LdltOrganisation::Hybrid`] | `n* < n`, several systems per warp | Algorithm 1 |
//! | Householder + PCR | `n*` (default from [`tuning`]) | Algorithm 2, Fig. 9 |
//! | Householder (`cuda/householder_pcr.cu`, f64; in f32 inside the next kernel), then divide and conquer (`cuda/stedc.cu`) | `n*`, then 32 (one warp) | Algorithm 3 |
//! | escalation (`cuda/escalate.cu`) | 32 per check | Sections 1 and 6 |
//!
//! Entry points: [`GpuBatchSolver::solve_batched_gpu`] on device buffers and
//! [`GpuBatchSolver::solve_batched_host`] on host slices; [`bench::bench_solvers`]
//! times every organisation against cuSOLVER.
//!
//! Everything here compiles without CUDA (`dynamic-loading`): [`probe`] checks for the
//! driver library and a device before anything touches CUDA, and returns
//! [`GpuError::NoDevice`] instead of panicking.

pub mod bench;
pub mod engine;
pub mod module;
pub mod paths;
pub mod regression;
pub mod solver;
pub mod tuning;
pub mod walk;

pub use bench::{bench_solvers, BenchConfig, BenchReport, BenchRow};
pub use module::{CompiledKernel, KernelFamily, KernelKey, ModuleCache};
pub use solver::{GpuBatchSolver, GpuOptions, GpuReal, GpuReport, LaunchInfo, LdltOrganisation};

use crate::Strategy;

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No usable CUDA device: driver library missing, no device, or initialisation failed.
    #[error("no CUDA device: {reason}")]
    NoDevice { reason: String },
    /// NVRTC rejected a kernel; `log` is NVRTC's program log.
    #[error("NVRTC compile of {kernel} failed:\n{log}")]
    Compile { kernel: String, log: String },
    /// NVRTC failed outside compilation (library missing, program creation, CUBIN).
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),
    /// A cuSOLVER call failed.
    #[error("cuSOLVER: {0}")]
    Cusolver(String),
    /// The strategy has no GPU implementation (kept for API stability; every
    /// strategy is implemented now).
    #[error("strategy {0} is not implemented on the GPU yet")]
    Unsupported(Strategy),
    /// A kernel needs more shared memory per block than the device offers.
    #[error("kernel {kernel} needs {needed} bytes of shared memory per block, the device allows {limit}")]
    SharedMemory {
        kernel: String,
        needed: usize,
        limit: usize,
    },
    /// An argument is out of range (for example `n*` outside `1..=64`).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Checks that the CUDA driver library can be loaded and that at least one device is
/// present; returns the number of devices. Never panics: a missing library, a failing
/// `cuInit` or a panic inside the bindings all become [`GpuError::NoDevice`].
///
/// # Errors
/// [`GpuError::NoDevice`] with the reason.
pub fn probe() -> Result<usize, GpuError> {
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: only tries to dlopen the driver library by its usual names; no CUDA call.
        let present = unsafe { cudarc::driver::sys::is_culib_present() };
        if !present {
            return Err(GpuError::NoDevice {
                reason: "the CUDA driver library (libcuda) was not found".into(),
            });
        }
        let count =
            cudarc::driver::CudaContext::device_count().map_err(|e| GpuError::NoDevice {
                reason: format!("cuInit/cuDeviceGetCount failed: {e}"),
            })?;
        if count <= 0 {
            return Err(GpuError::NoDevice {
                reason: "the CUDA driver reports no device".into(),
            });
        }
        Ok(count as usize)
    });
    outcome.unwrap_or_else(|_| {
        Err(GpuError::NoDevice {
            reason: "the CUDA bindings panicked while probing".into(),
        })
    })
}

/// Panics unless libnvrtc can be loaded: the first line of the NVRTC compile tests
/// (ignored on CI, which has no NVRTC), so that they fail rather than pass silently.
#[cfg(test)]
pub(crate) fn assert_nvrtc_present() {
    // SAFETY: only tries to dlopen libnvrtc.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    assert!(present, "libnvrtc not found");
}
