//! The multi-asset Black–Scholes market under the risk-neutral measure:
//! `dS^i / S^i = (r - q_i) dt + σ_i dW^i`, `d<W^i, W^j> = ρ_ij dt`, sampled exactly on
//! the date grid: `S_{t+Δ} = S_t exp((r - q_i - σ_i²/2) Δ + σ_i sqrt(Δ) (C z)_i)` with
//! `z` standard normal and `C C^T = ρ`. The normals of a path are drawn in one run from
//! its stream: step `s`, asset `i` uses draw `s * d + i`.

use crate::scenario::Market;

/// Checks that the row-major `d x d` matrix `c` is a correlation matrix: symmetric,
/// unit diagonal, entries in [-1, 1], positive semi-definite.
///
/// # Errors
/// A message saying which entry or property fails.
pub fn check_correlation(c: &[f64], d: usize) -> Result<(), String> {
    for i in 0..d {
        if (c[i * d + i] - 1.0).abs() > 1e-12 {
            return Err(format!(
                "diagonal entry [{i}][{i}] is {}, must be 1",
                c[i * d + i]
            ));
        }
        for j in 0..d {
            let v = c[i * d + j];
            if !(-1.0..=1.0).contains(&v) {
                return Err(format!("entry [{i}][{j}] = {v} is outside [-1, 1]"));
            }
            if (v - c[j * d + i]).abs() > 1e-12 {
                return Err(format!(
                    "not symmetric: [{i}][{j}] = {v} but [{j}][{i}] = {}",
                    c[j * d + i]
                ));
            }
        }
    }
    correlation_factor(c, d).map(|_| ())
}

/// A lower-triangular `C` (row-major `d x d`) with `C C^T = ρ`, by Cholesky that accepts
/// zero pivots of a semi-definite matrix (the column is then zero).
///
/// # Errors
/// If `ρ` is not positive semi-definite (a pivot below `-1e-10`, or a zero pivot whose
/// column below is not zero).
pub fn correlation_factor(c: &[f64], d: usize) -> Result<Vec<f64>, String> {
    const TOL: f64 = 1e-10;
    let mut l = vec![0.0; d * d];
    for j in 0..d {
        let mut diag = c[j * d + j];
        for k in 0..j {
            diag -= l[j * d + k] * l[j * d + k];
        }
        if diag < -TOL {
            return Err(format!(
                "not positive semi-definite (pivot {j} of its Cholesky factorization is {diag:e})"
            ));
        }
        let ljj = diag.max(0.0).sqrt();
        l[j * d + j] = ljj;
        for i in j + 1..d {
            let mut s = c[i * d + j];
            for k in 0..j {
                s -= l[i * d + k] * l[j * d + k];
            }
            if ljj > TOL.sqrt() {
                l[i * d + j] = s / ljj;
            } else if s.abs() > 1e-6 {
                return Err(format!(
                    "not positive semi-definite (zero pivot {j} with non-zero entry below it in row {i})"
                ));
            }
        }
    }
    Ok(l)
}

/// Precomputed one-step transition of the market on a grid of step `dt` years.
#[derive(Debug, Clone)]
pub struct Dynamics {
    pub d: usize,
    /// `(r - q_i - σ_i²/2) dt`.
    drift: Vec<f64>,
    /// `σ_i sqrt(dt)`.
    vol: Vec<f64>,
    /// Correlation factor (row-major lower triangular), `None` for independent assets.
    factor: Option<Vec<f64>>,
}

impl Dynamics {
    /// # Panics
    /// If the correlation is not positive semi-definite (validated with the scenario).
    pub fn new(market: &Market, dt: f64) -> Self {
        let d = market.assets.len();
        let identity = (0..d).all(|i| {
            (0..d).all(|j| market.correlation[i * d + j] == if i == j { 1.0 } else { 0.0 })
        });
        let factor = (!identity)
            .then(|| correlation_factor(&market.correlation, d).expect("validated correlation"));
        Self {
            d,
            drift: market
                .assets
                .iter()
                .map(|a| (market.rate - a.dividend_yield - 0.5 * a.volatility * a.volatility) * dt)
                .collect(),
            vol: market
                .assets
                .iter()
                .map(|a| a.volatility * dt.sqrt())
                .collect(),
            factor,
        }
    }

    /// Advances `s` (length `d`) by one step with the standard normals `z` (length
    /// `d`, independent); `w` is scratch of length `d`.
    #[inline]
    pub fn step(&self, s: &mut [f64], z: &[f64], w: &mut [f64]) {
        let shocks: &[f64] = match &self.factor {
            None => z,
            Some(c) => {
                let d = self.d;
                for i in 0..d {
                    let mut acc = 0.0;
                    for k in 0..=i {
                        acc += c[i * d + k] * z[k];
                    }
                    w[i] = acc;
                }
                w
            }
        };
        for i in 0..self.d {
            s[i] *= (self.drift[i] + self.vol[i] * shocks[i]).exp();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semidefinite_correlation_is_accepted_and_factored() {
        // Two perfectly correlated assets and an independent one.
        let c = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let l = correlation_factor(&c, 3).unwrap();
        for i in 0..3 {
            for j in 0..3 {
                let v: f64 = (0..3).map(|k| l[i * 3 + k] * l[j * 3 + k]).sum();
                assert!((v - c[i * 3 + j]).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn indefinite_correlation_is_rejected() {
        let c = [1.0, 0.9, -0.9, 0.9, 1.0, 0.9, -0.9, 0.9, 1.0];
        assert!(check_correlation(&c, 3).is_err());
    }
}
