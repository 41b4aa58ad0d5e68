//! The fused Longstaff–Schwartz walk (`cuda/walk.cu`): one block of two warps per outer
//! path runs all the regression steps of one American position at one exposure date —
//! the build of `[Ψ y]^T [Ψ y]` on the FP64 tensor cores from the date's states held in
//! shared memory, the solve, and the exercise update — with the cash flows kept on chip
//! between the steps. It replaces, for the shapes it serves ([`WalkShape::check`]), the
//! engine's pipeline of one build, one batched solve and one exercise launch per step.
//!
//! The solve is level 0 of [`Strategy::Escalating`](crate::Strategy::Escalating) in
//! another form: `L D L^T` with its pivots taken two at a time as a Gauss–Jordan
//! elimination with `2 x 2` pivot blocks ([`crate::gj2`] is its CPU mirror, bit for bit),
//! with level 0's acceptance test in product form (positive pivots, the pivot ratio, the
//! relative residual and the solution growth of [`crate::batch::residual_check`], with the
//! divisions multiplied out: [`crate::gj2::gj2_solve_checked`]), and one step of iterative
//! refinement where the test fails with positive pivots. An outer path with a
//! system that fails it is flagged and left untouched, for the caller to run its steps
//! through the escalating pipeline.

use super::module::{compile_cubin, prelude_source, source_file};
use super::solver::GpuReport;
use super::GpuError;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

const RCP_CU: &str = include_str!("../../cuda/rcp.cu");
const WALK_CU: &str = include_str!("../../cuda/walk.cu");

/// The largest basis size the walk serves (one lane per row of the augmented matrix).
pub const WALK_MAX_N: usize = 30;
/// The inner-path counts the walk serves: `WALK_MIN_M <= m <= WALK_MAX_M` (at most 10
/// chunks of 32 paths; at least two, one per warp).
pub const WALK_MIN_M: usize = 33;
pub const WALK_MAX_M: usize = 320;

/// The most regression steps of one walk: the kernel holds `discount[0 .. steps + 2)` in
/// shared memory (`WALK_DISC` = 64 doubles).
pub const WALK_MAX_STEPS: usize = 62;

/// The shape the walk module is compiled for.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkShape {
    /// Assets per state row (the market's `d`).
    pub d: usize,
    /// Inner paths per outer path.
    pub m: usize,
    /// Basis size `n` (the constant and `n - 1` linear functions).
    pub n: usize,
    /// Only in-the-money paths (payoff > 0) enter the regression.
    pub itm_only: bool,
    /// For basis function `k = 1..n`: the market asset it reads (`assets[k - 1]`) and its
    /// `1 / S_0` (`inv_spot[k - 1]`).
    pub assets: Vec<usize>,
    pub inv_spot: Vec<f64>,
}

impl WalkShape {
    /// Why the walk cannot serve this shape, or `Ok`: a linear basis (`assets.len() ==
    /// n - 1`), `n` even and `2 <= n <= 30`, `33 <= m <= 320`, assets in range, and
    /// state blocks that the bulk copies can move in 16-byte pieces (`m d` a multiple of
    /// 4, the last chunk's `(m mod 32) d` a multiple of 4 and `m mod 32` even).
    pub fn check(&self) -> Result<(), String> {
        let (d, m, n) = (self.d, self.m, self.n);
        if n % 2 != 0 || !(2..=WALK_MAX_N).contains(&n) {
            return Err(format!(
                "basis size {n} (the walk takes an even n <= {WALK_MAX_N})"
            ));
        }
        if !(WALK_MIN_M..=WALK_MAX_M).contains(&m) {
            return Err(format!(
                "{m} inner paths (the walk takes {WALK_MIN_M}..={WALK_MAX_M})"
            ));
        }
        if self.assets.len() != n - 1 || self.inv_spot.len() != n - 1 {
            return Err("not a linear basis".into());
        }
        if d == 0 || self.assets.iter().any(|&a| a >= d) {
            return Err("basis asset out of range".into());
        }
        if self.inv_spot.iter().any(|v| !v.is_finite()) {
            return Err("non-finite 1 / S_0".into());
        }
        let tail = m % 32;
        if (m * d) % 4 != 0 || (tail * d) % 4 != 0 || tail % 2 != 0 {
            return Err(format!(
                "m = {m}, d = {d}: state chunks not in 16-byte pieces"
            ));
        }
        Ok(())
    }

