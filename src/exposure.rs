//! Exposure profile and CVA from the netted values of the outer paths.
//!
//! With `P_k^{(l)}` the netted value on outer path `l` at `t_k`, `D_k = e^{-r t_k}`,
//! `S` the counterparty's survival curve and `R` its recovery rate:
//! `CVA = (1 - R) Σ_{k=0}^{N-1} E[D_{k+1} P_{k+1}^+] (S(t_k) - S(t_{k+1}))`,
//! estimated by the mean over outer paths of
//! `X^{(l)} = (1 - R) Σ_k D_{k+1} (P_{k+1}^{(l)})^+ (S(t_k) - S(t_{k+1}))`, whose sample
//! standard deviation over `sqrt(M_0)` is the standard error.

use crate::scenario::{Scenario, ValueT0};

/// One row of the exposure profile (date `t_k`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExposureRow {
    pub date_index: usize,
    /// `t_k` in years.
    pub time: f64,
    /// Expected exposure `E[P_k]` (currency units).
    pub ee: f64,
    /// Expected positive exposure `E[P_k^+]`.
    pub epe: f64,
    /// Expected negative exposure `E[min(P_k, 0)]` (<= 0).
    pub ene: f64,
    /// Potential future exposure: the `pfe_quantile` quantile of `P_k^+`.
    pub pfe: f64,
    /// `e^{-r t_k}`.
    pub discount_factor: f64,
    /// `E[D_k P_k^+]`.
    pub discounted_epe: f64,
    /// `S(t_{k-1}) - S(t_k)`, the default probability of `(t_{k-1}, t_k]` (0 at `k = 0`).
    pub default_probability: f64,
    /// `(1 - R) E[D_k P_k^+] (S(t_{k-1}) - S(t_k))`; these sum to the CVA.
    pub cva_contribution: f64,
}

/// CVA, its standard error, and the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct CvaEstimate {
    pub cva: f64,
    pub cva_std_error: f64,
    /// 95% confidence interval `cva ± 1.96 SE`.
    pub cva_ci: (f64, f64),
    /// `V_0`, the portfolio value at `t_0` (by `simulation.value_t0`): `e^{-r t_1}` times
    /// the mean of the outer paths' values at `t_1` ([`ValueT0::DiscountedT1`]), or the
    /// mean of their inner estimates at `t_0` ([`ValueT0::Nested`]).
    pub value_t0: f64,
    pub value_t0_std_error: f64,
    pub profile: Vec<ExposureRow>,
}

/// Mean and standard error (sample standard deviation over `sqrt(len)`) in one pass
/// (Welford), in the order given.
pub fn mean_std_error(xs: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let (mut n, mut mean, mut m2) = (0usize, 0.0, 0.0);
    for x in xs {
        n += 1;
        let delta = x - mean;
        mean += delta / n as f64;
        m2 += delta * (x - mean);
    }
    welford_mean_std_error(n, mean, m2)
}

/// Mean and standard error from a Welford state: `n` values, their mean and the sum of
/// squared deviations `m2` (NaN standard error below two values).
pub fn welford_mean_std_error(n: usize, mean: f64, m2: f64) -> (f64, f64) {
    if n < 2 {
        return (mean, f64::NAN);
    }
    (mean, (m2 / (n - 1) as f64 / n as f64).sqrt())
}

/// Where the `q` quantile of `len` sorted values lies: the ranks `(lo, hi)` (0-based) of
/// the two order statistics it interpolates between, and `h = q (len - 1)`.
pub fn quantile_position(len: usize, q: f64) -> (usize, usize, f64) {
    let h = q * (len - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(len - 1);
    (lo, hi, h)
}

/// The quantile between the order statistics `x_lo <= x_hi` at [`quantile_position`]
/// `(lo, _, h)`: `x_lo + (h - lo) (x_hi - x_lo)`.
pub fn interpolate_quantile(x_lo: f64, x_hi: f64, lo: usize, h: f64) -> f64 {
    x_lo + (h - lo as f64) * (x_hi - x_lo)
}

/// The `q` quantile of `xs` (linear interpolation between order statistics).
pub fn quantile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let (lo, hi, h) = quantile_position(xs.len(), q);
    interpolate_quantile(xs[lo], xs[hi], lo, h)
}

/// What the estimate needs of the scenario per date `k = 0..=N`.
#[derive(Debug, Clone, PartialEq)]
pub struct DateFactors {
    /// `t_k` in years.
    pub time: Vec<f64>,
    /// `D_k = e^{-r t_k}`.
    pub discount: Vec<f64>,
    /// `S(t_{k-1}) - S(t_k)` (0 at `k = 0`).
    pub default_probability: Vec<f64>,
    /// `1 - R`.
    pub lgd: f64,
}

