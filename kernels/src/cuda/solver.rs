//! [`GpuBatchSolver`]: the batched symmetric solver on one CUDA device.

use super::module::{CompiledKernel, KernelFamily, KernelKey, ModuleCache};
use super::{probe, tuning, GpuError};
use crate::{
    BatchSummary, Method, Real, SolverParams, Status, Strategy, SymmetricBatch, SystemReport, MAX_N,
};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use std::sync::{Arc, Mutex};

/// Element types the kernels are instantiated for (`f32`, `f64`).
pub trait GpuReal: Real + DeviceRepr + ValidAsZeroBits {
    /// `true` for `f64`.
    const IS_F64: bool;
}
impl GpuReal for f32 {
    const IS_F64: bool = false;
}
impl GpuReal for f64 {
    const IS_F64: bool = true;
}

/// Per-system result written by the kernels (`struct GpuReport` in `cuda/common.cu`):
/// the relative residual (NaN where no solution was produced), and the codes of
/// [`Method`] and [`Status`] in declaration order. 16 bytes. The divide-and-conquer
/// kernel stores the number of discarded eigenvalues in `method >> 8`
/// ([`SystemReport::discarded`]); the method code is `method & 0xff`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuReport {
    pub residual: f64,
    pub method: u32,
    pub status: u32,
}

// SAFETY: plain `#[repr(C)]` struct of an f64 and two u32 with no padding, identical
// to the CUDA `struct GpuReport { double; unsigned; unsigned; }`.
unsafe impl DeviceRepr for GpuReport {}
// SAFETY: all-zero bits are a valid value (0.0, Ldlt, Ok).
unsafe impl ValidAsZeroBits for GpuReport {}

impl GpuReport {
    /// The host report. Unknown codes (an unwritten, poisoned entry) map to
    /// [`Status::Failed`] with a NaN residual.
    pub fn to_system_report(self) -> SystemReport {
        let discarded = self.method >> 8;
        let method = match self.method & 0xff {
            0 => Some(Method::Ldlt),
            1 => Some(Method::HouseholderPcr),
            2 => Some(Method::DivideConquer),
            _ => None,
        };
        let status = match self.status {
            0 => Some(Status::Ok),
            1 => Some(Status::NotPositiveDefinite),
            2 => Some(Status::Failed),
            3 => Some(Status::NonFiniteInput),
            _ => None,
        };
        match (method, status) {
            (Some(method), Some(status)) => SystemReport {
                method,
                status,
                residual: self.residual,
                discarded,
            },
            _ => SystemReport {
                method: method.unwrap_or_default(),
                status: Status::Failed,
                residual: f64::NAN,
                discarded: 0,
            },
        }
    }
}

/// How the `L D L^T` kernel shares a system between threads (Section 3.2 of the paper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LdltOrganisation {
    /// The measured best `n*` for this `n` and precision ([`tuning::ldlt_hybrid_nstar`]).
    #[default]
    Auto,
    /// One thread per system, the matrix in shared memory.
    Simd,
    /// `n` threads per system.
    Collaborative,
    /// `nstar` threads per system (`1..=64`); thread `t` owns rows `t, t + nstar, ...`.
    Hybrid { nstar: usize },
}

/// Kernel choices of [`GpuBatchSolver::solve_batched_gpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuOptions {
    pub ldlt: LdltOrganisation,
    /// Threads per system of Householder + PCR (`None`: [`tuning::householder_nstar`]).
    pub householder_nstar: Option<usize>,
    /// Where [`Strategy::Escalating`] starts (the memory rule: the previous batch's
    /// [`BatchSummary::next_start`]); ignored by the other strategies.
    pub start: Method,
    /// [`Strategy::Escalating`] only. `false` (default): the escalation's list lengths
    /// stay on the device and every level is queued at once (no synchronisation). `true`:
    /// the host reads each list's length back after the kernel that fills it (two
    /// synchronisations) and skips the levels whose list is empty. The same systems take
    /// the same methods and get the same bits either way. The engine uses `true`: where
    /// the path stream's kernels fill the SMs, the empty levels' blocks wait for room
    /// (basket29 f64 100k on an H100: 0.068 s of solve with the reads, 0.099-0.116 s
    /// without; benches/RESULTS.md, twenty-second session, round 1).
    pub host_list_lengths: bool,
}

/// Why an escalating solve always has a first launch: L D L^T when it starts there, else
/// Householder + PCR on every system.
const FIRST_LAUNCH: &str = "L D L^T or Householder + PCR on every system launches first";

/// Reals per system of divide and conquer's scratch record (`TRI_STRIDE` of
/// `cuda/common.cu`: d, e, tau, `Q^T b` and the `n x n` reflectors).
pub fn tri_stride(n: usize) -> usize {
    n * n + 4 * n
}

/// Systems per chunk of divide and conquer: its scratch records ([`tri_stride`] reals
/// each) take at most 1 GiB.
fn dc_chunk(n: usize, elem_bytes: usize) -> usize {
    ((1usize << 30) / (tri_stride(n) * elem_bytes)).clamp(1 << 10, 1 << 20)
}

/// Dynamic shared memory of `divide_conquer` for size `n` (`DC_REALS` reals and
/// `DC_INTS` ints of `cuda/stedc.cu`: two `n x ld` matrices, `ld` = `n` rounded up to
/// odd (the development switch `DC_W_REGS` needs only one), and 11 vectors of reals, 7
/// of ints), rounded up to 16 bytes.
pub fn dc_shared_bytes(n: usize, elem_bytes: usize) -> usize {
    let ld = n | 1;
    ((2 * n * ld + 11 * n) * elem_bytes + 7 * n * 4).next_multiple_of(16)
}

/// Dynamic shared memory of `ldlt_check` / `pcr_check` (`CHECK_REALS` of
/// `cuda/escalate.cu`).
pub fn check_shared_bytes(n: usize, elem_bytes: usize) -> usize {
    ((n * n + 5 * n) * elem_bytes).next_multiple_of(16)
}

/// What a launch used: kernel, geometry and resources.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchInfo {
    pub kernel: String,
    /// Threads per system (1 for SIMD).
    pub nstar: usize,
    pub block_threads: u32,
    pub grid_blocks: u32,
    pub shared_bytes_per_block: usize,
    pub registers: i32,
    /// Local memory per thread (register spills); 0 is the goal.
    pub local_bytes: i32,
    /// Resident blocks per multiprocessor (occupancy calculator).
    pub blocks_per_sm: u32,
    /// Resident warps per multiprocessor.
    pub warps_per_sm: u32,
}

