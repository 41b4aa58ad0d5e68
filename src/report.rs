//! Reports of a run: `summary.parquet`, `exposure.parquet`, `solver_stats.parquet` and
//! `exposure.svg` in one directory. Every file is first written under a temporary name
//! in that directory and renamed only when all of them were written, so a failed run
//! leaves no half-written report.

use crate::engine::RegressionStepStats;
use crate::exposure::{quantile, ExposureRow};
use anyhow::{Context, Result};
use cva_kernels::{Method, Status};
use polars::prelude::*;
use std::path::{Path, PathBuf};

/// The one-row summary of a run (also printed, and emitted by `--json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub scenario: String,
    pub cva: f64,
    pub cva_std_error: f64,
    pub cva_ci_low: f64,
    pub cva_ci_high: f64,
    pub value_t0: f64,
    pub value_t0_std_error: f64,
    /// How `value_t0` was estimated (`simulation.value_t0`: `discounted_t1` or `nested`).
    pub value_t0_method: String,
    /// Flat hazard rate (per year); `None` for a piecewise-constant curve.
    pub hazard_rate: Option<f64>,
    pub recovery_rate: f64,
    /// `T` in years.
    pub horizon: f64,
    pub exposure_dates: usize,
    pub outer_paths: usize,
    pub inner_paths: usize,
    /// Inner paths in antithetic pairs (`simulation.antithetic`).
    pub antithetic: bool,
    pub basis: String,
    pub precision: String,
    pub strategy: String,
    pub backend: String,
    pub device: String,
    pub threads: usize,
    pub seed: u64,
    pub wall_seconds: f64,
    pub paths_seconds: f64,
    pub regression_build_seconds: f64,
    pub solve_seconds: f64,
    pub exposure_seconds: f64,
    pub systems_solved: usize,
    pub solved_ldlt: usize,
    pub solved_householder_pcr: usize,
    pub solved_divide_conquer: usize,
    pub solver_failures: usize,
    pub discarded_eigenvalues: usize,
    pub too_few_paths: usize,
    pub outer_exercises: usize,
}

/// A column named `name` with `get(row)` for every row.
pub(crate) fn column<R, V>(rows: &[R], name: &str, get: impl Fn(&R) -> V) -> Column
where
    Series: NamedFrom<Vec<V>, [V]>,
{
    Column::new(name.into(), rows.iter().map(get).collect::<Vec<V>>())
}

/// `summary.parquet`: one row, the fields of [`Summary`].
pub fn summary_frame(s: &Summary) -> Result<DataFrame> {
    let value = serde_json::to_value(s)?;
    let map = value.as_object().expect("Summary serializes to an object");
    let mut cols = Vec::new();
    for (k, v) in map {
        let c = match v {
            serde_json::Value::String(x) => Column::new(k.as_str().into(), vec![x.clone()]),
            serde_json::Value::Number(x) if x.is_u64() => {
                Column::new(k.as_str().into(), vec![x.as_u64().unwrap_or_default()])
            }
            serde_json::Value::Number(x) => {
                Column::new(k.as_str().into(), vec![x.as_f64().unwrap_or(f64::NAN)])
            }
            serde_json::Value::Null => Column::new(k.as_str().into(), vec![None::<f64>]),
            serde_json::Value::Bool(x) => Column::new(k.as_str().into(), vec![*x]),
            other => anyhow::bail!("unexpected summary field {k}: {other}"),
        };
        cols.push(c);
    }
    Ok(DataFrame::new(1, cols)?)
}

/// `exposure.parquet`: one row per date `t_0 .. t_N`.
pub fn exposure_frame(profile: &[ExposureRow]) -> Result<DataFrame> {
    let p = profile;
    Ok(DataFrame::new(
        p.len(),
        vec![
            column(p, "date_index", |r| r.date_index as u64),
            column(p, "time", |r| r.time),
            column(p, "ee", |r| r.ee),
            column(p, "epe", |r| r.epe),
            column(p, "ene", |r| r.ene),
            column(p, "pfe", |r| r.pfe),
            column(p, "discount_factor", |r| r.discount_factor),
            column(p, "discounted_epe", |r| r.discounted_epe),
            column(p, "default_probability", |r| r.default_probability),
            column(p, "cva_contribution", |r| r.cva_contribution),
        ],
    )?)
}