    /// Shared memory per block (bytes): `cuda/walk.cu`'s `WALK_SMEM_BYTES`.
    pub fn shared_bytes(&self) -> usize {
        let (d, m) = (self.d, self.m);
        let nch = m.div_ceil(32);
        let npk = 31 * 32 / 2;
        (m * d).div_ceil(4) * 4 * 4
            + m * 16
            + npk * 8
            + 32 * 8
            + 338 * 8
            + 16
            + nch * 8
            + 64 * 8
            + self.n / 2 * 64 * 8
    }

    /// The module's source: the shape's defines, `prelude.cu`, `rcp.cu`, `walk.cu`.
    pub fn source(&self) -> String {
        let mut s = format!(
            "#define WALK_D {}\n#define WALK_M {}\n#define WALK_N {}\n#define WALK_ITM {}\n",
            self.d,
            self.m,
            self.n,
            u8::from(self.itm_only)
        );
        if self.assets.iter().enumerate().all(|(k, &a)| a == k) {
            s += "#define WALK_IDENTITY 1\n";
        } else {
            s += "__device__ __forceinline__ int walk_asset(int k) {\n    switch (k) {\n";
            for (k, a) in self.assets.iter().enumerate() {
                s += &format!("        case {}: return {a};\n", k + 1);
            }
            s += "        default: return 0;\n    }\n}\n";
        }
        if self.inv_spot.iter().all(|&v| v == 1.0) {
            s += "#define WALK_UNIT_INV 1\n";
        } else {
            s += "__device__ __forceinline__ double walk_inv(int k) {\n    switch (k) {\n";
            for (k, v) in self.inv_spot.iter().enumerate() {
                s += &format!(
                    "        case {}: return __longlong_as_double({:#x}LL);\n",
                    k + 1,
                    v.to_bits()
                );
            }
            s += "        default: return 1.0;\n    }\n}\n";
        }
        s + &prelude_source() + &source_file("rcp.cu", RCP_CU) + &source_file("walk.cu", WALK_CU)
    }
}

/// The walk module compiled for one [`WalkShape`].
#[derive(Debug)]
pub struct GpuWalk {
    stream: Arc<CudaStream>,
    shape: WalkShape,
    walk: CudaFunction,
    solve_batch: CudaFunction,
    shared: u32,
}

/// The per-step outputs of [`GpuWalk::walk`] besides the cash flows.
pub struct WalkOutputs<'a, 'b> {
    /// Written for every `l < c`: `walked[l]` 1 where outer path `l` is alive and every
    /// system passed the acceptance test, `fallback[l]` 1 where it is alive and one failed
    /// (its cash flows were not written), else 0.
    pub walked: &'a mut CudaViewMut<'b, u8>,
    pub fallback: &'a mut CudaViewMut<'b, u8>,
    /// `flagged[0] +=` the outer paths with `fallback[l] == 1` (zeroed by the caller).
    pub flagged: &'a mut CudaViewMut<'b, u32>,
    /// `counts[s * c + l]`: the entering paths of step `s` (exercise date `date0 + s`).
    pub counts: &'a mut CudaViewMut<'b, u32>,
    /// `reports[s * c + l]`: residual, method 0 (`L D L^T`), status 0 (Ok) or 2 (not
    /// accepted), where `counts >= n`; not written otherwise.
    pub reports: &'a mut CudaViewMut<'b, GpuReport>,
}

impl GpuWalk {
    /// Compiles the walk for `shape` (which must pass [`WalkShape::check`]).
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for a shape the walk does not serve or more shared memory
    /// than the device gives a block; compile and driver errors.
    pub fn new(stream: &Arc<CudaStream>, shape: &WalkShape) -> Result<Self, GpuError> {
        shape.check().map_err(GpuError::Invalid)?;
        let ctx = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        if major < 9 {
            return Err(GpuError::Invalid(format!(
                "the walk needs sm_90 (mma.m16n8k8.f64, bulk copies); device is sm_{major}{minor}"
            )));
        }
        let cubin = compile_cubin(&shape.source(), "walk.cu", &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        let walk = module.load_function("walk_american")?;
        let solve_batch = module.load_function("walk_solve_batch")?;
        let shared = shape.shared_bytes();
        let optin = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as usize;
        if shared > optin {
            return Err(GpuError::Invalid(format!(
                "the walk needs {shared} bytes of shared memory per block, the device gives {optin}"
            )));
        }
        walk.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared as i32,
        )?;
        Ok(Self {
            stream: stream.clone(),
            shape: shape.clone(),
            walk,
            solve_batch,
            shared: shared as u32,
        })
    }

