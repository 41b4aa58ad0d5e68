//! The scenario file: market, dates, portfolio (one netting set), counterparty and
//! simulation settings, read from YAML and validated.
//!
//! Every problem is a [`ScenarioError`] naming the field (a dotted path such as
//! `market.assets[1].volatility`) and, where the YAML parser gives it, the line.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A scenario that could not be read or is invalid. `cva run` exits with code 2 on it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{field}: {message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct ScenarioError {
    /// Dotted path of the field at fault (`simulation.outer_paths`), or `scenario`.
    pub field: String,
    pub message: String,
    /// 1-based line in the file, where known.
    pub line: Option<usize>,
}

impl ScenarioError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
            line: None,
        }
    }
}

fn err<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, ScenarioError> {
    Err(ScenarioError::new(field, message))
}

// ---------------------------------------------------------------------------------
// The file format (serde), exactly as written in YAML.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    market: RawMarket,
    dates: RawDates,
    portfolio: Vec<RawPosition>,
    counterparty: RawCounterparty,
    simulation: RawSimulation,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMarket {
    rate: f64,
    assets: Vec<RawAsset>,
    correlation: Option<Vec<Vec<f64>>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAsset {
    name: String,
    spot: f64,
    volatility: f64,
    #[serde(default)]
    dividend_yield: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDates {
    horizon: f64,
    exposure_dates: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPosition {
    name: Option<String>,
    style: Style,
    kind: OptionKind,
    underlying: RawUnderlying,
    strike: f64,
    maturity: f64,
    quantity: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUnderlying {
    asset: Option<String>,
    basket: Option<BTreeMap<String, f64>>,
    max: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCounterparty {
    hazard_rate: Option<f64>,
    hazard_curve: Option<RawHazardCurve>,
    recovery_rate: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHazardCurve {
    tenors: Vec<f64>,
    rates: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSimulation {
    outer_paths: usize,
    inner_paths: serde_yaml_ng::Value,
    basis: serde_yaml_ng::Value,
    itm_only: bool,
    #[serde(default)]
    antithetic: bool,
    #[serde(default)]
    value_t0: ValueT0,
    #[serde(default = "default_precision")]
    precision: Precision,
    #[serde(default = "default_solver")]
    solver: String,
    condition_threshold: Option<f64>,
    escalation_condition: Option<f64>,
    residual_tolerance: Option<f64>,
    #[serde(default)]
    backend: Backend,
    seed: u64,
    #[serde(default = "default_pfe_quantile")]
    pfe_quantile: f64,
}

fn default_precision() -> Precision {
    Precision::F64
}
fn default_solver() -> String {
    "escalating".into()
}
fn default_pfe_quantile() -> f64 {
    0.975
}

// ---------------------------------------------------------------------------------
// The validated scenario.
// ---------------------------------------------------------------------------------

/// Exercise style of a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// Exercised only at maturity.
    European,
    /// Exercisable on every exposure date `t_1 .. t_m` up to its maturity `t_m` (not at
    /// `t_0`), as in Longstaff & Schwartz (2001): strictly a Bermudan.
    American,
}

/// Call or put.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptionKind {
    Call,
    Put,
}

/// Floating-point precision of the regression (matrices and solves). Paths and
/// exposures are always computed in `f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    #[default]
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

/// Where the simulation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The GPU when one is usable, else the CPU.
    #[default]
    Auto,
    Cpu,
    Gpu,
}

/// How the portfolio value at `t_0`, `V_0`, is estimated (`simulation.value_t0`).
///
/// The CVA sums the exposures at `t_1 .. t_N` only (formula (2) of Abbas-Turki &
/// Graillat 2016, whose nested Monte Carlo runs the inner stage at `t_1 .. t_{N-1}`,
/// Section 2), and at `t_0` every outer path is in the same state, so an inner stage
/// there on each of the `M_0` outer paths prices one state `M_0` times. The choice
/// changes `value_t0`, its standard error and the `t_0` row of the profile. The later
/// dates draw the same random numbers either way; their values, and so the CVA, are the
/// same bits where the escalating solver's memory rule (each exercise date's start
/// level, carried from one exposure date to the next) takes the same path, as in the f64
/// runs of the shipped scenarios compared (basket29 up to 1,000,000 outer paths, the
/// netting set, the American put). Where it does not (f32, ill-conditioned systems),
/// the solves of the later dates start at another level and their decisions can move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ValueT0 {
    /// `V_0 = e^{-r t_1} E[P_{t_1}]` from the outer paths' values at `t_1` (no exercise
    /// or cash flow falls in `(t_0, t_1)`), with the standard error of that mean; no
    /// inner stage at `t_0`. The `t_0` row is the deterministic exposure `V_0`.
    #[default]
    DiscountedT1,
    /// An inner stage at `t_0` on every outer path, as at the later dates: `V_0` is the
    /// mean of the `M_0` inner estimates (its standard error is the inner estimator's
    /// noise), and the `t_0` row their profile. That stage is the run's longest: with
    /// the last maturity at `t_N`, `N` of the `N (N + 1) / 2` inner steps and `N - 1` of
    /// the `N (N - 1) / 2` regressions per outer path and American position (basket29:
    /// 10 of 55 and 9 of 45).
    Nested,
}

impl ValueT0 {
    /// The name as written in a scenario.
    pub fn name(self) -> &'static str {
        match self {
            ValueT0::DiscountedT1 => "discounted_t1",
            ValueT0::Nested => "nested",
        }
    }

    /// The date whose netted values estimate `V_0`: 1 ([`ValueT0::DiscountedT1`]) or 0
    /// ([`ValueT0::Nested`]).
    pub fn values_date(self) -> usize {
        match self {
            ValueT0::DiscountedT1 => 1,
            ValueT0::Nested => 0,
        }
    }
}

/// What a position pays on: one asset, a weighted average, or the best of several.
#[derive(Debug, Clone, PartialEq)]
pub enum Underlying {
    /// `S^i`.
    Asset(usize),
    /// `Σ w_i S^i` over `(asset index, weight)`.
    Basket(Vec<(usize, f64)>),
    /// `max_i S^i` over the listed asset indices.
    Max(Vec<usize>),
}

impl Underlying {
    /// Asset indices the underlying depends on (ascending).
    pub fn assets(&self) -> Vec<usize> {
        let mut v = match self {
            Underlying::Asset(i) => vec![*i],
            Underlying::Basket(w) => w.iter().map(|&(i, _)| i).collect(),
            Underlying::Max(v) => v.clone(),
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The underlying's level for asset prices `s` (indexed by asset).
    #[inline]
    pub fn level(&self, s: &[f64]) -> f64 {
        match self {
            Underlying::Asset(i) => s[*i],
            Underlying::Basket(w) => w.iter().map(|&(i, wi)| wi * s[i]).sum(),
            Underlying::Max(v) => v.iter().map(|&i| s[i]).fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Asset {
    pub name: String,
    /// Price at `t_0` (currency units), > 0.
    pub spot: f64,
    /// Black–Scholes volatility, per year, > 0.
    pub volatility: f64,
    /// Continuous dividend yield, per year.
    pub dividend_yield: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Market {
    /// Flat risk-free rate, continuously compounded, per year.
    pub rate: f64,
    pub assets: Vec<Asset>,
    /// `d x d` correlation matrix, row-major, symmetric positive semi-definite.
    pub correlation: Vec<f64>,
}

/// One position of the netting set.
#[derive(Debug, Clone, PartialEq)]
pub struct Position {
    pub name: String,
    pub style: Style,
    pub kind: OptionKind,
    pub underlying: Underlying,
    pub strike: f64,
    /// Maturity in years; an exposure date `t_m`, `0 < t_m <= T`.
    pub maturity: f64,
    /// Index `m` of the maturity on the date grid (`t_m = m T / N`).
    pub maturity_index: usize,
    /// Signed number of contracts: > 0 long (we hold the option), < 0 short.
    pub quantity: f64,
}

impl Position {
    /// Payoff of one contract for an underlying level `x`.
    #[inline]
    pub fn payoff_of_level(&self, x: f64) -> f64 {
        match self.kind {
            OptionKind::Call => (x - self.strike).max(0.0),
            OptionKind::Put => (self.strike - x).max(0.0),
        }
    }

    /// Payoff of one contract for asset prices `s`.
    #[inline]
    pub fn payoff(&self, s: &[f64]) -> f64 {
        self.payoff_of_level(self.underlying.level(s))
    }
}

/// Counterparty default intensity: piecewise constant, `rates[i]` on
/// `(tenors[i-1], tenors[i]]` (with `tenors[-1] = 0`), the last rate beyond.
#[derive(Debug, Clone, PartialEq)]
pub struct HazardCurve {
    pub tenors: Vec<f64>,
    pub rates: Vec<f64>,
}

impl HazardCurve {
    pub fn flat(rate: f64) -> Self {
        Self {
            tenors: vec![f64::INFINITY],
            rates: vec![rate],
        }
    }

    /// The flat rate, if the curve has a single piece.
    pub fn flat_rate(&self) -> Option<f64> {
        (self.rates.len() == 1).then(|| self.rates[0])
    }

    /// Survival probability `S(t) = exp(-∫_0^t λ(u) du)`, `t` in years.
    pub fn survival(&self, t: f64) -> f64 {
        let mut integral = 0.0;
        let mut start = 0.0;
        for (i, &rate) in self.rates.iter().enumerate() {
            let end = if i + 1 == self.rates.len() {
                f64::INFINITY
            } else {
                self.tenors[i]
            };
            if t <= start {
                break;
            }
            integral += rate * (t.min(end) - start);
            start = end;
        }
        (-integral).exp()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Counterparty {
    pub hazard: HazardCurve,
    /// Recovery rate `R` in `[0, 1]`.
    pub recovery_rate: f64,
}

/// Regression basis of the Longstaff–Schwartz step, in the normalized prices
/// `x_i = S^i / S^i_0` of the position's underlying assets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// `(1, x_1, ..., x_d)`: the paper's basis, `n = d + 1`.
    Linear,
    /// All monomials of total degree `<= degree`: `n = C(d + degree, degree)`.
    Monomials(u32),
}

impl Basis {
    /// Number of basis functions for `d` variables.
    pub fn size(self, d: usize) -> usize {
        match self {
            Basis::Linear => d + 1,
            Basis::Monomials(p) => {
                // C(d + p, p), computed without overflow for the sizes we accept.
                let mut c: u128 = 1;
                for i in 1..=p as u128 {
                    c = c * (d as u128 + i) / i;
                }
                c.min(usize::MAX as u128) as usize
            }
        }
    }

    pub fn describe(self) -> String {
        match self {
            Basis::Linear => "linear".into(),
            Basis::Monomials(p) => format!("monomials({p})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// `M_0`.
    pub outer_paths: usize,
    /// `M_k`, the same at every date.
    pub inner_paths: usize,
    /// The rule as written (`"300"`, `"2*sqrt(outer_paths)"`).
    pub inner_paths_rule: String,
    pub basis: Basis,
    /// Regress on in-the-money inner paths only.
    pub itm_only: bool,
    /// Antithetic inner paths: inner path `2j + 1` of every (outer path, date) is driven by
    /// the negated normals of inner path `2j` (whose stream it shares), so each pair's
    /// shocks are `z` and `-z`. Needs an even `inner_paths`. Outer paths are unaffected.
    pub antithetic: bool,
    /// How `V_0` is estimated, and whether an inner stage runs at `t_0`.
    pub value_t0: ValueT0,
    pub precision: Precision,
    pub strategy: cva_kernels::Strategy,
    pub solver_params: cva_kernels::SolverParams,
    pub backend: Backend,
    pub seed: u64,
    /// Quantile of the potential future exposure, in (0, 1).
    pub pfe_quantile: f64,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub market: Market,
    /// Horizon `T` in years.
    pub horizon: f64,
    /// Number of exposure dates `N`; `t_k = k T / N`, `k = 0..=N`.
    pub exposure_dates: usize,
    pub portfolio: Vec<Position>,
    pub counterparty: Counterparty,
    pub simulation: Simulation,
}

impl Scenario {
    /// `t_k` in years.
    pub fn time(&self, k: usize) -> f64 {
        self.horizon * k as f64 / self.exposure_dates as f64
    }

    /// The date index up to which the inner paths from `t_k` run (the last maturity after
    /// `t_k`), or `None` where date `k` has no inner stage: every position has matured,
    /// or `k = 0` without [`ValueT0::Nested`].
    pub fn inner_stage_end(&self, k: usize) -> Option<usize> {
        if k == 0 && self.simulation.value_t0 != ValueT0::Nested {
            return None;
        }
        self.portfolio
            .iter()
            .map(|p| p.maturity_index)
            .filter(|&mi| mi > k)
            .max()
    }

    /// Every exposure date with an inner stage, with the dates its inner paths span:
    /// `(k, inner_stage_end(k) - k)`, in date order.
    pub fn inner_stages(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.exposure_dates).filter_map(|k| self.inner_stage_end(k).map(|end| (k, end - k)))
    }

    /// Reads and validates a scenario file, applying `overrides` (`path.to.field=value`,
    /// the value parsed as YAML) first.
    ///
    /// # Errors
    /// A [`ScenarioError`] naming the field at fault.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ScenarioError::new("scenario", format!("cannot read {}: {e}", path.display()))
        })?;
        let default_name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into());
        Self::parse(&text, &default_name, overrides)
    }

    /// [`Scenario::load`] from text.
    pub fn parse(
        text: &str,
        default_name: &str,
        overrides: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let raw: RawScenario = if overrides.is_empty() {
            serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text))
                .map_err(path_error)?
        } else {
            let mut value: serde_yaml_ng::Value =
                serde_yaml_ng::from_str(text).map_err(yaml_error)?;
            for o in overrides {
                apply_override(&mut value, o)?;
            }
            serde_path_to_error::deserialize(value).map_err(path_error)?
        };
        validate(raw, default_name)
    }
}

/// A deserialization error with the path of the field at fault.
fn path_error(e: serde_path_to_error::Error<serde_yaml_ng::Error>) -> ScenarioError {
    let path = e.path().to_string();
    let mut se = yaml_error(e.into_inner());
    if path != "." && !path.is_empty() {
        // The innermost path is the field itself for "invalid value"; for "unknown field"
        // and "missing field" it is the enclosing mapping, which the message completes.
        se.field = path;
    }
    se
}

fn yaml_error(e: serde_yaml_ng::Error) -> ScenarioError {
    let line = e.location().map(|l| l.line());
    let msg = e.to_string();
    // serde_yaml_ng writes "<path>: <message> at line L column C"; keep the path as field.
    let (field, message) = match msg.split_once(": ") {
        Some((p, m)) if !p.contains(' ') => (p.to_string(), m.to_string()),
        _ => ("scenario".to_string(), msg.clone()),
    };
    let message = match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    };
    ScenarioError {
        field,
        message,
        line,
    }
}

/// Applies `a.b.c=value` to a YAML tree (list elements addressed as `name[2]` or `name.2`).
fn apply_override(root: &mut serde_yaml_ng::Value, spec: &str) -> Result<(), ScenarioError> {
    use serde_yaml_ng::Value;
    let (path, value) = spec.split_once('=').ok_or_else(|| {
        ScenarioError::new("--set", format!("expected FIELD=VALUE, got `{spec}`"))
    })?;
    let new: Value = serde_yaml_ng::from_str(value)
        .map_err(|e| ScenarioError::new(path, format!("cannot parse override value: {e}")))?;
    let mut node = root;
    let keys: Vec<String> = path
        .replace('[', ".")
        .replace(']', "")
        .split('.')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if keys.is_empty() {
        return err("--set", format!("empty field name in `{spec}`"));
    }
    for (i, key) in keys.iter().enumerate() {
        let last = i + 1 == keys.len();
        node = match node {
            Value::Mapping(m) => {
                let k = Value::String(key.clone());
                if last {
                    m.insert(k, new);
                    return Ok(());
                }
                if !m.contains_key(&k) {
                    m.insert(k.clone(), Value::Mapping(Default::default()));
                }
                m.get_mut(&k).expect("inserted above")
            }
            Value::Sequence(s) => {
                let idx: usize = key.parse().map_err(|_| {
                    ScenarioError::new(path, format!("`{key}` is not a list index"))
                })?;
                let len = s.len();
                let slot = s.get_mut(idx).ok_or_else(|| {
                    ScenarioError::new(path, format!("index {idx} out of range (list of {len})"))
                })?;
                if last {
                    *slot = new;
                    return Ok(());
                }
                slot
            }
            _ => {
                return err(
                    path,
                    format!("`{key}` is inside a value that is not a mapping"),
                )
            }
        };
    }
    Ok(())
}

fn finite(field: &str, v: f64) -> Result<f64, ScenarioError> {
    if v.is_finite() {
        Ok(v)
    } else {
        err(field, format!("must be a finite number, got {v}"))
    }
}

fn positive(field: &str, v: f64) -> Result<f64, ScenarioError> {
    finite(field, v)?;
    if v > 0.0 {
        Ok(v)
    } else {
        err(field, format!("must be positive, got {v}"))
    }
}

fn validate(raw: RawScenario, default_name: &str) -> Result<Scenario, ScenarioError> {
    // Market.
    let rate = finite("market.rate", raw.market.rate)?;
    if raw.market.assets.is_empty() {
        return err("market.assets", "at least one asset is required");
    }
    let mut assets = Vec::with_capacity(raw.market.assets.len());
    let mut index = BTreeMap::new();
    for (i, a) in raw.market.assets.iter().enumerate() {
        let f = |name: &str| format!("market.assets[{i}].{name}");
        if a.name.is_empty() {
            return err(f("name"), "must not be empty");
        }
        if index.insert(a.name.clone(), i).is_some() {
            return err(f("name"), format!("duplicate asset name `{}`", a.name));
        }
        assets.push(Asset {
            name: a.name.clone(),
            spot: positive(&f("spot"), a.spot)?,
            volatility: positive(&f("volatility"), a.volatility)?,
            dividend_yield: finite(&f("dividend_yield"), a.dividend_yield)?,
        });
    }
    let d = assets.len();
    let correlation = match &raw.market.correlation {
        None => {
            let mut c = vec![0.0; d * d];
            for i in 0..d {
                c[i * d + i] = 1.0;
            }
            c
        }
        Some(rows) => {
            if rows.len() != d {
                return err(
                    "market.correlation",
                    format!(
                        "must be {d} x {d} (one row per asset), has {} rows",
                        rows.len()
                    ),
                );
            }
            let mut c = Vec::with_capacity(d * d);
            for (i, row) in rows.iter().enumerate() {
                if row.len() != d {
                    return err(
                        format!("market.correlation[{i}]"),
                        format!("must have {d} entries, has {}", row.len()),
                    );
                }
                for (j, &v) in row.iter().enumerate() {
                    c.push(finite(&format!("market.correlation[{i}][{j}]"), v)?);
                }
            }
            crate::model::check_correlation(&c, d)
                .map_err(|m| ScenarioError::new("market.correlation", m))?;
            c
        }
    };
    let market = Market {
        rate,
        assets,
        correlation,
    };

    // Dates.
    let horizon = positive("dates.horizon", raw.dates.horizon)?;
    let n_dates = raw.dates.exposure_dates;
    if n_dates == 0 {
        return err("dates.exposure_dates", "must be at least 1");
    }

    // Portfolio.
    if raw.portfolio.is_empty() {
        return err("portfolio", "at least one position is required");
    }
    let mut portfolio = Vec::with_capacity(raw.portfolio.len());
    for (p, r) in raw.portfolio.iter().enumerate() {
        let f = |name: &str| format!("portfolio[{p}].{name}");
        let lookup = |field: String, name: &str| -> Result<usize, ScenarioError> {
            index.get(name).copied().ok_or_else(|| {
                ScenarioError::new(
                    field,
                    format!("unknown asset `{name}` (not in market.assets)"),
                )
            })
        };
        let u = &r.underlying;
        let given = [u.asset.is_some(), u.basket.is_some(), u.max.is_some()]
            .iter()
            .filter(|&&b| b)
            .count();
        if given != 1 {
            return err(
                f("underlying"),
                "give exactly one of `asset: NAME`, `basket: {NAME: weight, ...}`, `max: [NAME, ...]`",
            );
        }
        let underlying = if let Some(a) = &u.asset {
            Underlying::Asset(lookup(f("underlying.asset"), a)?)
        } else if let Some(b) = &u.basket {
            if b.is_empty() {
                return err(f("underlying.basket"), "must name at least one asset");
            }
            let mut w = Vec::new();
            for (name, &weight) in b {
                let field = format!("portfolio[{p}].underlying.basket.{name}");
                w.push((lookup(field.clone(), name)?, finite(&field, weight)?));
            }
            Underlying::Basket(w)
        } else {
            let v = u.max.as_ref().expect("counted above");
            if v.is_empty() {
                return err(f("underlying.max"), "must name at least one asset");
            }
            let mut idx = Vec::new();
            for (k, name) in v.iter().enumerate() {
                idx.push(lookup(format!("portfolio[{p}].underlying.max[{k}]"), name)?);
            }
            Underlying::Max(idx)
        };
        let strike = finite(&f("strike"), r.strike)?;
        if strike < 0.0 {
            return err(f("strike"), format!("must not be negative, got {strike}"));
        }
        let maturity = positive(&f("maturity"), r.maturity)?;
        if maturity > horizon * (1.0 + 1e-12) {
            return err(
                f("maturity"),
                format!("{maturity} is beyond the horizon dates.horizon = {horizon}"),
            );
        }
        let m = (maturity / horizon * n_dates as f64).round();
        let maturity_index = m as usize;
        if maturity_index == 0
            || (maturity - horizon * m / n_dates as f64).abs() > 1e-9 * horizon.max(1.0)
        {
            return err(
                f("maturity"),
                format!(
                    "{maturity} is not an exposure date (t_k = k * {horizon} / {n_dates}, k >= 1)"
                ),
            );
        }
        let quantity = finite(&f("quantity"), r.quantity)?;
        portfolio.push(Position {
            name: r.name.clone().unwrap_or_else(|| format!("position{p}")),
            style: r.style,
            kind: r.kind,
            underlying,
            strike,
            maturity,
            maturity_index,
            quantity,
        });
    }

    // Counterparty.
    let cp = &raw.counterparty;
    let hazard =
        match (&cp.hazard_rate, &cp.hazard_curve) {
            (Some(h), None) => {
                let h = finite("counterparty.hazard_rate", *h)?;
                if h < 0.0 {
                    return err(
                        "counterparty.hazard_rate",
                        format!("must not be negative, got {h}"),
                    );
                }
                HazardCurve::flat(h)
            }
            (None, Some(c)) => {
                if c.tenors.is_empty() || c.tenors.len() != c.rates.len() {
                    return err(
                        "counterparty.hazard_curve",
                        "`tenors` and `rates` must be non-empty and of equal length",
                    );
                }
                let mut prev = 0.0;
                for (i, &t) in c.tenors.iter().enumerate() {
                    let field = format!("counterparty.hazard_curve.tenors[{i}]");
                    if positive(&field, t)? <= prev {
                        return err(field, "tenors must be increasing");
                    }
                    prev = t;
                }
                for (i, &r) in c.rates.iter().enumerate() {
                    let field = format!("counterparty.hazard_curve.rates[{i}]");
                    if finite(&field, r)? < 0.0 {
                        return err(field, format!("must not be negative, got {r}"));
                    }
                }
                HazardCurve {
                    tenors: c.tenors.clone(),
                    rates: c.rates.clone(),
                }
            }
            _ => return err(
                "counterparty",
                "give exactly one of `hazard_rate` (flat) and `hazard_curve` (piecewise constant)",
            ),
        };
    let recovery_rate = finite("counterparty.recovery_rate", cp.recovery_rate)?;
    if !(0.0..=1.0).contains(&recovery_rate) {
        return err(
            "counterparty.recovery_rate",
            format!("must be in [0, 1], got {recovery_rate}"),
        );
    }

    // Simulation.
    let s = &raw.simulation;
    if s.outer_paths == 0 {
        return err("simulation.outer_paths", "must be at least 1");
    }
    if s.outer_paths > u32::MAX as usize {
        return err("simulation.outer_paths", "must be below 2^32");
    }
    let (inner_paths, inner_paths_rule) = parse_inner_paths(&s.inner_paths, s.outer_paths)?;
    let basis = parse_basis(&s.basis)?;
    let strategy = cva_kernels::Strategy::from_name(&s.solver).ok_or_else(|| {
        ScenarioError::new(
            "simulation.solver",
            format!(
                "unknown strategy `{}` (expected one of: ldlt, householder-pcr, divide-conquer, escalating)",
                s.solver
            ),
        )
    })?;
    let mut solver_params = cva_kernels::SolverParams::default();
    if let Some(c) = s.condition_threshold {
        if positive("simulation.condition_threshold", c)? < 1.0 {
            return err("simulation.condition_threshold", "must be at least 1");
        }
        solver_params.condition_threshold = c;
    }
    if let Some(c) = s.escalation_condition {
        if positive("simulation.escalation_condition", c)? < 1.0 {
            return err("simulation.escalation_condition", "must be at least 1");
        }
        solver_params.escalation_condition = Some(c);
    }
    if let Some(t) = s.residual_tolerance {
        solver_params.residual_tolerance = Some(positive("simulation.residual_tolerance", t)?);
    }
    let pfe_quantile = finite("simulation.pfe_quantile", s.pfe_quantile)?;
    if !(pfe_quantile > 0.0 && pfe_quantile < 1.0) {
        return err(
            "simulation.pfe_quantile",
            format!("must be in (0, 1), got {pfe_quantile}"),
        );
    }
    // Basis size and inner paths, for every American position.
    for (p, pos) in portfolio.iter().enumerate() {
        if pos.style != Style::American {
            continue;
        }
        let n = basis.size(pos.underlying.assets().len());
        if n > cva_kernels::MAX_N {
            return err(
                "simulation.basis",
                format!(
                    "gives {n} basis functions for portfolio[{p}] (at most {} supported)",
                    cva_kernels::MAX_N
                ),
            );
        }
        if inner_paths < n {
            return err(
                "simulation.inner_paths",
                format!(
                    "{inner_paths} inner paths are fewer than the {n} basis functions of portfolio[{p}]"
                ),
            );
        }
    }
    if inner_paths > u32::MAX as usize - 1 {
        return err("simulation.inner_paths", "must be below 2^32 - 1");
    }
    if s.antithetic && inner_paths % 2 != 0 {
        return err(
            "simulation.antithetic",
            format!("needs an even number of inner paths (pairs), got {inner_paths}"),
        );
    }

    Ok(Scenario {
        name: raw.name.unwrap_or_else(|| default_name.to_string()),
        market,
        horizon,
        exposure_dates: n_dates,
        portfolio,
        counterparty: Counterparty {
            hazard,
            recovery_rate,
        },
        simulation: Simulation {
            outer_paths: s.outer_paths,
            inner_paths,
            inner_paths_rule,
            basis,
            itm_only: s.itm_only,
            antithetic: s.antithetic,
            value_t0: s.value_t0,
            precision: s.precision,
            strategy,
            solver_params,
            backend: s.backend,
            seed: s.seed,
            pfe_quantile,
        },
    })
}

/// `300` or a rule `c*sqrt(outer_paths)` / `sqrt(outer_paths)` (rounded up).
fn parse_inner_paths(
    v: &serde_yaml_ng::Value,
    outer: usize,
) -> Result<(usize, String), ScenarioError> {
    const FIELD: &str = "simulation.inner_paths";
    if let Some(n) = v.as_u64() {
        if n == 0 {
            return err(FIELD, "must be at least 1");
        }
        return Ok((n as usize, n.to_string()));
    }
    let Some(s) = v.as_str() else {
        return err(
            FIELD,
            "expected a positive integer or a rule such as `2*sqrt(outer_paths)`",
        );
    };
    let rule: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let coeff = if rule == "sqrt(outer_paths)" {
        Some(1.0)
    } else {
        rule.strip_suffix("*sqrt(outer_paths)")
            .and_then(|c| c.parse::<f64>().ok())
    };
    match coeff {
        Some(c) if c.is_finite() && c > 0.0 => {
            let n = (c * (outer as f64).sqrt()).ceil() as usize;
            Ok((n.max(1), s.to_string()))
        }
        _ => err(
            FIELD,
            format!("cannot read `{s}`: expected an integer or `c*sqrt(outer_paths)` with c > 0"),
        ),
    }
}

/// `linear` or `{monomials: DEGREE}`.
fn parse_basis(v: &serde_yaml_ng::Value) -> Result<Basis, ScenarioError> {
    const FIELD: &str = "simulation.basis";
    if v.as_str() == Some("linear") {
        return Ok(Basis::Linear);
    }
    if let Some(m) = v.as_mapping() {
        if m.len() == 1 {
            if let Some(deg) = m.get("monomials") {
                return match deg.as_u64() {
                    Some(p) if (1..=16).contains(&p) => Ok(Basis::Monomials(p as u32)),
                    _ => err(
                        "simulation.basis.monomials",
                        "degree must be an integer in 1..=16",
                    ),
                };
            }
        }
    }
    err(FIELD, "expected `linear` or `{monomials: DEGREE}`")
}
