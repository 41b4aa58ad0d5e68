//! Generated test and benchmark batches of symmetric systems.
//!
//! The paper's family (Abbas-Turki & Graillat 2016, Section 3.3): `A = Q R Q^T`, with
//! `Q` the orthogonal factor of the Householder tridiagonalization of the
//! equicorrelation matrix `Ξ_ρ` (1 on the diagonal, `ρ` elsewhere) and `R` a random
//! symmetric tridiagonal matrix made diagonally dominant.

use crate::householder::householder_tridiagonalize;
use crate::Real;

/// SplitMix64: a small, fast, seedable generator of uniform bits for test data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `Ξ_ρ`, `n x n` column-major.
pub fn equicorrelation(n: usize, rho: f64) -> Vec<f64> {
    let mut a = vec![rho; n * n];
    for i in 0..n {
        a[i + i * n] = 1.0;
    }
    a
}

/// `batch` systems of the paper's family for size `n` and correlation `rho`, with
/// right-hand sides uniform in [-1, 1]; full column-major matrices (both triangles
/// filled), in the layout of [`SymmetricBatch`](crate::SymmetricBatch).
pub fn paper_family<T: Real>(n: usize, batch: usize, rho: f64, seed: u64) -> (Vec<T>, Vec<T>) {
    let mut q = equicorrelation(n, rho);
    let mut d = vec![0.0; n];
    let mut e = vec![0.0; n.saturating_sub(1)];
    householder_tridiagonalize(n, &mut q, n, &mut d, &mut e);
    let mut rng = SplitMix64::new(seed);
    let mut a = vec![T::ZERO; batch * n * n];
    let mut b = vec![T::ZERO; batch * n];
    let mut off = vec![0.0; n.saturating_sub(1)];
    let mut diag = vec![0.0; n];
    let mut qr = vec![0.0; n * n];
    for s in 0..batch {
        for v in off.iter_mut() {
            *v = rng.uniform();
        }
        for (i, v) in diag.iter_mut().enumerate() {
            let left = if i > 0 { off[i - 1] } else { 0.0 };
            let right = if i + 1 < n { off[i] } else { 0.0 };
            *v = (left + right) * (1.0 + rng.uniform()) + 0.01;
        }
        // QR = Q * R (R tridiagonal), then A = (QR) Q^T.
        for c in 0..n {
            for r in 0..n {
                let mut acc = q[r + c * n] * diag[c];
                if c > 0 {
                    acc += q[r + (c - 1) * n] * off[c - 1];
                }
                if c + 1 < n {
                    acc += q[r + (c + 1) * n] * off[c];
                }
                qr[r + c * n] = acc;
            }
        }
        let am = &mut a[s * n * n..(s + 1) * n * n];
        for c in 0..n {
            for r in c..n {
                let mut acc = 0.0;
                for k in 0..n {
                    acc += qr[r + k * n] * q[c + k * n];
                }
                am[r + c * n] = T::from_f64(acc);
                am[c + r * n] = T::from_f64(acc);
            }
        }
        for v in b[s * n..(s + 1) * n].iter_mut() {
            *v = T::from_f64(2.0 * rng.uniform() - 1.0);
        }
    }
    (a, b)
}
