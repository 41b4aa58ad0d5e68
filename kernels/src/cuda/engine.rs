//! Small kernels of the nested Monte Carlo engine on the GPU (`cuda/engine.cu`): cash
//! flows of inner paths, discounted cash flows, the Longstaff–Schwartz exercise update,
//! per-outer-path means and the gather of the systems to solve. With [`super::paths`],
//! [`super::regression`] and [`super::solver`] they make the application's GPU engine.
//!
//! Arithmetic follows the CPU engine operation by operation (`--fmad=false`, sums in
//! inner-path order from zero), so results differ from the CPU's only through CUDA's
//! transcendental functions in the paths and, where a solver takes another branch,
//! through the solves.
//!
//! Inner states are read as a view at one date with element `(l, mm, i)` at
//! `states[l * stride + mm * d + i]`; cash flows `(l, mm)` at `cash[l * m + mm]`.

use super::module::compile_cubin;
use super::regression::{BasisTables, GpuOptionKind, GpuPayoff, GpuUnderlying};
use super::solver::GpuReal;
use super::GpuError;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The CUDA driver API of `cudarc` used by these launchers (device buffers, views,
/// streams, errors), re-exported for callers that own the buffers.
pub use cudarc::driver;

const ENGINE_CU: &str = include_str!("../../cuda/engine.cu");

/// Threads per block of every engine kernel.
const BLOCK: u32 = 256;

/// The full CUDA source of the engine module (no defines).
pub fn engine_source() -> String {
    ENGINE_CU.to_string()
}

fn grid(threads: usize) -> Result<LaunchConfig, GpuError> {
    let blocks = threads.div_ceil(BLOCK as usize);
    if blocks > i32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "{threads} threads in one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (blocks.max(1) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A payoff on the device: kind code, call/put, strike and the (asset, weight) table.
#[derive(Debug)]
pub struct DevicePayoff {
    kind: i32,
    put: i32,
    strike: f64,
    assets: CudaSlice<i32>,
    weights: CudaSlice<f64>,
    len: i32,
    /// One past the largest asset index read.
    max_asset: usize,
}

impl DevicePayoff {
    /// Uploads `payoff`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for an empty underlying, driver errors.
    pub fn new(stream: &Arc<CudaStream>, payoff: &GpuPayoff) -> Result<Self, GpuError> {
        let (kind, assets, weights): (i32, Vec<i32>, Vec<f64>) = match &payoff.underlying {
            GpuUnderlying::Asset(i) => (0, vec![*i as i32], vec![1.0]),
            GpuUnderlying::Basket(w) => (
                1,
                w.iter().map(|&(i, _)| i as i32).collect(),
                w.iter().map(|&(_, x)| x).collect(),
            ),
            GpuUnderlying::Max(v) => (2, v.iter().map(|&i| i as i32).collect(), vec![0.0; v.len()]),
        };
        if assets.is_empty() {
            return Err(GpuError::Invalid("payoff on no asset".into()));
        }
        let max_asset = assets.iter().map(|&a| a as usize).max().unwrap_or(0) + 1;
        Ok(Self {
            kind,
            put: i32::from(payoff.kind == GpuOptionKind::Put),
            strike: payoff.strike,
            len: assets.len() as i32,
            assets: stream.clone_htod(&assets)?,
            weights: stream.clone_htod(&weights)?,
            max_asset,
        })
    }
}

/// A regression basis on the device, as the exercise kernel reads it: for basis function
/// `k >= 1`, its parent and the market asset and `1 / S_0` of its new variable.
#[derive(Debug)]
pub struct DeviceBasis {
    n: usize,
    parent: CudaSlice<i32>,
    var_asset: CudaSlice<i32>,
    var_inv: CudaSlice<f64>,
    max_asset: usize,
}

impl DeviceBasis {
    /// Uploads `basis`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] for a basis outside `1..=64` functions, driver errors.
    pub fn new(stream: &Arc<CudaStream>, basis: &BasisTables) -> Result<Self, GpuError> {
        let n = basis.len();
        if n == 0 || n > crate::MAX_N {
            return Err(GpuError::Invalid(format!(
                "basis size {n} outside 1..={}",
                crate::MAX_N
            )));
        }
        let parent: Vec<i32> = basis.parent.iter().map(|&p| p as i32).collect();
        let var_asset: Vec<i32> = basis.var.iter().map(|&v| basis.assets[v] as i32).collect();
        let var_inv: Vec<f64> = basis.var.iter().map(|&v| basis.inv_spot[v]).collect();
        Ok(Self {
            n,
            parent: stream.clone_htod(&parent)?,
            var_asset: stream.clone_htod(&var_asset)?,
            var_inv: stream.clone_htod(&var_inv)?,
            max_asset: basis.assets.iter().max().map_or(0, |&a| a + 1),
        })
    }

    /// Number of basis functions `n`.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// Inner states of `c` outer paths at one date: `(l, mm, i)` at `l * stride + mm * d + i`.
#[derive(Debug, Clone, Copy)]
pub struct StateView<'a, 'b> {
    pub states: &'a CudaView<'b, f64>,
    pub stride: usize,
    /// Outer paths.
    pub c: usize,
    /// Inner paths per outer path.
    pub m: usize,
    /// Assets per state.
    pub d: usize,
}

impl StateView<'_, '_> {
    fn check(&self, payoff_assets: usize) -> Result<(), GpuError> {
        if self.c == 0 || self.m == 0 {
            return Ok(());
        }
        let need = (self.c - 1) * self.stride + self.m * self.d;
        if self.states.len() < need || payoff_assets > self.d {
            return Err(GpuError::Invalid(format!(
                "inner states: {} elements (need {need}), assets {} (need {payoff_assets})",
                self.states.len(),
                self.d
            )));
        }
        if self.m > i32::MAX as usize || self.d > i32::MAX as usize {
            return Err(GpuError::Invalid("too many inner paths or assets".into()));
        }
        Ok(())
    }
}

/// The compiled engine module on one stream.
#[derive(Debug)]
pub struct EngineKernels {
    stream: Arc<CudaStream>,
    cash_init: CudaFunction,
    payoff_sums: CudaFunction,
    discounted_cash: CudaFunction,
    discounted_means: CudaFunction,
    fallback_means: CudaFunction,
    exercise_f64: CudaFunction,
    exercise_f32: CudaFunction,
    gather_f64: CudaFunction,
    gather_f32: CudaFunction,
}

impl EngineKernels {
    /// Compiles `cuda/engine.cu` for the stream's device.
    ///
    /// # Errors
    /// Compile and driver errors.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, GpuError> {
        let ctx = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        let cubin = compile_cubin(&engine_source(), "engine.cu", &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
        Ok(Self {
            stream: stream.clone(),
            cash_init: module.load_function("engine_cash_init")?,
            payoff_sums: module.load_function("engine_payoff_sums")?,
            discounted_cash: module.load_function("engine_discounted_cash")?,
            discounted_means: module.load_function("engine_discounted_means")?,
            fallback_means: module.load_function("engine_fallback_means")?,
            exercise_f64: module.load_function("engine_exercise_f64")?,
            exercise_f32: module.load_function("engine_exercise_f32")?,
            gather_f64: module.load_function("engine_gather_f64")?,
            gather_f32: module.load_function("engine_gather_f32")?,
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// `cash[l * m + mm] = payoff(state(l, mm))`, `cash_date = date`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn cash_init(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        date: u32,
        cash: &mut CudaViewMut<f64>,
        cash_date: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset)?;
        let total = view.c * view.m;
        if cash.len() < total || cash_date.len() < total {
            return Err(GpuError::Invalid("cash flow buffers too short".into()));
        }
        if total == 0 {
            return Ok(());
        }
        let (stride, c, m, d) = (
            view.stride as i64,
            view.c as i64,
            view.m as i32,
            view.d as i32,
        );
        let mut l = self.stream.launch_builder(&self.cash_init);
        l.arg(view.states)
            .arg(&stride)
            .arg(&c)
            .arg(&m)
            .arg(&d)
            .arg(&payoff.kind)
            .arg(&payoff.put)
            .arg(&payoff.strike)
            .arg(&payoff.assets)
            .arg(&payoff.weights)
            .arg(&payoff.len)
            .arg(&date)
            .arg(cash)
            .arg(cash_date);
        // SAFETY: the arguments match `engine_cash_init` in engine.cu (const double*,
        // long long, long long, int, int, int, int, double, const int*, const double*,
        // int, unsigned, double*, unsigned*). The states hold (c-1)*stride + m*d
        // elements and every payoff asset index is < d (checked by `view.check`); the
        // payoff tables hold `len` entries; cash and cash_date hold c*m (checked); threads
        // >= c*m return first.
        unsafe { l.launch(grid(total)?) }?;
        Ok(())
    }

    /// `out[l]` = the sum over inner paths, in order, of `payoff(state(l, mm))`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn payoff_sums(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        out: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset)?;
        if out.len() < view.c {
            return Err(GpuError::Invalid("payoff sums buffer too short".into()));
        }
        if view.c == 0 {
            return Ok(());
        }
        let (stride, c, m, d) = (
            view.stride as i64,
            view.c as i64,
            view.m as i32,
            view.d as i32,
        );
        let mut l = self.stream.launch_builder(&self.payoff_sums);
        l.arg(view.states)
            .arg(&stride)
            .arg(&c)
            .arg(&m)
            .arg(&d)
            .arg(&payoff.kind)
            .arg(&payoff.put)
            .arg(&payoff.strike)
            .arg(&payoff.assets)
            .arg(&payoff.weights)
            .arg(&payoff.len)
            .arg(out);
        // SAFETY: the arguments match `engine_payoff_sums` (const double*, long long,
        // long long, int, int, int, int, double, const int*, const double*, int,
        // double*); states and payoff tables as checked by `view.check`, out holds c
        // doubles; threads >= c return first.
        unsafe { l.launch(grid(view.c)?) }?;
        Ok(())
    }

    /// `y[t] = cash[t] * discount[cash_date[t] - date]` for `t < y.len()`. Every cash
    /// date must be in `date..date + discount.len()`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn discounted_cash(
        &self,
        cash: &CudaView<f64>,
        cash_date: &CudaView<u32>,
        discount: &CudaView<f64>,
        date: u32,
        y: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        let total = y.len();
        if cash.len() < total || cash_date.len() < total {
            return Err(GpuError::Invalid("cash flow buffers too short".into()));
        }
        if total == 0 {
            return Ok(());
        }
        let total_arg = total as i64;
        let mut l = self.stream.launch_builder(&self.discounted_cash);
        l.arg(cash)
            .arg(cash_date)
            .arg(discount)
            .arg(&date)
            .arg(&total_arg)
            .arg(y);
        // SAFETY: the arguments match `engine_discounted_cash` (const double*, const
        // unsigned*, const double*, unsigned, long long, double*); cash, cash_date and
        // y hold `total` elements (checked); the cash dates were written by this
        // engine in date..=maturity and `discount` covers every offset from `date` up to
        // the last date of the grid (the caller's contract); threads >= total return.
        unsafe { l.launch(grid(total)?) }?;
        Ok(())
    }

    /// `out[l] = (Σ_mm cash * discount[cash_date - date]) / m`, in path order.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    pub fn discounted_means(
        &self,
        cash: &CudaView<f64>,
        cash_date: &CudaView<u32>,
        discount: &CudaView<f64>,
        date: u32,
        m: usize,
        out: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        let c = out.len();
        if cash.len() < c * m || cash_date.len() < c * m || m > i32::MAX as usize {
            return Err(GpuError::Invalid("cash flow buffers too short".into()));
        }
        if c == 0 || m == 0 {
            return Ok(());
        }
        let (c_arg, m_arg) = (c as i64, m as i32);
        let mut l = self.stream.launch_builder(&self.discounted_means);
        l.arg(cash)
            .arg(cash_date)
            .arg(discount)
            .arg(&date)
            .arg(&c_arg)
            .arg(&m_arg)
            .arg(out);
        // SAFETY: the arguments match `engine_discounted_means` (const double*, const
        // unsigned*, const double*, unsigned, long long, int, double*); cash and
        // cash_date hold c*m elements, out c (checked); discount covers the offsets of
        // the cash dates from `date` (the caller's contract); threads >= c return.
        unsafe { l.launch(grid(c)?) }?;
        Ok(())
    }

    /// The fallback continuation (mean discounted cash flow of the regression paths)
    /// of the outer paths that are alive, have `counts > 0` and `beta_slot < 0`; other
    /// entries of `mean` are left as they are.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn fallback_means(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        itm_only: bool,
        cash: &CudaView<f64>,
        cash_date: &CudaView<u32>,
        discount: &CudaView<f64>,
        date: u32,
        alive: &CudaView<u8>,
        counts: &CudaView<u32>,
        beta_slot: &CudaView<i32>,
        mean: &mut CudaViewMut<f64>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset)?;
        let (c, m) = (view.c, view.m);
        if cash.len() < c * m
            || cash_date.len() < c * m
            || alive.len() < c
            || counts.len() < c
            || beta_slot.len() < c
            || mean.len() < c
        {
            return Err(GpuError::Invalid("fallback means: buffer too short".into()));
        }
        if c == 0 {
            return Ok(());
        }
        let (stride, c_arg, m_arg, d) = (view.stride as i64, c as i64, m as i32, view.d as i32);
        let itm = i32::from(itm_only);
        let mut l = self.stream.launch_builder(&self.fallback_means);
        l.arg(view.states)
            .arg(&stride)
            .arg(&c_arg)
            .arg(&m_arg)
            .arg(&d)
            .arg(&payoff.kind)
            .arg(&payoff.put)
            .arg(&payoff.strike)
            .arg(&payoff.assets)
            .arg(&payoff.weights)
            .arg(&payoff.len)
            .arg(&itm)
            .arg(cash)
            .arg(cash_date)
            .arg(discount)
            .arg(&date)
            .arg(alive)
            .arg(counts)
            .arg(beta_slot)
            .arg(mean);
        // SAFETY: the arguments match `engine_fallback_means` (const double*, long long,
        // long long, int, int, int, int, double, const int*, const double*, int, int,
        // const double*, const unsigned*, const double*, unsigned, const unsigned char*,
        // const unsigned*, const int*, double*); states and payoff as checked by
        // `view.check`, cash and cash_date c*m, the per-path arrays c elements
        // (checked); discount covers the offsets of the cash dates from `date`; threads
        // >= c return first.
        unsafe { l.launch(grid(c)?) }?;
        Ok(())
    }

    /// The exercise update at exercise date `date` (see `engine.cu`): the regression
    /// coefficients of outer path `l` are `x[beta_slot[l] * n ..]` (precision `T`), or
    /// `mean[l]` is the continuation where `beta_slot[l] < 0`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn exercise<T: GpuReal>(
        &self,
        view: StateView,
        payoff: &DevicePayoff,
        basis: &DeviceBasis,
        x: &CudaView<T>,
        beta_slot: &[i32],
        beta_slot_dev: &CudaView<i32>,
        alive: &CudaView<u8>,
        counts: &CudaView<u32>,
        mean: &CudaView<f64>,
        date: u32,
        cash: &mut CudaViewMut<f64>,
        cash_date: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        view.check(payoff.max_asset.max(basis.max_asset))?;
        let (c, m, n) = (view.c, view.m, basis.n);
        let max_slot = beta_slot.iter().copied().max().unwrap_or(-1);
        if beta_slot.len() != c
            || beta_slot_dev.len() < c
            || (max_slot >= 0 && x.len() < (max_slot as usize + 1) * n)
            || alive.len() < c
            || counts.len() < c
            || mean.len() < c
            || cash.len() < c * m
            || cash_date.len() < c * m
        {
            return Err(GpuError::Invalid("exercise: buffer too short".into()));
        }
        if c == 0 || m == 0 {
            return Ok(());
        }
        let (stride, c_arg, m_arg, d, n_arg) = (
            view.stride as i64,
            c as i64,
            m as i32,
            view.d as i32,
            n as i32,
        );
        let f = if T::IS_F64 {
            &self.exercise_f64
        } else {
            &self.exercise_f32
        };
        let mut l = self.stream.launch_builder(f);
        l.arg(view.states)
            .arg(&stride)
            .arg(&c_arg)
            .arg(&m_arg)
            .arg(&d)
            .arg(&payoff.kind)
            .arg(&payoff.put)
            .arg(&payoff.strike)
            .arg(&payoff.assets)
            .arg(&payoff.weights)
            .arg(&payoff.len)
            .arg(&n_arg)
            .arg(&basis.parent)
            .arg(&basis.var_asset)
            .arg(&basis.var_inv)
            .arg(x)
            .arg(beta_slot_dev)
            .arg(alive)
            .arg(counts)
            .arg(mean)
            .arg(&date)
            .arg(cash)
            .arg(cash_date);
        // SAFETY: the arguments match `engine_exercise_{f64,f32}` for `T` (const double*,
        // long long, long long, int, int, int, int, double, const int*, const double*,
        // int, int, const int*, const int*, const double*, const real*, const int*,
        // const unsigned char*, const unsigned*, const double*, unsigned, double*,
        // unsigned*). States, payoff and basis asset indices are checked by
        // `view.check`; the basis tables hold n <= 64 entries (ENGINE_MAX_N, the local
        // array); `beta_slot_dev` holds the host copy `beta_slot` (the caller's
        // contract), whose largest slot has its n coefficients in `x` (checked); the
        // per-path arrays hold c and the cash flows c*m elements (checked); threads
        // >= c*m return first.
        unsafe { l.launch(grid(c * m)?) }?;
        Ok(())
    }

    /// `a_out[s] = a[idx[s]]` (`n x n`), `b_out[s] = b[idx[s]]` (`n`) for `s < idx.len()`.
    ///
    /// # Errors
    /// [`GpuError::Invalid`] if a buffer is too short, driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn gather<T: GpuReal>(
        &self,
        n: usize,
        a: &CudaView<T>,
        b: &CudaView<T>,
        idx: &[u32],
        idx_dev: &CudaView<u32>,
        a_out: &mut CudaViewMut<T>,
        b_out: &mut CudaViewMut<T>,
    ) -> Result<(), GpuError> {
        let batch = idx.len();
        let max = idx.iter().copied().max().map_or(0, |v| v as usize + 1);
        if idx_dev.len() < batch
            || a.len() < max * n * n
            || b.len() < max * n
            || a_out.len() < batch * n * n
            || b_out.len() < batch * n
            || n > i32::MAX as usize
        {
            return Err(GpuError::Invalid("gather: buffer too short".into()));
        }
        if batch == 0 || n == 0 {
            return Ok(());
        }
        let (batch_arg, n_arg) = (batch as i64, n as i32);
        let f = if T::IS_F64 {
            &self.gather_f64
        } else {
            &self.gather_f32
        };
        let mut l = self.stream.launch_builder(f);
        l.arg(a)
            .arg(b)
            .arg(idx_dev)
            .arg(&batch_arg)
            .arg(&n_arg)
            .arg(a_out)
            .arg(b_out);
        // SAFETY: the arguments match `engine_gather_{f64,f32}` for `T` (const real*,
        // const real*, const unsigned*, long long, int, real*, real*); `idx_dev` holds
        // the host copy `idx` (the caller's contract), whose largest index has its
        // system in `a` and `b` (checked); the outputs hold batch systems (checked);
        // threads >= batch*n*n return first.
        unsafe { l.launch(grid(batch * n * n)?) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// Compiles the engine module when libnvrtc is available (not on CI).
    #[test]
    fn engine_kernel_compiles_when_nvrtc_is_present() {
        // SAFETY: only tries to dlopen libnvrtc.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return;
        }
        if let Err(e) = super::compile_cubin(&super::engine_source(), "engine.cu", "sm_90") {
            panic!("{e}");
        }
    }
}
