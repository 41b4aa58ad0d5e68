//! Regression basis functions `ψ(x)` of the Longstaff–Schwartz step, evaluated in the
//! normalized prices `x_i = S^i / S^i_0` of a position's underlying assets.

use crate::scenario::Basis;

/// A compiled basis: `ψ_0 = 1`, and `ψ_t = ψ_{parent[t]} * x_{var[t]}` for `t >= 1`, the
/// monomials of total degree `<= degree` in graded order (degree 1 is the paper's linear
/// basis `(1, x_1, ..., x_d)`).
#[derive(Debug, Clone)]
pub struct BasisFunctions {
    /// Asset indices (into the market) of the variables.
    pub assets: Vec<usize>,
    /// `1 / S^i_0` of each variable.
    inv_spot: Vec<f64>,
    parent: Vec<usize>,
    var: Vec<usize>,
}

impl BasisFunctions {
    pub fn new(basis: Basis, assets: Vec<usize>, spots: &[f64]) -> Self {
        let degree = match basis {
            Basis::Linear => 1,
            Basis::Monomials(p) => p,
        };
        let d = assets.len();
        let mut parent = vec![0];
        let mut var = vec![0];
        // last variable used by each monomial, so that each monomial is built once
        let mut last = vec![0usize];
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
            inv_spot: assets.iter().map(|&i| 1.0 / spots[i]).collect(),
            assets,
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

    /// Writes `ψ(S)` (length [`len`](Self::len)) for the market prices `s` (all assets).
    /// `x` is scratch of length `assets.len()`.
    #[inline]
    pub fn eval(&self, s: &[f64], x: &mut [f64], psi: &mut [f64]) {
        for (k, &i) in self.assets.iter().enumerate() {
            x[k] = s[i] * self.inv_spot[k];
        }
        psi[0] = 1.0;
        for t in 1..self.parent.len() {
            psi[t] = psi[self.parent[t]] * x[self.var[t]];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_binomial_counts() {
        for d in 1..5 {
            for p in 1..4 {
                let b = BasisFunctions::new(Basis::Monomials(p), (0..d).collect(), &vec![1.0; d]);
                assert_eq!(b.len(), Basis::Monomials(p).size(d), "d={d} p={p}");
            }
            let b = BasisFunctions::new(Basis::Linear, (0..d).collect(), &vec![1.0; d]);
            assert_eq!(b.len(), d + 1);
        }
    }

    #[test]
    fn monomials_of_two_variables() {
        let b = BasisFunctions::new(Basis::Monomials(2), vec![0, 1], &[2.0, 4.0]);
        let mut psi = vec![0.0; b.len()];
        let mut x = vec![0.0; 2];
        b.eval(&[4.0, 12.0], &mut x, &mut psi); // x = (2, 3)
        assert_eq!(psi, vec![1.0, 2.0, 3.0, 4.0, 6.0, 9.0]);
    }
}
