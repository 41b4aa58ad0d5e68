//! NVRTC compilation of the embedded CUDA sources and the per-device module cache.
//!
//! A kernel is identified by a [`KernelKey`] (family, precision, `n`, `n*`, shared
//! stride). Its source is a list of `#define`s followed by `cuda/prelude.cu`,
//! `cuda/common.cu` and the family's file; NVRTC compiles it straight to a CUBIN for the
//! device's `sm_XY`, which is loaded once and kept for the life of the [`ModuleCache`].

use super::GpuError;
use cudarc::driver::{CudaContext, CudaFunction};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex};

const PRELUDE_CU: &str = include_str!("../../cuda/prelude.cu");
const COMMON_CU: &str = include_str!("../../cuda/common.cu");
const RCP_CU: &str = include_str!("../../cuda/rcp.cu");
const LDLT_CU: &str = include_str!("../../cuda/ldlt.cu");
const HOUSEHOLDER_PCR_CU: &str = include_str!("../../cuda/householder_pcr.cu");
const UTIL_CU: &str = include_str!("../../cuda/util.cu");
const STEDC_CU: &str = include_str!("../../cuda/stedc.cu");
const ESCALATE_CU: &str = include_str!("../../cuda/escalate.cu");

/// NVRTC options fixing the floating-point semantics: no contraction of `a*b+c` into
/// FMA, IEEE division and square root, denormals kept; the CPU code does the same.
pub const NUMERICS_OPTIONS: [&str; 4] = [
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--ftz=false",
];

/// A family of kernels sharing one source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelFamily {
    /// `ldlt_group_{f32,f64}`: `n*` threads per system (collaborative / hybrid).
    LdltGroup,
    /// `ldlt_simd_{f32,f64}`: one thread per system.
    LdltSimd,
    /// `householder_pcr_{f32,f64}` and `householder_pcr_listed_{f32,f64}` (the systems of
    /// a list whose length is a device counter: the escalation's level 1).
    HouseholderPcr,
    /// `householder_tridiag_{f32,f64}`: divide and conquer's first kernel (used in f64),
    /// the tridiagonalization of `cuda/householder_pcr.cu` (same geometry and `n*`) on
    /// the reversed matrix, writing `T`, `Q^T b` and the reflectors instead of running PCR;
    /// and its listed form `householder_tridiag_listed_{f32,f64}`.
    HouseholderTridiag,
    /// `divide_conquer_{f32,f64}` (one warp per system: in f64 divide and conquer's second
    /// kernel, stedc, the truncated solve and `x = Q v` on the records of
    /// [`KernelFamily::HouseholderTridiag`]; in f32 the whole solve, its own Householder
    /// step first) and the escalation kernels `ldlt_check`, `pcr_check`
    /// (`cuda/rcp.cu` + `cuda/stedc.cu` + `cuda/escalate.cu`).
    DivideConquer,
    /// Helpers with run-time `n`: `fill_spd`, `fill_nan`, `pointer_array`, `relative_residual`.
    Util,
}

/// The embedded source `name`, or, when the environment variable
/// `CVA_CUDA_SOURCE_DIR` is set (a development hook for trying kernel changes on the
/// GPU machine without rebuilding), the file of that name in that directory.
pub(crate) fn source_file(name: &str, embedded: &'static str) -> String {
    match std::env::var_os("CVA_CUDA_SOURCE_DIR") {
        Some(dir) => std::fs::read_to_string(std::path::Path::new(&dir).join(name))
            .unwrap_or_else(|_| embedded.to_string()),
        None => embedded.to_string(),
    }
}

/// `cuda/prelude.cu` (the device helpers shared by the solver, build and engine modules:
/// cp.async copies, the inner states' planes of words, the FP64 tensor-core block), to be
/// placed before the source that uses it.
pub(crate) fn prelude_source() -> String {
    source_file("prelude.cu", PRELUDE_CU)
}

