//! Regression basis functions `ψ(x)` of the Longstaff–Schwartz step, evaluated in the
//! normalized prices `x_i = S^i_h / S^i_0` of a position's underlying assets, `S^i_h` the
//! price's high word (`cva_kernels::basis::high_word`: the low 32 bits of its significand
//! cleared, a relative change below `2^-20`).

use crate::scenario::Basis;
use cva_kernels::basis::BasisTables;

/// A compiled basis: `ψ_0 = 1`, and `ψ_t = ψ_{parent[t]} * x_{var[t]}` for `t >= 1`, the
/// monomials of total degree `<= degree` in graded order (degree 1 is the paper's linear
/// basis `(1, x_1, ..., x_d)`). The tables are the kernel crate's, which the GPU
/// regression kernels read too.
#[derive(Debug, Clone)]
pub struct BasisFunctions {
    tables: BasisTables,
}

impl BasisFunctions {
    pub fn new(basis: Basis, assets: Vec<usize>, spots: &[f64]) -> Self {
        let degree = match basis {
            Basis::Linear => 1,
            Basis::Monomials(p) => p as usize,
        };
        Self {
            tables: BasisTables::monomials(degree, &assets, spots),
        }
    }

    /// Asset indices (into the market) of the variables.
    pub fn assets(&self) -> &[usize] {
        &self.tables.assets
    }

    /// The tables, for the GPU kernels.
    pub fn tables(&self) -> &BasisTables {
        &self.tables
    }

    /// Number of basis functions `n`.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Writes `ψ(S)` (length [`len`](Self::len)) for the market prices `s` (all assets).
    /// `x` is scratch of length `assets().len()`.
    #[inline]
    pub fn eval(&self, s: &[f64], x: &mut [f64], psi: &mut [f64]) {
        self.tables.eval(s, x, psi);
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

    #[test]
    fn basis_reads_the_high_word_of_each_price() {
        let b = BasisFunctions::new(Basis::Monomials(2), vec![0, 1], &[1.0, 2.0]);
        let mut psi = vec![0.0; b.len()];
        let mut x = vec![0.0; 2];
        // 1 + 2^-40 and 3 - 2^-50 differ from their high words 1 and 3 - 2^-19 only in the
        // low 32 bits of the significand.
        let (s0, s1) = (1.0 + 2f64.powi(-40), 3.0 - 2f64.powi(-50));
        b.eval(&[s0, s1], &mut x, &mut psi);
        let (h0, h1) = (1.0, (3.0 - 2f64.powi(-19)) * 0.5);
        assert_eq!(psi, vec![1.0, h0, h1, h0 * h0, h0 * h1, h1 * h1]);
        assert_ne!(psi[1], s0);
    }
}