/// Properties of the device read once at start.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub shared_per_block_optin: usize,
    pub shared_per_multiprocessor: usize,
    pub l2_bytes: usize,
    pub total_memory: usize,
}

/// The batched symmetric solver on one CUDA device: context, one stream, compiled
/// modules. All device buffers passed to it must belong to its context and are used
/// in the order of its stream ([`GpuBatchSolver::stream`]).
#[derive(Debug)]
pub struct GpuBatchSolver {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    cache: ModuleCache,
    /// Divide and conquer's scratch records (f64), grown on demand and reused: the
    /// solver's work is ordered on its one stream.
    tri_workspace: Mutex<Option<CudaSlice<u8>>>,
}

fn attr(ctx: &CudaContext, a: CUdevice_attribute) -> Result<usize, GpuError> {
    Ok(ctx.attribute(a)?.max(0) as usize)
}

impl GpuBatchSolver {
    /// Opens device `ordinal` after [`probe`]: creates the context and a stream.
    ///
    /// # Errors
    /// [`GpuError::NoDevice`] if there is no usable device, [`GpuError::Cuda`] if
    /// context creation fails.
    pub fn new(ordinal: usize) -> Result<Self, GpuError> {
        let count = probe()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice {
                reason: format!("device {ordinal} requested, {count} present"),
            });
        }
        let ctx = CudaContext::new(ordinal)?;
        // SAFETY: the solver issues all its work on its single stream, so stream order
        // already orders every read and write; callers are told to use that stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let info = DeviceInfo {
            ordinal,
            name: ctx.name()?,
            compute_capability: ctx.compute_capability()?,
            multiprocessors: attr(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )? as u32,
            shared_per_block_optin: attr(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?,
            shared_per_multiprocessor: attr(
                &ctx,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            )?,
            l2_bytes: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            total_memory: ctx.total_mem()?,
        };
        let cache = ModuleCache::new(ctx.clone(), info.compute_capability);
        Ok(Self {
            ctx,
            stream,
            info,
            cache,
            tri_workspace: Mutex::new(None),
        })
    }

    /// Moves the solver's work to a new stream of the device's greatest priority: the
    /// blocks of its kernels are dispatched before those of normal-priority streams, which
    /// fill the resources they leave (the engine generates the next date's inner paths on
    /// such a stream while this one runs the regression steps). Call it before any work
    /// is queued; buffers already allocated stay valid. The context does no event tracking
    /// (see [`GpuBatchSolver::new`]): work shared with another stream must be ordered
    /// with events by the caller.
    ///
    /// # Errors
    /// Driver errors (stream creation).
    pub fn use_priority_stream(&mut self) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        let (_least, greatest) = cudarc::driver::result::stream::get_priority_range()?;
        self.stream = self.ctx.new_stream_with_priority(greatest)?;
        // The workspace is allocated on (and freed in the order of) the solver's stream.
        *self
            .tri_workspace
            .get_mut()
            .unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// The stream all work is issued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }
    pub fn modules(&self) -> &ModuleCache {
        &self.cache
    }

    /// The kernel key and `n*` that `strategy` with `options` uses for size `n`.
    ///
    /// # Errors
    /// [`GpuError::Unsupported`] for strategies without a GPU kernel,
    /// [`GpuError::Invalid`] for `n` or `n*` out of range.
    pub fn kernel_key<T: GpuReal>(
        &self,
        n: usize,
        strategy: Strategy,
        options: &GpuOptions,
    ) -> Result<(KernelKey, usize), GpuError> {
        if !(1..=MAX_N).contains(&n) {
            return Err(GpuError::Invalid(format!("n = {n} outside 1..={MAX_N}")));
        }
        let eb = std::mem::size_of::<T>();
        let key = |family, nstar: usize, elems: usize| {
            let spw = tuning::systems_per_warp(nstar);
            KernelKey {
                family,
                f64: T::IS_F64,
                n: n as u32,
                nstar: nstar as u32,
                sys_stride: tuning::padded_stride(elems, eb, spw) as u32,
            }
        };
        let check = |nstar: usize| {
            if (1..=64).contains(&nstar) {
                Ok(nstar)
            } else {
                Err(GpuError::Invalid(format!("n* = {nstar} outside 1..=64")))
            }
        };
        match strategy {
            Strategy::Ldlt => {
                let nstar = match options.ldlt {
                    LdltOrganisation::Simd => {
                        return Ok((
                            KernelKey {
                                family: KernelFamily::LdltSimd,
                                f64: T::IS_F64,
                                n: n as u32,
                                nstar: 0,
                                sys_stride: 0,
                            },
                            1,
                        ))
                    }
                    LdltOrganisation::Auto => tuning::ldlt_hybrid_nstar(n, T::IS_F64),
                    LdltOrganisation::Collaborative => n,
                    LdltOrganisation::Hybrid { nstar } => check(nstar)?,
                };
                Ok((
                    key(
                        KernelFamily::LdltGroup,
                        nstar,
                        tuning::ldlt_group_elems(n, eb),
                    ),
                    nstar,
                ))
            }
            Strategy::HouseholderPcr => {
                let nstar = check(
                    options
                        .householder_nstar
                        .unwrap_or_else(|| tuning::householder_nstar(n, T::IS_F64)),
                )?;
                Ok((
                    key(
                        KernelFamily::HouseholderPcr,
                        nstar,
                        tuning::householder_elems(n, T::IS_F64),
                    ),
                    nstar,
                ))
            }
            Strategy::DivideConquer | Strategy::Escalating => Ok((
                KernelKey {
                    family: KernelFamily::DivideConquer,
                    f64: T::IS_F64,
                    n: n as u32,
                    nstar: 0,
                    sys_stride: 0,
                },
                32,
            )),
        }
    }

    /// Launch geometry of the one-warp-per-system kernels of `cuda/stedc.cu` and
    /// `cuda/escalate.cu`: blocks of 32 threads, `smem` dynamic bytes, one block per
    /// system up to 2^22 blocks (the kernels loop over the rest).
    fn warp_geometry(
        &self,
        kernel: &CompiledKernel,
        entry: &str,
        smem: usize,
        count: usize,
    ) -> Result<(LaunchConfig, LaunchInfo), GpuError> {
        let f = kernel.function(entry);
        let limit = self.info.shared_per_block_optin;
        if smem + kernel.static_shared_bytes as usize > limit {
            return Err(GpuError::SharedMemory {
                kernel: format!("{}::{entry}", kernel.key.label()),
                needed: smem,
                limit,
            });
        }
        if smem > 48 * 1024 {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )?;
        }
        let blocks_per_sm = f.occupancy_max_active_blocks_per_multiprocessor(32, smem, None)?;
        let grid = count.clamp(1, 1 << 22) as u32;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let info = LaunchInfo {
            kernel: format!("{}::{entry}", kernel.key.label()),
            nstar: 32,
            block_threads: 32,
            grid_blocks: grid,
            shared_bytes_per_block: smem + kernel.static_shared_bytes as usize,
            registers: kernel.registers,
            local_bytes: kernel.local_bytes,
            blocks_per_sm,
            warps_per_sm: blocks_per_sm,
        };
        Ok((cfg, info))
    }

    /// Launch geometry of `divide_conquer`: `w` systems per block of `32 w` threads and
    /// `w * smem` bytes, `ceil(count / w)` blocks up to 2^22, with `w` = 4 (round 9;
    /// development override `CVA_DC_WARPS=w`) reduced to what the module's
    /// `__launch_bounds__` (`DC_BLOCK_WARPS`: 12 for n <= 48 in both precisions, 1 elsewhere) and the
    /// shared memory per block allow; at `w` = 1 [`Self::warp_geometry`] (one system per
    /// block of 32 threads).
    fn dc_geometry(
        &self,
        kernel: &CompiledKernel,
        smem: usize,
        count: usize,
    ) -> Result<(LaunchConfig, LaunchInfo), GpuError> {
        let asked = std::env::var("CVA_DC_WARPS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(4);
        let f = kernel.function("divide_conquer");
        let max_warps = (f.max_threads_per_block()? as usize / 32).max(1);
        let limit = self.info.shared_per_block_optin;
        let fit = (limit.saturating_sub(kernel.static_shared_bytes as usize) / smem.max(1)).max(1);
        let warps = asked.min(max_warps).min(fit).max(1);
        if warps == 1 {
            return self.warp_geometry(kernel, "divide_conquer", smem, count);
        }
        let bytes = warps * smem;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )?;
        let threads = 32 * warps as u32;
        let blocks_per_sm =
            f.occupancy_max_active_blocks_per_multiprocessor(threads, bytes, None)?;
        let grid = count.div_ceil(warps).clamp(1, 1 << 22) as u32;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: bytes as u32,
        };
        let info = LaunchInfo {
            kernel: format!("{}::divide_conquer", kernel.key.label()),
            nstar: 32,
            block_threads: threads,
            grid_blocks: grid,
            shared_bytes_per_block: bytes + kernel.static_shared_bytes as usize,
            registers: kernel.registers,
            local_bytes: kernel.local_bytes,
            blocks_per_sm,
            warps_per_sm: blocks_per_sm * warps as u32,
        };
        Ok((cfg, info))
    }

    /// Divide and conquer with the truncated solve on the positions `k < count` of a
    /// batch or a list: the systems `0..count` (`list` `None`), or, for `list` =
    /// `(idx, length)`, `idx[0..min(count, length[0])]`, where `length` is a one-element
    /// device counter (the escalation's list length, written by an earlier kernel and
    /// never read on the host; `count` is then the list's capacity). Writes the `x` and
    /// reports of those systems only. In f32 one kernel (`divide_conquer` with its own
    /// Householder step, `DC_SPLIT` 0 in `cuda/stedc.cu`); in f64 two kernels per round of
    /// at most [`dc_chunk`] positions: `householder_tridiag` (the tridiagonalization of
    /// `cuda/householder_pcr.cu`, `n*` threads per system, reading the listed matrices in
    /// place) writes each position's `T`, `Q^T b` and reflectors to a scratch record
    /// (`TRI_STRIDE` of `cuda/common.cu`, in the solver's reused workspace), then
    /// `divide_conquer` (`cuda/stedc.cu`, one warp per system) runs stedc, the truncated
    /// solve, `x = Q v` and the residual on them. With a device counter, every round is
    /// queued and those past the list's end exit at once, and `divide_conquer` runs one
    /// wave of blocks that loop over the list. Returns the (last) `divide_conquer` launch.
    #[allow(clippy::too_many_arguments)]
    fn launch_divide_conquer<T: GpuReal>(
        &self,
        kernel: &CompiledKernel,
        n: usize,
        a: &CudaView<'_, T>,
        b: &CudaView<'_, T>,
        x: &mut CudaViewMut<'_, T>,
        reports: &mut CudaViewMut<'_, GpuReport>,
        list: Option<(&CudaView<'_, u32>, &CudaView<'_, u32>)>,
        count: usize,
        threshold: f64,
    ) -> Result<LaunchInfo, GpuError> {
        let eb = std::mem::size_of::<T>();
        let smem = dc_shared_bytes(n, eb);
        // Occupancy is limited by shared memory: ask for the largest carveout.
        kernel.function("divide_conquer").set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            100,
        )?;
        let dc_config = |cnt: usize| -> Result<(LaunchConfig, LaunchInfo), GpuError> {
            let (mut cfg, mut info) = self.dc_geometry(kernel, smem, cnt)?;
            if list.is_some() {
                // The list's length is known on the device only: one wave of blocks.
                self.limit_to_wave(&mut cfg, &mut info);
            }
            Ok((cfg, info))
        };
        if let Some((idx, _)) = list {
            assert!(idx.len() >= count, "idx holds fewer than {count} entries");
        }
        if count == 0 || !T::IS_F64 {
            let (cfg, info) = dc_config(count)?;
            if count > 0 {
                // f32: one kernel (`DC_SPLIT` 0), the warp's own Householder step first.
                self.launch_dc_entry(
                    kernel, cfg, a, b, None, x, reports, list, 0, count, threshold,
                )?;
            }
            return Ok(info);
        }
        let (tkey, tnstar) = self.tridiag_key::<T>(n)?;
        let tk = self.cache.get(tkey)?;
        let chunk = count.min(dc_chunk(n, eb));
        let tri_len = chunk * tri_stride(n);
        let mut workspace = self
            .tri_workspace
            .lock()
            .map_err(|_| GpuError::Invalid("divide and conquer workspace poisoned".into()))?;
        if workspace.as_ref().is_none_or(|w| w.len() < tri_len * eb) {
            *workspace = None;
            // SAFETY: uninitialised device memory; every record that `divide_conquer`
            // reads is written first by `householder_tridiag` for the same position.
            *workspace = Some(unsafe { self.stream.alloc::<u8>(tri_len * eb) }?);
        }
        let Some(bytes) = workspace.as_mut() else {
            unreachable!("allocated above")
        };
        // SAFETY: T is f32 or f64 (plain bits, any pattern valid); the bytes hold
        // tri_len * size_of::<T>() (grown above) and the allocation is aligned to 256.
        let Some(mut tri) = (unsafe { bytes.transmute_mut::<T>(tri_len) }) else {
            unreachable!("the workspace holds tri_len reals")
        };
        let mut last = None;
        let mut k0 = 0;
        while k0 < count {
            let cnt = chunk.min(count - k0);
            let cnt_arg = cnt as i64;
            match list {
                Some((list, length)) => {
                    let entry = "householder_tridiag_listed";
                    let (mut cfg, mut tinfo) = self.geometry::<T>(&tk, entry, tnstar, cnt)?;
                    // One wave of blocks that loop over the list's positions.
                    self.limit_to_wave(&mut cfg, &mut tinfo);
                    let k0_arg = k0 as i64;
                    let mut launch = self.stream.launch_builder(tk.function(entry));
                    launch
                        .arg(a)
                        .arg(b)
                        .arg(&mut tri)
                        .arg(&cnt_arg)
                        .arg(list)
                        .arg(length)
                        .arg(&k0_arg);
                    // SAFETY: `householder_tridiag_listed_{f32,f64}` takes (const real* A,
                    // const real* B, real* TRI, long long batch, const unsigned* idx, const
                    // unsigned* count, long long k0) with real = T; it visits the positions
                    // p < min(cnt, *count - k0), the systems list[k0 + p] (the list holds
                    // `count` entries, checked above, each an index below the batch of a
                    // and b: the caller's contract) and writes record p of tri (cnt
                    // records of `tri_stride(n)` reals).
                    unsafe { launch.launch(cfg) }?;
                }
                None => {
                    let (cfg, _) = self.geometry::<T>(&tk, "householder_tridiag", tnstar, cnt)?;
                    let a_c = a.slice(k0 * n * n..(k0 + cnt) * n * n);
                    let b_c = b.slice(k0 * n..(k0 + cnt) * n);
                    let mut launch = self
                        .stream
                        .launch_builder(tk.function("householder_tridiag"));
                    launch.arg(&a_c).arg(&b_c).arg(&mut tri).arg(&cnt_arg);
                    // SAFETY: `householder_tridiag_{f32,f64}` takes (const real* A, const
                    // real* B, real* TRI, long long batch) with real = T; a_c and b_c hold
                    // cnt systems, tri cnt records of `tri_stride(n)` reals; each group
                    // writes only its own system's record.
                    unsafe { launch.launch(cfg) }?;
                }
            }
            let (cfg, dinfo) = dc_config(cnt)?;
            self.launch_dc_entry(
                kernel,
                cfg,
                a,
                b,
                Some(&tri.as_view()),
                x,
                reports,
                list,
                k0,
                cnt,
                threshold,
            )?;
            last = Some(dinfo);
            k0 += cnt;
        }
        Ok(last.expect("count > 0: at least one round"))
    }

    /// Launches `divide_conquer` (`cuda/stedc.cu`) on the positions `k0..k0 + count` of
    /// the batch (`list` `None`) or of the list `idx` of `list` = `(idx, length)`,
    /// limited to `length[0]` (a device counter), reading the records `tri` of `householder_tridiag` for them
    /// (`None`: the one-kernel form, which ignores it).
    #[allow(clippy::too_many_arguments)]
    fn launch_dc_entry<T: GpuReal>(
        &self,
        kernel: &CompiledKernel,
        cfg: LaunchConfig,
        a: &CudaView<'_, T>,
        b: &CudaView<'_, T>,
        tri: Option<&CudaView<'_, T>>,
        x: &mut CudaViewMut<'_, T>,
        reports: &mut CudaViewMut<'_, GpuReport>,
        list: Option<(&CudaView<'_, u32>, &CudaView<'_, u32>)>,
        k0: usize,
        count: usize,
        threshold: f64,
    ) -> Result<(), GpuError> {
        let null: u64 = 0;
        let k0_arg = k0 as i64;
        let cnt_arg = count as i64;
        let mut launch = self
            .stream
            .launch_builder(kernel.function("divide_conquer"));
        launch.arg(a).arg(b);
        match tri {
            Some(t) => launch.arg(t),
            None => launch.arg(&null),
        };
        launch.arg(&mut *x).arg(&mut *reports);
        match list {
            Some((idx, length)) => launch.arg(idx).arg(length),
            None => launch.arg(&null).arg(&null),
        };
        launch.arg(&k0_arg).arg(&cnt_arg).arg(&threshold);
        // SAFETY: `divide_conquer_{f32,f64}` takes (const real* A, const real* B, const
        // real* TRI, real* X, GpuReport* rep, const unsigned* idx, const unsigned*
        // listed, long long k0, long long capacity, double threshold) with real = T; A
        // holds batch*n*n, B and X batch*n, rep batch entries (checked by the caller);
        // the kernel visits the positions k < count (and k < *listed - k0 when the
        // counter is given), the systems idx[k0 + k] (idx holds at least k0 + count
        // indices < batch) or k0 + k; TRI is null (the one-kernel form does not read
        // it) or holds the `count` records just written for these positions; the u64 0
        // is a null pointer of the same size. Each system is written by one warp only;
        // A, B, TRI, idx, listed are read only.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// The key and `n*` of divide and conquer's first kernel
    /// ([`KernelFamily::HouseholderTridiag`]): the Householder + PCR kernel's tuned `n*`
    /// and shared stride for `n`.
    fn tridiag_key<T: GpuReal>(&self, n: usize) -> Result<(KernelKey, usize), GpuError> {
        let (mut key, nstar) =
            self.kernel_key::<T>(n, Strategy::HouseholderPcr, &GpuOptions::default())?;
        key.family = KernelFamily::HouseholderTridiag;
        Ok((key, nstar))
    }

    /// Divide and conquer alone on `count = d.len() / n` symmetric tridiagonal matrices
    /// (the `stedc` of `cuda/stedc.cu`: the method of [`crate::stedc::stedc`], equal to rounding), for
    /// tests: `d`, `e`: `count x n` (row `k` of `e` holds the `n - 1` off-diagonal
    /// entries then one unused entry); `lambda`: `count x n`, eigenvalues ascending;
    /// `z`: `count x n x n`, column-major eigenvectors. NaN where `stedc` failed.
    ///
    /// # Errors
    /// Compilation, shared memory or launch errors.
    ///
    /// # Panics
    /// If the lengths do not match.
    #[track_caller]
    pub fn stedc_batched_gpu<T: GpuReal>(
        &self,
        n: usize,
        d: &CudaView<'_, T>,
        e: &CudaView<'_, T>,
        lambda: &mut CudaViewMut<'_, T>,
        z: &mut CudaViewMut<'_, T>,
    ) -> Result<(), GpuError> {
        assert!((1..=MAX_N).contains(&n), "n = {n} outside 1..={MAX_N}");
        let count = d.len() / n;
        assert_eq!(d.len(), count * n, "d.len() must be count*n");
        assert_eq!(e.len(), count * n, "e.len() must be count*n");
        assert_eq!(lambda.len(), count * n, "lambda.len() must be count*n");
        assert_eq!(z.len(), count * n * n, "z.len() must be count*n*n");
        let (key, _) = self.kernel_key::<T>(n, Strategy::DivideConquer, &GpuOptions::default())?;
        let kernel = self.cache.get(key)?;
        let smem = dc_shared_bytes(n, std::mem::size_of::<T>());
        let (cfg, _) = self.warp_geometry(&kernel, "stedc_batched", smem, count)?;
        if count == 0 {
            return Ok(());
        }
        let count_arg = count as i64;
        let mut launch = self.stream.launch_builder(kernel.function("stedc_batched"));
        launch.arg(d).arg(e).arg(lambda).arg(z).arg(&count_arg);
        // SAFETY: `stedc_batched_{f32,f64}` takes (const real* D, const real* E, real*
        // lambda, real* Z, long long count) with real = T and the lengths checked above;
        // each matrix is read and written by one block only.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// Escalating solve on the device (the logic of `solve_one`, see
    /// [`Strategy::Escalating`]): starting at `options.start`, `L D L^T` on every
    /// system (the kernel of [`Strategy::Ldlt`]; the group organisation settles in the
    /// same pass the systems whose residual and growth pass and whose own pivot ratio
    /// is at least `4 / threshold + 128 n eps`, and lists the others), then `ldlt_check`
    /// computes the residual, the equilibrated growth and the pivot ratio of the
    /// remaining systems and appends those that need the next level to two index lists
    /// (atomic compaction); Householder + PCR solves the systems of list 1 in place,
    /// `pcr_check` accepts them or appends them to list 2, and divide and conquer solves
    /// list 2 in place. The list lengths are counters on the device: every kernel of a
    /// level reads its list's length there (a wave of blocks that loop over the list,
    /// or a grid for the list's capacity whose blocks past its end exit at once), so
    /// nothing comes back to the host and the call queues its work without waiting
    /// (Abbas-Turki & Graillat 2016, Section 5: the escalation of the hybrid solver;
    /// issue 4: compaction without a round trip through the host). With
    /// [`GpuOptions::host_list_lengths`] the host reads the lengths instead and skips the
    /// empty levels.
    ///
    /// Arguments as [`GpuBatchSolver::solve_batched_gpu`]. Returns the first launch
    /// (L D L^T, Householder + PCR or divide and conquer, by `options.start`); the
    /// method each system took is in its report.
    ///
    /// # Errors
    /// Compilation, shared memory, allocation or launch errors.
    ///
    /// # Panics
    /// If the buffer lengths do not match `n`.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn solve_escalating_gpu<T: GpuReal>(
        &self,
        n: usize,
        a: &CudaView<'_, T>,
        b: &CudaView<'_, T>,
        x: &mut CudaViewMut<'_, T>,
        reports: &mut CudaViewMut<'_, GpuReport>,
        params: &SolverParams,
        options: &GpuOptions,
    ) -> Result<LaunchInfo, GpuError> {
        assert!((1..=MAX_N).contains(&n), "n = {n} outside 1..={MAX_N}");
        let batch = b.len() / n;
        assert_eq!(a.len(), batch * n * n, "a.len() must be batch*n*n");
        assert_eq!(x.len(), batch * n, "x.len() must be batch*n");
        assert_eq!(reports.len(), batch, "reports.len() must be batch");
        let eb = std::mem::size_of::<T>();
        let tol = params.tolerance::<T>(n);
        // The checks use the escalation bound (as `solve_one`); divide and conquer
        // truncates with `condition_threshold`.
        let thr = params.escalation_condition::<T>();
        let trunc = params.condition_threshold;
        let (dkey, _) = self.kernel_key::<T>(n, Strategy::DivideConquer, options)?;
        let dck = self.cache.get(dkey)?;
        if options.start == Method::DivideConquer || batch == 0 {
            return self.launch_divide_conquer(&dck, n, a, b, x, reports, None, batch, trunc);
        }
        // [list 1 length, list 2 length, systems deferred by the L D L^T kernel].
        let mut counters: CudaSlice<u32> = self.stream.alloc_zeros(3)?;
        let null_idx: u64 = 0;
        let mut list2: CudaSlice<u32> = self.stream.alloc_zeros(batch)?;
        let check_smem = check_shared_bytes(n, eb);
        let batch_arg = batch as i64;
        let (mut first_launch, list1) = if options.start == Method::Ldlt {
            let mut l1: CudaSlice<u32> = self.stream.alloc_zeros(batch)?;
            // The group L D L^T kernel settles what it can and lists the rest in
            // `deferred` (count in counters[2]); ldlt_check then visits that list only.
            let mut deferred: Option<CudaSlice<u32>> = None;
            let (lkey, lnstar) = self.kernel_key::<T>(n, Strategy::Ldlt, options)?;
            let first = if lkey.family == KernelFamily::LdltGroup {
                let lk = self.cache.get(lkey)?;
                let (cfg, info) = self.geometry::<T>(&lk, "ldlt_group", lnstar, batch)?;
                let mut dl: CudaSlice<u32> = self.stream.alloc_zeros(batch)?;
                let mut launch = self.stream.launch_builder(lk.function("ldlt_group"));
                launch
                    .arg(a)
                    .arg(b)
                    .arg(&mut *x)
                    .arg(&mut *reports)
                    .arg(&batch_arg)
                    .arg(&tol)
                    .arg(&thr)
                    .arg(&mut dl)
                    .arg(&mut counters);
                // SAFETY: `ldlt_group_{f32,f64}` takes (const real* A, const real* B,
                // real* X, GpuReport* rep, long long batch, double tol, double thr,
                // unsigned* defer, unsigned* counters) with real = T; A holds
                // batch*n*n, B and X batch*n, rep batch entries (checked above); each
                // system writes only its own X and rep entries and appends itself at
                // most once to `dl` (`batch` entries) through counters[2] (3 entries,
                // zeroed). A and B are read only.
                unsafe { launch.launch(cfg) }?;
                deferred = Some(dl);
                info
            } else {
                self.solve_batched_gpu(n, a, b, x, reports, Strategy::Ldlt, params, options)?
            };
            let (mut cfg, mut cinfo) = self.warp_geometry(&dck, "ldlt_check", check_smem, batch)?;
            if deferred.is_some() {
                // The deferred list's length is known on the device only.
                self.limit_to_wave(&mut cfg, &mut cinfo);
            }
            let xr = x.slice(0..batch * n);
            let rr = reports.slice(0..batch);
            let mut launch = self.stream.launch_builder(dck.function("ldlt_check"));
            launch.arg(a).arg(b).arg(&xr).arg(&rr);
            match &deferred {
                Some(dl) => launch.arg(dl),
                None => launch.arg(&null_idx),
            };
            launch
                .arg(&batch_arg)
                .arg(&tol)
                .arg(&thr)
                .arg(&mut l1)
                .arg(&mut list2)
                .arg(&mut counters);
            // SAFETY: `ldlt_check_{f32,f64}` takes (const real* A, const real* B, const
            // real* X, const GpuReport* rep, const unsigned* idx, long long batch,
            // double tol, double thr, unsigned* list1, unsigned* list2, unsigned*
            // counters); A, B, X, rep hold `batch` systems (checked above) and are read
            // only; idx is null (every system) or the deferred list (counters[2]
            // distinct indices < batch, written by the previous launch); list1 and list2
            // hold `batch` entries, and each system is appended to at most one of them
            // once, through counters[0] / counters[1] (3 entries, zeroed).
            unsafe { launch.launch(cfg) }?;
            (Some(first), Some(l1))
        } else {
            // Householder + PCR on every system below: its launch is the first.
            (None, None)
        };

        // With `host_list_lengths`, the list lengths read back so far ([list 1, list 2]).
        let mut known: Option<Vec<u32>> = None;
        if options.host_list_lengths && list1.is_some() {
            known = Some(self.stream.clone_dtoh(&counters)?);
            self.stream.synchronize()?;
        }
        // Level 1: Householder + PCR in place on list 1 (length counters[0]) or on
        // every system, then pcr_check.
        if known.as_ref().is_none_or(|c| c[0] > 0) {
            match &list1 {
                Some(l1) => {
                    let (key, nstar) =
                        self.kernel_key::<T>(n, Strategy::HouseholderPcr, options)?;
                    let kernel = self.cache.get(key)?;
                    let length = counters.slice(0..1);
                    let entry = "householder_pcr_listed";
                    let (mut cfg, mut info) = self.geometry::<T>(&kernel, entry, nstar, batch)?;
                    // One wave of blocks that loop over the list.
                    self.limit_to_wave(&mut cfg, &mut info);
                    let zero: i64 = 0;
                    let mut launch = self.stream.launch_builder(kernel.function(entry));
                    launch
                        .arg(a)
                        .arg(b)
                        .arg(&mut *x)
                        .arg(&mut *reports)
                        .arg(&batch_arg)
                        .arg(l1)
                        .arg(&length)
                        .arg(&zero);
                    // SAFETY: `householder_pcr_listed_{f32,f64}` takes (const real* A,
                    // const real* B, real* X, GpuReport* rep, long long batch, const
                    // unsigned* idx, const unsigned* count, long long k0) with real = T;
                    // A holds batch*n*n, B and X batch*n, rep batch entries (checked
                    // above); it visits the positions p < min(batch, counters[0]) (the
                    // length of list 1, written by ldlt_check), the systems l1[p]
                    // (distinct indices < batch), and writes only their X and rep entries.
                    unsafe { launch.launch(cfg) }?;
                }
                None => {
                    first_launch = Some(self.solve_batched_gpu(
                        n,
                        a,
                        b,
                        x,
                        reports,
                        Strategy::HouseholderPcr,
                        params,
                        options,
                    )?);
                }
            }
            let (mut cfg, mut cinfo) = self.warp_geometry(&dck, "pcr_check", check_smem, batch)?;
            if list1.is_some() {
                self.limit_to_wave(&mut cfg, &mut cinfo);
            }
            let mut launch = self.stream.launch_builder(dck.function("pcr_check"));
            launch.arg(a).arg(b);
            match &list1 {
                Some(l1) => launch.arg(l1),
                None => launch.arg(&null_idx),
            };
            launch
                .arg(&batch_arg)
                .arg(&mut *x)
                .arg(&mut *reports)
                .arg(&tol)
                .arg(&thr)
                .arg(&mut list2)
                .arg(&mut counters);
            // SAFETY: `pcr_check_{f32,f64}` takes (const real* A, const real* B, const
            // unsigned* idx, long long batch, real* X, GpuReport* rep, double tol,
            // double thr, unsigned* list2, unsigned* counters); it visits the systems
            // list1[k], k < counters[0] (idx given: indices < batch, distinct) or
            // k < batch, reads and writes only their X and rep entries (batch of them,
            // checked above) and appends each at most once to list2 (`batch` entries)
            // through counters[1] (3 entries).
            unsafe { launch.launch(cfg) }?;
        }

        // Level 2: divide and conquer in place on list 2 (length counters[1]).
        if options.host_list_lengths {
            known = Some(self.stream.clone_dtoh(&counters)?);
            self.stream.synchronize()?;
        }
        if known.is_some_and(|c| c[1] == 0) {
            return Ok(first_launch.expect(FIRST_LAUNCH));
        }
        let length = counters.slice(1..2);
        self.launch_divide_conquer(
            &dck,
            n,
            a,
            b,
            x,
            reports,
            Some((&list2.as_view(), &length)),
            batch,
            trunc,
        )?;
        Ok(first_launch.expect(FIRST_LAUNCH))
    }

    /// Limits `cfg`'s grid (and `info`) to one wave of resident blocks
    /// (`info.blocks_per_sm` per SM): the grid of a kernel whose blocks loop over a list
    /// whose length only the device knows.
    fn limit_to_wave(&self, cfg: &mut LaunchConfig, info: &mut LaunchInfo) {
        let wave = info.blocks_per_sm.max(1) * self.info.multiprocessors;
        cfg.grid_dim.0 = cfg.grid_dim.0.min(wave);
        info.grid_blocks = cfg.grid_dim.0;
    }

    /// Launch geometry for `kernel` over `batch` systems: block size chosen to maximise
    /// resident warps per SM (occupancy calculator, from the device's shared memory per
    /// SM and the kernel's registers), dynamic shared-memory limit raised when above
    /// 48 KiB.
    fn geometry<T: GpuReal>(
        &self,
        kernel: &CompiledKernel,
        entry: &str,
        nstar: usize,
        batch: usize,
    ) -> Result<(LaunchConfig, LaunchInfo), GpuError> {
        let key = kernel.key;
        let n = key.n as usize;
        let eb = std::mem::size_of::<T>();
        let f = kernel.function(entry);
        let limit = self.info.shared_per_block_optin;
        let hh = matches!(
            key.family,
            KernelFamily::HouseholderPcr | KernelFamily::HouseholderTridiag
        );
        if hh {
            // Registers, not a smaller carveout picked by the driver, should bound the
            // resident warps (round 8 of benches/RESULTS.md: without this the driver's
            // choice stopped f64 n = 30 n* = 16 at 8 blocks of 16 KB).
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )?;
        }
        // (threads per block, systems per block, dynamic shared bytes) candidates.
        let candidates: Vec<(u32, usize, usize)> = match key.family {
            KernelFamily::LdltSimd => [1usize, 2, 4, 8, 16, 32, 64]
                .iter()
                .map(|&t| (t as u32, t, t * tuning::ldlt_simd_elems(n) * eb))
                .collect(),
            _ if nstar > 32 => vec![(64, 1, key.sys_stride as usize * eb)],
            _ => {
                let spw = tuning::systems_per_warp(nstar);
                // Householder + PCR's rolled kernel: 4 warps per block on ties
                // (`tuning::householder_rolled`); elsewhere the fewest threads on ties.
                let order = if hh && tuning::householder_rolled(n, key.f64, nstar) {
                    vec![4, 2, 1]
                } else {
                    vec![1, 2, 4]
                };
                // Development override (Householder + PCR): warps per block.
                let hh_warps = hh
                    .then(|| std::env::var("CVA_HH_WARPS").ok())
                    .flatten()
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|w| [1, 2, 4].contains(w));
                let ws: Vec<usize> = hh_warps.map_or(order, |w| vec![w]);
                ws.iter()
                    .map(|&w| {
                        (
                            (32 * w) as u32,
                            w * spw,
                            w * spw * key.sys_stride as usize * eb,
                        )
                    })
                    .collect()
            }
        };
        let mut best: Option<(u32, usize, usize, u32, u32)> = None;
        for (threads, systems, smem) in candidates {
            if smem + kernel.static_shared_bytes as usize > limit {
                continue;
            }
            if smem > 48 * 1024 {
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )?;
            }
            let blocks = f.occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)?;
            // Resident systems per SM; on ties the first candidate (see `order`).
            let score = blocks * systems as u32;
            let warps = blocks * threads.div_ceil(32);
            if blocks > 0 && best.is_none_or(|b| score > b.3 * b.1 as u32) {
                best = Some((threads, systems, smem, blocks, warps));
            }
        }
        let Some((threads, systems, smem, blocks_per_sm, warps_per_sm)) = best else {
            let needed = match key.family {
                KernelFamily::LdltSimd => tuning::ldlt_simd_elems(n) * eb,
                _ => key.sys_stride as usize * eb,
            };
            return Err(GpuError::SharedMemory {
                kernel: key.label(),
                needed,
                limit,
            });
        };
        // The group kernels are persistent (each block loops over tiles of systems while
        // the next tile's matrices are being copied): one wave of resident blocks.
        let tiles = batch.div_ceil(systems).max(1);
        let grid = match key.family {
            KernelFamily::LdltSimd => tiles,
            // One tile per block (the kernel does not loop over tiles in this mode).
            KernelFamily::HouseholderPcr | KernelFamily::HouseholderTridiag
                if tuning::householder_single_buffer(n, key.f64) =>
            {
                tiles
            }
            _ => tiles.min(blocks_per_sm as usize * self.info.multiprocessors as usize),
        };
        let grid = u32::try_from(grid)
            .map_err(|_| GpuError::Invalid(format!("batch {batch} too large for one launch")))?;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let info = LaunchInfo {
            kernel: key.label(),
            nstar,
            block_threads: threads,
            grid_blocks: grid,
            shared_bytes_per_block: smem + kernel.static_shared_bytes as usize,
            registers: kernel.registers,
            local_bytes: kernel.local_bytes,
            blocks_per_sm,
            warps_per_sm,
        };
        Ok((cfg, info))
    }

    /// Every kernel that `strategy` with `options` may launch for size `n`: its own
    /// ([`GpuBatchSolver::kernel_key`]); for [`Strategy::Escalating`] also its `L D L^T`
    /// and Householder + PCR levels'; for divide and conquer in f64 (alone or as the last
    /// level) the Householder tridiagonalization it starts with.
    ///
    /// # Errors
    /// As [`GpuBatchSolver::kernel_key`].
    pub fn kernel_keys<T: GpuReal>(
        &self,
        n: usize,
        strategy: Strategy,
        options: &GpuOptions,
    ) -> Result<Vec<KernelKey>, GpuError> {
        let mut keys = vec![self.kernel_key::<T>(n, strategy, options)?.0];
        if strategy == Strategy::Escalating {
            keys.push(self.kernel_key::<T>(n, Strategy::Ldlt, options)?.0);
            keys.push(
                self.kernel_key::<T>(n, Strategy::HouseholderPcr, options)?
                    .0,
            );
        }
        if T::IS_F64 && matches!(strategy, Strategy::DivideConquer | Strategy::Escalating) {
            keys.push(self.tridiag_key::<T>(n)?.0);
        }
        Ok(keys)
    }

    /// Compiles (once) every kernel that `strategy` may launch for the sizes `ns`
    /// ([`GpuBatchSolver::kernel_keys`]), in parallel, so that no solve compiles.
    ///
    /// # Errors
    /// As [`GpuBatchSolver::kernel_key`] and compilation errors.
    pub fn prepare<T: GpuReal>(
        &self,
        ns: &[usize],
        strategy: Strategy,
        options: &GpuOptions,
    ) -> Result<(), GpuError> {
        let mut keys = Vec::new();
        for &n in ns {
            keys.extend(self.kernel_keys::<T>(n, strategy, options)?);
        }
        self.cache.precompile(&keys)
    }

    /// Solves the `batch = b.len() / n` systems `A_i x_i = b_i` on the device with
    /// `strategy`: every [`Strategy`]; [`Strategy::Escalating`] goes through
    /// [`GpuBatchSolver::solve_escalating_gpu`] (starting at `options.start`) and
    /// returns its first launch.
    ///
    /// * `a`: `batch * n * n`, matrix `i` column-major at `a[i*n*n..]`, lower triangle read.
    /// * `b`: `batch * n`; `x`: `batch * n`, solution `i` at `x[i*n..]` (NaN where no
    ///   solution was produced, as [`crate::solve_batched`]).
    /// * `reports`: `batch` entries, see [`GpuReport`].
    ///
    /// The work is queued on [`GpuBatchSolver::stream`]; the call returns without
    /// waiting for it (escalation included: its list lengths stay on the device).
    /// `params`: the tolerance and condition threshold of escalation and truncation.
    ///
    /// # Errors
    /// Unsupported strategy, invalid `n*`, compilation, shared memory or launch errors.
    ///
    /// # Panics
    /// If the buffer lengths do not match `n`.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub fn solve_batched_gpu<T: GpuReal>(
        &self,
        n: usize,
        a: &CudaView<'_, T>,
        b: &CudaView<'_, T>,
        x: &mut CudaViewMut<'_, T>,
        reports: &mut CudaViewMut<'_, GpuReport>,
        strategy: Strategy,
        params: &SolverParams,
        options: &GpuOptions,
    ) -> Result<LaunchInfo, GpuError> {
        assert!((1..=MAX_N).contains(&n), "n = {n} outside 1..={MAX_N}");
        assert_eq!(
            b.len() % n,
            0,
            "b.len() = {} is not a multiple of n = {n}",
            b.len()
        );
        let batch = b.len() / n;
        assert_eq!(a.len(), batch * n * n, "a.len() must be batch*n*n");
        assert_eq!(x.len(), batch * n, "x.len() must be batch*n");
        assert_eq!(reports.len(), batch, "reports.len() must be batch");
        let (key, nstar) = self.kernel_key::<T>(n, strategy, options)?;
        let kernel = self.cache.get(key)?;
        let entry = match (key.family, strategy) {
            (KernelFamily::LdltGroup, _) => "ldlt_group",
            (KernelFamily::LdltSimd, _) => "ldlt_simd",
            (KernelFamily::HouseholderPcr, _) => "householder_pcr",
            (KernelFamily::HouseholderTridiag, _) => unreachable!("not a strategy's key"),
            (KernelFamily::DivideConquer, Strategy::Escalating) => {
                return self.solve_escalating_gpu(n, a, b, x, reports, params, options);
            }
            (KernelFamily::DivideConquer, _) => {
                return self.launch_divide_conquer(
                    &kernel,
                    n,
                    a,
                    b,
                    x,
                    reports,
                    None,
                    batch,
                    params.condition_threshold,
                );
            }
            (KernelFamily::Util, _) => unreachable!(),
        };
        let (cfg, info) = self.geometry::<T>(&kernel, entry, nstar, batch)?;
        if batch == 0 {
            return Ok(info);
        }
        let batch_arg = batch as i64;
        let f = kernel.function(entry);
        let mut launch = self.stream.launch_builder(f);
        launch.arg(a).arg(b).arg(x).arg(reports).arg(&batch_arg);
        let (zero, null) = (0.0f64, 0u64);
        if key.family == KernelFamily::LdltGroup {
            // Not escalating: tol, thr unused, null defer list and counters.
            launch.arg(&zero).arg(&zero).arg(&null).arg(&null);
        }
        // SAFETY: every kernel of these families has the signature
        // (const real* A, const real* B, real* X, GpuReport* rep, long long batch),
        // with `real` = T (the module was compiled for T), `ldlt_group` followed by
        // (double tol, double thr, unsigned* defer, unsigned* counters), here null
        // pointers of the same size (u64 0), which turn the escalation part off;
        // A holds batch*n*n, B and X batch*n, rep batch elements (checked above), and
        // the grid covers exactly the systems < batch, which the kernel also checks.
        // X and rep are written only, A and B read only; the views are distinct
        // borrows, so nothing aliases.
        unsafe { launch.launch(cfg) }?;
        Ok(info)
    }

    /// Host convenience: copies the batch to the device, solves it with
    /// [`GpuBatchSolver::solve_batched_gpu`], copies `x` and the reports back and
    /// returns the summary (as [`crate::solve_batched`]).
    ///
    /// # Errors
    /// As [`GpuBatchSolver::solve_batched_gpu`] and copy errors.
    ///
    /// # Panics
    /// If `x` or `reports` have the wrong length.
    #[track_caller]
    pub fn solve_batched_host<T: GpuReal>(
        &self,
        batch: &SymmetricBatch<'_, T>,
        x: &mut [T],
        reports: &mut [SystemReport],
        strategy: Strategy,
        params: &SolverParams,
        options: &GpuOptions,
    ) -> Result<BatchSummary, GpuError> {
        let n = batch.n;
        assert_eq!(x.len(), batch.batch * n, "x.len() must be batch*n");
        assert_eq!(reports.len(), batch.batch, "reports.len() must be batch");
        let a_dev = self.stream.clone_htod(batch.a)?;
        let b_dev = self.stream.clone_htod(batch.b)?;
        let mut x_dev: CudaSlice<T> = self.stream.clone_htod(&vec![T::NAN; x.len()])?;
        let mut r_dev: CudaSlice<GpuReport> = self.stream.alloc_zeros(batch.batch.max(1))?;
        self.solve_batched_gpu(
            n,
            &a_dev.as_view(),
            &b_dev.as_view(),
            &mut x_dev.as_view_mut(),
            &mut r_dev.slice_mut(0..batch.batch),
            strategy,
            params,
            options,
        )?;
        self.stream.memcpy_dtoh(&x_dev, x)?;
        let host_reports = self.stream.clone_dtoh(&r_dev)?;
        self.stream.synchronize()?;
        for (r, g) in reports.iter_mut().zip(host_reports) {
            *r = g.to_system_report();
        }
        let start = match strategy {
            Strategy::Escalating => options.start,
            _ => Method::Ldlt,
        };
        Ok(BatchSummary::from_reports(
            reports,
            start,
            params.memory_fraction,
        ))
    }
}