impl KernelFamily {
    fn source(self) -> String {
        match self {
            KernelFamily::LdltGroup | KernelFamily::LdltSimd => {
                source_file("rcp.cu", RCP_CU) + &source_file("ldlt.cu", LDLT_CU)
            }
            KernelFamily::HouseholderPcr => {
                source_file("rcp.cu", RCP_CU)
                    + &source_file("householder_pcr.cu", HOUSEHOLDER_PCR_CU)
            }
            KernelFamily::HouseholderTridiag => {
                "#define HH_TRIDIAG_OUT 1\n".to_string()
                    + &source_file("rcp.cu", RCP_CU)
                    + &source_file("householder_pcr.cu", HOUSEHOLDER_PCR_CU)
            }
            KernelFamily::Util => source_file("util.cu", UTIL_CU),
            KernelFamily::DivideConquer => {
                source_file("rcp.cu", RCP_CU)
                    + &source_file("stedc.cu", STEDC_CU)
                    + &source_file("escalate.cu", ESCALATE_CU)
            }
        }
    }
    fn entries(self) -> &'static [&'static str] {
        match self {
            KernelFamily::LdltGroup => &["ldlt_group"],
            KernelFamily::LdltSimd => &["ldlt_simd"],
            KernelFamily::HouseholderPcr => &["householder_pcr", "householder_pcr_listed"],
            KernelFamily::HouseholderTridiag => {
                &["householder_tridiag", "householder_tridiag_listed"]
            }
            KernelFamily::Util => &["fill_spd", "fill_nan", "pointer_array", "relative_residual"],
            KernelFamily::DivideConquer => {
                &["divide_conquer", "ldlt_check", "pcr_check", "stedc_batched"]
            }
        }
    }
}

/// Identifies one compiled module. `n`, `nstar` and `sys_stride` are 0 where the
/// family does not use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelKey {
    pub family: KernelFamily,
    pub f64: bool,
    pub n: u32,
    pub nstar: u32,
    /// Shared-memory elements per system (`SYS_STRIDE`), group kernels only.
    pub sys_stride: u32,
}

impl KernelKey {
    fn precision(&self) -> &'static str {
        if self.f64 {
            "f64"
        } else {
            "f32"
        }
    }

    /// Human-readable name used in errors and benchmark rows.
    pub fn label(&self) -> String {
        format!(
            "{:?}[{} n={} n*={} stride={}]",
            self.family,
            self.precision(),
            self.n,
            self.nstar,
            self.sys_stride
        )
    }

    /// The full CUDA source of this module.
    pub fn source(&self) -> String {
        let mut s = format!("#define REAL_F64 {}\n", u32::from(self.f64));
        if self.family != KernelFamily::Util {
            s += &format!("#define N {}\n", self.n);
        }
        if matches!(
            self.family,
            KernelFamily::LdltGroup
                | KernelFamily::HouseholderPcr
                | KernelFamily::HouseholderTridiag
        ) {
            s += &format!(
                "#define NSTAR {}\n#define SYS_STRIDE {}\n",
                self.nstar, self.sys_stride
            );
            // Every system's shared block starts on a 16-byte boundary: vector loads allowed.
            let eb = if self.f64 { 8 } else { 4 };
            if (self.sys_stride as usize * eb).is_multiple_of(16) {
                s += "#define VEC_OK 1\n";
            }
        }
        s += &prelude_source();
        s += &source_file("common.cu", COMMON_CU);
        s += &self.family.source();
        s
    }
}

/// A loaded kernel and its resource usage as reported by the driver.
#[derive(Debug)]
pub struct CompiledKernel {
    pub key: KernelKey,
    pub functions: Vec<(String, CudaFunction)>,
    /// Registers per thread of the first entry point.
    pub registers: i32,
    /// Local memory per thread (spills, indexed arrays) of the first entry point.
    pub local_bytes: i32,
    /// Static shared memory per block of the first entry point.
    pub static_shared_bytes: i32,
}

impl CompiledKernel {
    /// The entry point `name` (without precision suffix).
    ///
    /// # Panics
    /// If the module has no such entry point (a programming error).
    #[track_caller]
    pub fn function(&self, name: &str) -> &CudaFunction {
        self.functions
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f)
            .unwrap_or_else(|| panic!("kernel {name} not in module {}", self.key.label()))
    }
}