    pub fn shape(&self) -> &WalkShape {
        &self.shape
    }

    /// Runs the walk of every outer path `l < c` over `steps` regression steps at exercise
    /// dates `date0 + s` (`s = steps - 1` down to 0).
    ///
    /// `states`: outer path `l`'s state blocks at `states[l * stride ..]`, block `s` (date
    /// `date0 + s`) the `m x d` doubles at `s * m * d` in the payoff-plane layout (the
    /// high words, then the payoffs). `discount[k] = e^{-r k dt}`, `k < steps + 2` (the
    /// cash flows must be paid at dates up to `date0 + steps`); `steps <=`
    /// [`WALK_MAX_STEPS`]. `cash`, `cash_date` (`c x m`): the cash flows at maturity (or as the
    /// previous steps left them) and their absolute date indices, overwritten with the
    /// walk's where the outer path is alive and not flagged; `y` (`c x m`): the first
    /// step's discounted cash flows (read only). `tol`, `threshold`: the escalating
    /// strategy's residual tolerance and escalation condition.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short or the states' alignment does not
    /// allow the bulk copies; driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn walk(
        &self,
        (states, stride, c): (&CudaView<f64>, usize, usize),
        (steps, date0): (usize, u32),
        discount: &CudaView<f64>,
        alive: &CudaView<u8>,
        (cash, cash_date, y): (&mut CudaViewMut<f64>, &mut CudaViewMut<u32>, &CudaView<f64>),
        (tol, threshold): (f64, f64),
        out: WalkOutputs,
    ) -> Result<(), GpuError> {
        let (d, m) = (self.shape.d, self.shape.m);
        if c == 0 || steps == 0 {
            return Ok(());
        }
        let need_states = (c - 1) * stride + steps * m * d;
        if states.len() < need_states
            || stride < steps * m * d
            || alive.len() < c
            || cash.len() < c * m
            || cash_date.len() < c * m
            || y.len() < c * m
            || out.walked.len() < c
            || out.fallback.len() < c
            || out.flagged.is_empty()
            || out.counts.len() < steps * c
            || out.reports.len() < steps * c
            || discount.len() < steps + 2
        {
            return Err(GpuError::Invalid("walk: buffer too short".into()));
        }
        if steps > WALK_MAX_STEPS {
            return Err(GpuError::Invalid(format!(
                "walk: {steps} steps (at most {WALK_MAX_STEPS}: the discount factors in shared memory)"
            )));
        }
        if stride % 2 != 0 || (m * d) % 2 != 0 {
            return Err(GpuError::Invalid(
                "walk: state blocks not 16-byte aligned".into(),
            ));
        }
        let (stride64, c64, steps32, tol_arg, thr_arg) =
            (stride as i64, c as i64, steps as i32, tol, threshold);
        let mut l = self.stream.launch_builder(&self.walk);
        l.arg(states)
            .arg(&stride64)
            .arg(&c64)
            .arg(&steps32)
            .arg(&date0)
            .arg(discount)
            .arg(alive)
            .arg(cash)
            .arg(cash_date)
            .arg(y)
            .arg(out.walked)
            .arg(out.fallback)
            .arg(out.flagged)
            .arg(out.counts)
            .arg(out.reports)
            .arg(&tol_arg)
            .arg(&thr_arg);
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(c).map_err(|_| GpuError::Invalid("walk: c".into()))?,
                1,
                1,
            ),
            block_dim: (64, 1, 1),
            shared_mem_bytes: self.shared,
        };
        // SAFETY: the arguments match `walk_american` (const double*, long long, long long,
        // int, unsigned, const double*, const unsigned char*, double*, unsigned*, const
        // double*, unsigned char*, unsigned char*, unsigned*, unsigned*, WalkReport*,
        // double, double); the buffers
        // hold what the kernel reads and writes for c outer paths and `steps` steps
        // (checked); the state blocks start on 16-byte boundaries (device allocations are
        // 256-byte aligned, stride and m d even); one block of 64 threads per outer path,
        // with the shared memory the kernel lays out (WALK_SMEM_BYTES, set as the
        // function's maximum in `new`).
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The walk's solver on a batch of systems (test entry): `a` (`batch x n x n`
    /// column-major, the lower triangle read), `b` (`batch x n`); writes `x` (`batch x
    /// n`) and `out[4 s]` = 1 if system `s` is accepted else 0, `out[4 s + 1]` its
    /// relative residual.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short; driver errors.
    pub fn solve_batch(
        &self,
        a: &CudaSlice<f64>,
        b: &CudaSlice<f64>,
        (tol, threshold): (f64, f64),
        x: &mut CudaSlice<f64>,
        out: &mut CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = self.shape.n;
        let batch = b.len() / n;
        if a.len() < batch * n * n || x.len() < batch * n || out.len() < 4 * batch {
            return Err(GpuError::Invalid("walk solve: buffer too short".into()));
        }
        if batch == 0 {
            return Ok(());
        }
        let batch64 = batch as i64;
        let mut l = self.stream.launch_builder(&self.solve_batch);
        l.arg(a)
            .arg(b)
            .arg(&batch64)
            .arg(&tol)
            .arg(&threshold)
            .arg(x)
            .arg(out);
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(batch).map_err(|_| GpuError::Invalid("walk solve: batch".into()))?,
                1,
                1,
            ),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match `walk_solve_batch` (const double*, const double*,
        // long long, double, double, double*, double*); a, b, x and out hold batch
        // systems (checked); one warp per system with static shared memory.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basket29() -> WalkShape {
        WalkShape {
            d: 29,
            m: 300,
            n: 30,
            itm_only: true,
            assets: (0..29).collect(),
            inv_spot: vec![1.0; 29],
        }
    }

    type Change = fn(&mut WalkShape);

    #[test]
    fn the_walk_serves_basket29_and_names_what_it_does_not_serve() {
        assert_eq!(basket29().check(), Ok(()));
        let cases: [(&str, Change); 7] = [
            ("basis size 31", |s| {
                s.n = 31;
                s.assets.push(0);
                s.inv_spot.push(1.0);
            }),
            ("basis size 32", |s| {
                s.n = 32;
                s.assets.extend([0, 1]);
                s.inv_spot.extend([1.0, 1.0]);
            }),
            ("32 inner paths", |s| s.m = 32),
            ("321 inner paths", |s| s.m = 321),
            ("not a linear basis", |s| {
                s.assets.pop().map(|_| ()).unwrap_or(())
            }),
            ("basis asset out of range", |s| s.assets[3] = 29),
            ("16-byte pieces", |s| s.m = 301),
        ];
        for (want, change) in cases {
            let mut s = basket29();
            change(&mut s);
            let err = s.check().expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
        let mut s = basket29();
        s.inv_spot[0] = f64::NAN;
        assert!(s.check().unwrap_err().contains("1 / S_0"));
    }

    #[test]
    fn the_source_compiles_in_the_shape_and_its_tables() {
        let src = basket29().source();
        assert!(src.starts_with("#define WALK_D 29\n#define WALK_M 300\n#define WALK_N 30\n"));
        assert!(src.contains("#define WALK_IDENTITY 1") && src.contains("#define WALK_UNIT_INV 1"));
        let mut s = basket29();
        s.assets.swap(0, 1);
        s.inv_spot[2] = 0.5;
        let src = s.source();
        assert!(!src.contains("#define WALK_IDENTITY") && !src.contains("#define WALK_UNIT_INV"));
        assert!(src.contains("case 1: return 1;") && src.contains("case 2: return 0;"));
        assert!(src.contains(&format!(
            "case 3: return __longlong_as_double({:#x}LL);",
            0.5f64.to_bits()
        )));
        // Shared memory: 34,800 bytes of high words, 2 x 2,400 of payoffs and y, the Gram,
        // beta, the solver's scratch (SCOL = 338 doubles), the counts, 10 mbarriers, 64
        // discount factors and walk_gj's numerators (15 pairs x 64 doubles): 54,816, as
        // walk_bench prints for WALK_SMEM_BYTES.
        assert_eq!(
            basket29().shared_bytes(),
            34_800 + 4_800 + 3_968 + 256 + 2_704 + 16 + 80 + 512 + 7_680
        );
    }
}
