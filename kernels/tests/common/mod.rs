//! Helpers shared by the GPU test binaries of this crate.

use cudarc::driver::CudaStream;
use cva_kernels::cuda::probe;
use std::sync::Arc;

/// The default stream of device 0, or `None` (with the reason on stderr) where there is
/// no usable CUDA device: the GPU tests are `#[ignore]`d and only run where there is one.
pub fn stream() -> Option<Arc<CudaStream>> {
    match probe() {
        Ok(_) => {
            let ctx = cudarc::driver::CudaContext::new(0).expect("CUDA context");
            Some(ctx.default_stream())
        }
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}