/// Compiles `src` with NVRTC for `arch` (e.g. `sm_90`) and returns the CUBIN.
///
/// # Errors
/// [`GpuError::Nvrtc`] if libnvrtc is missing or fails, [`GpuError::Compile`] with the
/// program log if the source does not compile.
pub fn compile_cubin(src: &str, name: &str, arch: &str) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::{result, sys};
    // SAFETY: only tries to dlopen libnvrtc by its usual names.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::Nvrtc("libnvrtc was not found".into()));
    }
    let csrc = CString::new(src).map_err(|e| GpuError::Nvrtc(e.to_string()))?;
    let cname = CString::new(name).map_err(|e| GpuError::Nvrtc(e.to_string()))?;
    let prog = result::create_program(&csrc, Some(&cname))
        .map_err(|e| GpuError::Nvrtc(format!("nvrtcCreateProgram: {e:?}")))?;
    let mut options: Vec<String> = NUMERICS_OPTIONS.iter().map(|s| s.to_string()).collect();
    // Development switch: `CVA_NVRTC_FMAD=DivideConquer,HouseholderPcr` compiles the
    // modules whose label contains one of the listed names with FMA contraction.
    if let Ok(list) = std::env::var("CVA_NVRTC_FMAD") {
        if list.split(',').any(|k| !k.is_empty() && name.contains(k)) {
            for o in options.iter_mut().filter(|o| *o == "--fmad=false") {
                *o = "--fmad=true".into();
            }
        }
    }
    options.push(format!("--gpu-architecture={arch}"));
    // Development switch: `CVA_NVRTC_LINEINFO=1` adds line information for profilers.
    if std::env::var_os("CVA_NVRTC_LINEINFO").is_some() {
        options.push("--generate-line-info".into());
    }
    options.push("--std=c++17".into());
    // SAFETY: `prog` was created above and is destroyed exactly once below; the
    // options are valid C strings (no interior NUL).
    let compiled = unsafe { result::compile_program(prog, &options) };
    // SAFETY: `prog` is a live program handle.
    let log = unsafe { result::get_program_log(prog) }
        .map(|raw| {
            let bytes: Vec<u8> = raw
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    // Development switch: `CVA_DUMP_CUBIN=<dir>` writes every compiled module there.
    let dump = std::env::var_os("CVA_DUMP_CUBIN");
    let cubin = match compiled {
        Err(_) => Err(GpuError::Compile {
            kernel: name.to_string(),
            log,
        }),
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; `size` is a valid out pointer.
            let r = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
            if r != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                Err(GpuError::Nvrtc(format!("nvrtcGetCUBINSize: {r:?}")))
            } else {
                let mut buf = vec![0u8; size];
                // SAFETY: `buf` has exactly the `size` bytes NVRTC asked for.
                let r = unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char) };
                if r == sys::nvrtcResult::NVRTC_SUCCESS {
                    if let Some(dir) = &dump {
                        let file: String = name
                            .chars()
                            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                            .collect();
                        let path = std::path::Path::new(dir).join(file);
                        let _ = std::fs::write(path.with_extension("cubin"), &buf);
                        let _ = std::fs::write(path.with_extension("cu"), src);
                    }
                    Ok(buf)
                } else {
                    Err(GpuError::Nvrtc(format!("nvrtcGetCUBIN: {r:?}")))
                }
            }
        }
    };
    // SAFETY: destroys the program created above, once.
    let _ = unsafe { result::destroy_program(prog) };
    cubin
}

/// Compiled modules of one device, each compiled at most once.
#[derive(Debug)]
pub struct ModuleCache {
    ctx: Arc<CudaContext>,
    arch: String,
    modules: Mutex<HashMap<KernelKey, Arc<CompiledKernel>>>,
}

impl ModuleCache {
    /// A cache for `ctx`, compiling for `sm_{major}{minor}`.
    pub fn new(ctx: Arc<CudaContext>, compute_capability: (i32, i32)) -> Self {
        Self {
            ctx,
            arch: format!("sm_{}{}", compute_capability.0, compute_capability.1),
            modules: Mutex::new(HashMap::new()),
        }
    }

    /// The NVRTC target, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Number of modules compiled and loaded so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no module has been compiled yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The module for `key`, compiled and loaded on first use.
    ///
    /// # Errors
    /// Compilation or module-loading errors.
    pub fn get(&self, key: KernelKey) -> Result<Arc<CompiledKernel>, GpuError> {
        if let Some(k) = self.lock().get(&key) {
            return Ok(k.clone());
        }
        let cubin = compile_cubin(&key.source(), &key.label(), &self.arch)?;
        self.load(key, cubin)
    }