/// `solver_stats.parquet`: one row per regression step (exposure date `k`, exercise
/// date `j`): systems, failures, counts per method and status, discarded eigenvalues,
/// regressions skipped for too few paths, and residual quantiles.
pub fn solver_frame(steps: &[RegressionStepStats]) -> Result<DataFrame> {
    let st = steps;
    let u =
        |name: &str, g: &dyn Fn(&RegressionStepStats) -> usize| column(st, name, |s| g(s) as u64);
    // Residual quantiles: one sorted copy per step.
    let quantiles: Vec<[f64; 3]> = st
        .iter()
        .map(|s| {
            let mut r: Vec<f64> = s.residuals.iter().map(|&v| v as f64).collect();
            [0.5, 0.9, 0.99].map(|p| quantile(&mut r, p))
        })
        .collect();
    let mut cols = vec![
        u("exposure_date", &|s| s.exposure_date),
        u("exercise_date", &|s| s.exercise_date),
        u("systems", &|s| s.summary.systems),
        u("failures", &|s| s.summary.failures()),
    ];
    for m in Method::ALL {
        let name = format!("method_{}", m.name().replace('-', "_"));
        cols.push(u(&name, &|s| s.summary.per_method[m as usize]));
    }
    for status in Status::ALL {
        let name = format!("status_{}", status.name().replace('-', "_"));
        cols.push(u(&name, &|s| s.summary.per_status[status as usize]));
    }
    cols.push(u("discarded_eigenvalues", &|s| {
        s.summary.discarded_eigenvalues
    }));
    cols.push(u("too_few_paths", &|s| s.too_few_paths));
    cols.push(column(st, "residual_max", |s| s.summary.max_residual));
    for (i, name) in ["residual_p50", "residual_p90", "residual_p99"]
        .into_iter()
        .enumerate()
    {
        cols.push(column(&quantiles, name, |q| q[i]));
    }
    Ok(DataFrame::new(st.len(), cols)?)
}

/// An SVG plot of EPE and PFE against time.
pub fn exposure_svg(profile: &[ExposureRow], title: &str, pfe_quantile: f64) -> Result<String> {
    use plotters::prelude::*;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let t_max = profile.last().map(|r| r.time).unwrap_or(1.0).max(1e-12);
        let y_max = profile
            .iter()
            .flat_map(|r| [r.epe, r.pfe])
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            .max(1e-12)
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("time (years)")
            .y_desc("exposure")
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                profile.iter().map(|r| (r.time, r.epe)),
                &BLUE,
            ))?
            .label("EPE")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart
            .draw_series(LineSeries::new(
                profile.iter().map(|r| (r.time, r.pfe)),
                &RED,
            ))?
            .label(format!("PFE {:.1}%", pfe_quantile * 100.0))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// One file of a report: its final name and its bytes.
pub enum ReportFile {
    Parquet(&'static str, DataFrame),
    Text(&'static str, String),
}

/// Writes all `files` into `dir` atomically per file and all-or-nothing per report:
/// every file goes to `.NAME.tmp` first; only when all were written are they renamed.
///
/// # Errors
/// If the directory cannot be created or a file cannot be written; temporary files are
/// removed and no final file is touched.
pub fn write_report(dir: &Path, files: Vec<ReportFile>) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let result = (|| -> Result<()> {
        for f in files {
            let name = match &f {
                ReportFile::Parquet(n, _) | ReportFile::Text(n, _) => *n,
            };
            let tmp = dir.join(format!(".{name}.tmp"));
            let dst = dir.join(name);
            staged.push((tmp.clone(), dst));
            match f {
                ReportFile::Parquet(_, mut df) => {
                    let file = std::fs::File::create(&tmp)
                        .with_context(|| format!("creating {}", tmp.display()))?;
                    if let Err(e) = ParquetWriter::new(file).finish(&mut df) {
                        anyhow::bail!("writing {}: {e}", tmp.display());
                    }
                }
                ReportFile::Text(_, s) => {
                    std::fs::write(&tmp, s).with_context(|| format!("writing {}", tmp.display()))?
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (tmp, _) in &staged {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    let mut written = Vec::new();
    for (tmp, dst) in staged {
        std::fs::rename(&tmp, &dst)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))?;
        written.push(dst);
    }
    Ok(written)
}
