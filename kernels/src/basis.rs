//! Regression basis tables of the Longstaff–Schwartz step, shared by the CPU engine and
//! the GPU regression kernels.

/// The state a basis function reads: `x` with the low 32 bits of its significand cleared
/// (its high word: sign, exponent and the top 20 bits of the significand), so
/// `x_h = x (1 - θ)` with `0 <= θ < 2^-20` for a normal `x`.
///
/// The regression basis is a function of these truncated prices on both backends. The
/// GPU stores the inner states' high words in a plane of their own (`cuda/prelude.cu`),
/// so the regression build and the exercise read 4 bytes per price instead of 8. The
/// payoffs and cash flows use the full prices.
#[inline]
pub fn high_word(x: f64) -> f64 {
    f64::from_bits(x.to_bits() & 0xFFFF_FFFF_0000_0000)
}

/// Regression basis: `ψ_0 = 1`, `ψ_t = ψ_{parent[t]} x_{var[t]}` with
/// `x_k = high_word(S^{assets[k]}) * inv_spot[k]` ([`high_word`]; the app's
/// `BasisFunctions`).
#[derive(Debug, Clone, PartialEq)]
pub struct BasisTables {
    /// Market asset index of each variable.
    pub assets: Vec<usize>,
    /// `1 / S_0` of each variable.
    pub inv_spot: Vec<f64>,
    pub parent: Vec<usize>,
    pub var: Vec<usize>,
}

impl BasisTables {
    /// The monomials of total degree `<= degree` in the variables `x_k = S^{assets[k]} /
    /// S_0^{assets[k]}`, in graded order, each built once from its parent (degree 1:
    /// the linear basis `1, x_1, ..., x_d`). Same tables as the app's basis.
    pub fn monomials(degree: usize, assets: &[usize], spots: &[f64]) -> Self {
        let d = assets.len();
        let (mut parent, mut var, mut last) = (vec![0], vec![0], vec![0usize]);
        let mut prev_start = 0;
        for _ in 0..degree {
            let prev_end = parent.len();
            for t in prev_start..prev_end {
                let from = if t == 0 { 0 } else { last[t] };
                for v in from..d {
                    parent.push(t);
                    var.push(v);
                    last.push(v);
                }
            }
            prev_start = prev_end;
        }
        Self {
            assets: assets.to_vec(),
            inv_spot: assets.iter().map(|&i| 1.0 / spots[i]).collect(),
            parent,
            var,
        }
    }

    /// Number of basis functions `n`.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// Writes `ψ(S)` (length [`len`](Self::len)) for the market prices `s` (all assets),
    /// each price read through [`high_word`]; `x` is scratch of length `assets.len()`.
    #[inline]
    pub fn eval(&self, s: &[f64], x: &mut [f64], psi: &mut [f64]) {
        for (k, &i) in self.assets.iter().enumerate() {
            x[k] = high_word(s[i]) * self.inv_spot[k];
        }
        psi[0] = 1.0;
        for t in 1..self.parent.len() {
            psi[t] = psi[self.parent[t]] * x[self.var[t]];
        }
    }

    /// For each basis function, the (asset, 1/S_0) factors from the root, padded with
    /// (-1, 0) to the longest chain `deg` (at least 1). Returns (assets, inv, deg).
    pub(crate) fn chains(&self) -> (Vec<i32>, Vec<f64>, usize) {
        let n = self.len();
        let mut chains: Vec<Vec<usize>> = Vec::with_capacity(n);
        for t in 0..n {
            let mut c = Vec::new();
            let mut u = t;
            while u != 0 {
                c.push(self.var[u]);
                u = self.parent[u];
            }
            c.reverse();
            chains.push(c);
        }
        let deg = chains.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut asset = vec![-1i32; n * deg];
        let mut inv = vec![0.0; n * deg];
        for (t, c) in chains.iter().enumerate() {
            for (k, &v) in c.iter().enumerate() {
                asset[t * deg + k] = self.assets[v] as i32;
                inv[t * deg + k] = self.inv_spot[v];
            }
        }
        (asset, inv, deg)
    }
}