    /// Compiles all `keys` not yet cached, in parallel (NVRTC is thread-safe for
    /// distinct programs), then loads them.
    ///
    /// # Errors
    /// The first compilation or loading error.
    pub fn precompile(&self, keys: &[KernelKey]) -> Result<(), GpuError> {
        let missing: Vec<KernelKey> = {
            let map = self.lock();
            let mut v: Vec<KernelKey> = keys
                .iter()
                .copied()
                .filter(|k| !map.contains_key(k))
                .collect();
            v.sort_by_key(|k| std::cmp::Reverse(k.n));
            v.dedup();
            v
        };
        let cubins: Vec<Result<(KernelKey, Vec<u8>), GpuError>> = missing
            .par_iter()
            .map(|k| compile_cubin(&k.source(), &k.label(), &self.arch).map(|c| (*k, c)))
            .collect();
        for c in cubins {
            let (k, cubin) = c?;
            self.load(k, cubin)?;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KernelKey, Arc<CompiledKernel>>> {
        self.modules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn load(&self, key: KernelKey, cubin: Vec<u8>) -> Result<Arc<CompiledKernel>, GpuError> {
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        let suffix = key.precision();
        let mut functions = Vec::new();
        for entry in key.family.entries() {
            let f = module.load_function(&format!("{entry}_{suffix}"))?;
            functions.push((entry.to_string(), f));
        }
        let first = &functions[0].1;
        let compiled = Arc::new(CompiledKernel {
            key,
            registers: first.num_regs()?,
            local_bytes: first.local_size_bytes()?,
            static_shared_bytes: first.shared_size_bytes()?,
            functions,
        });
        self.lock().insert(key, compiled.clone());
        Ok(compiled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_have_their_defines() {
        let k = KernelKey {
            family: KernelFamily::LdltGroup,
            f64: true,
            n: 30,
            nstar: 8,
            sys_stride: 1000,
        };
        let s = k.source();
        assert!(s.starts_with("#define REAL_F64 1\n#define N 30\n#define NSTAR 8\n"));
        assert!(s.contains("ldlt_group"));
        let u = KernelKey {
            family: KernelFamily::Util,
            f64: false,
            n: 0,
            nstar: 0,
            sys_stride: 0,
        };
        assert!(!u.source().contains("#define N "));
    }

    /// Compiles every family once (needs libnvrtc, no GPU: ignored on CI); catches CUDA
    /// syntax errors without a GPU.
    #[test]
    #[ignore = "needs NVRTC (libnvrtc)"]
    fn kernels_compile() {
        crate::cuda::assert_nvrtc_present();
        for (family, n, nstar) in [
            (KernelFamily::LdltGroup, 7, 4),
            (KernelFamily::LdltGroup, 33, 64),
            (KernelFamily::LdltSimd, 5, 0),
            (KernelFamily::HouseholderPcr, 9, 8),
            (KernelFamily::HouseholderTridiag, 9, 8),
            (KernelFamily::HouseholderTridiag, 48, 64),
            (KernelFamily::Util, 0, 0),
            (KernelFamily::DivideConquer, 1, 0),
            (KernelFamily::DivideConquer, 30, 0),
            (KernelFamily::DivideConquer, 64, 0),
        ] {
            for f64 in [false, true] {
                let k = KernelKey {
                    family,
                    f64,
                    n,
                    nstar,
                    sys_stride: 4096,
                };
                if let Err(e) = compile_cubin(&k.source(), &k.label(), "sm_90") {
                    panic!("{e}");
                }
            }
        }
        // The rolled Householder kernels (f64, n* = 16, 30 <= n <= 32, L = 2; the split update
        // at n = 30 and 31, v in the shared A at n = 32) with the strides the solver gives them.
        for n in [30usize, 31, 32] {
            let spw = crate::cuda::tuning::systems_per_warp(16);
            let elems = crate::cuda::tuning::householder_elems(n, true);
            for family in [
                KernelFamily::HouseholderPcr,
                KernelFamily::HouseholderTridiag,
            ] {
                let k = KernelKey {
                    family,
                    f64: true,
                    n: n as u32,
                    nstar: 16,
                    sys_stride: crate::cuda::tuning::padded_stride(elems, 8, spw) as u32,
                };
                if let Err(e) = compile_cubin(&k.source(), &k.label(), "sm_90") {
                    panic!("{e}");
                }
            }
        }
    }
}