impl DateFactors {
    pub fn new(scenario: &Scenario) -> Self {
        let n_dates = scenario.exposure_dates;
        let r = scenario.market.rate;
        let survival: Vec<f64> = (0..=n_dates)
            .map(|k| scenario.counterparty.hazard.survival(scenario.time(k)))
            .collect();
        let time: Vec<f64> = (0..=n_dates).map(|k| scenario.time(k)).collect();
        Self {
            discount: time.iter().map(|&t| (-r * t).exp()).collect(),
            default_probability: (0..=n_dates)
                .map(|k| {
                    if k == 0 {
                        0.0
                    } else {
                        survival[k - 1] - survival[k]
                    }
                })
                .collect(),
            time,
            lgd: 1.0 - scenario.counterparty.recovery_rate,
        }
    }

    /// The profile row of date `k` from its `E[P]`, `E[P^+]`, `E[min(P, 0)]` and PFE.
    pub fn row(&self, k: usize, ee: f64, epe: f64, ene: f64, pfe: f64) -> ExposureRow {
        let df = self.discount[k];
        let default_probability = self.default_probability[k];
        ExposureRow {
            date_index: k,
            time: self.time[k],
            ee,
            epe,
            ene,
            pfe,
            discount_factor: df,
            discounted_epe: df * epe,
            default_probability,
            cva_contribution: self.lgd * df * epe * default_probability,
        }
    }
}

impl CvaEstimate {
    /// Assembles the estimate from the profile's rows `0..=N`, the CVA with its standard
    /// error, and the mean and standard error of the netted values at
    /// [`ValueT0::values_date`]. With [`ValueT0::DiscountedT1`] these are discounted to `t_0`
    /// (`V_0 = e^{-r t_1} E[P_1]`), and the `t_0` row, computed from values that no inner
    /// stage produced, is replaced by the deterministic exposure `V_0` (EE `V_0`, EPE and
    /// PFE `V_0^+`, ENE `min(V_0, 0)`; its CVA contribution is 0).
    pub fn assemble(
        scenario: &Scenario,
        f: &DateFactors,
        mut profile: Vec<ExposureRow>,
        cva: (f64, f64),
        value: (f64, f64),
    ) -> Self {
        let (value_t0, value_t0_std_error) = match scenario.simulation.value_t0 {
            ValueT0::Nested => value,
            ValueT0::DiscountedT1 => {
                let (v, se) = (f.discount[1] * value.0, f.discount[1] * value.1);
                profile[0] = f.row(0, v, v.max(0.0), v.min(0.0), v.max(0.0));
                (v, se)
            }
        };
        let (cva, cva_std_error) = cva;
        Self {
            cva,
            cva_std_error,
            cva_ci: (cva - 1.96 * cva_std_error, cva + 1.96 * cva_std_error),
            value_t0,
            value_t0_std_error,
            profile,
        }
    }
}

/// Computes the profile and CVA from `netted[k * outer_paths + l]`, `k = 0..=N`.
/// The reference for the GPU's `gpu_engine::estimate_on_device`, which computes the
/// same quantities from the values in device memory (sums in another order; the same
/// order statistics).
pub fn estimate(scenario: &Scenario, netted: &[f64], outer_paths: usize) -> CvaEstimate {
    let n_dates = scenario.exposure_dates;
    let f = DateFactors::new(scenario);
    let at = |k: usize| &netted[k * outer_paths..(k + 1) * outer_paths];
    let mut profile = Vec::with_capacity(n_dates + 1);
    for k in 0..=n_dates {
        let p = at(k);
        let inv = 1.0 / outer_paths as f64;
        let ee = p.iter().sum::<f64>() * inv;
        let epe = p.iter().map(|v| v.max(0.0)).sum::<f64>() * inv;
        let ene = p.iter().map(|v| v.min(0.0)).sum::<f64>() * inv;
        let mut pos: Vec<f64> = p.iter().map(|v| v.max(0.0)).collect();
        let pfe = quantile(&mut pos, scenario.simulation.pfe_quantile);
        profile.push(f.row(k, ee, epe, ene, pfe));
    }
    let per_path = (0..outer_paths).map(|l| {
        (1..=n_dates)
            .map(|k| {
                f.lgd
                    * profile[k].discount_factor
                    * netted[k * outer_paths + l].max(0.0)
                    * profile[k].default_probability
            })
            .sum::<f64>()
    });
    let cva = mean_std_error(per_path);
    let value = mean_std_error(
        at(scenario.simulation.value_t0.values_date())
            .iter()
            .copied(),
    );
    CvaEstimate::assemble(scenario, &f, profile, cva, value)
}
