//! Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror & Shaw 2011,
//! "Parallel random numbers: as easy as 1, 2, 3") and Box–Muller normals.
//!
//! Every normal draw of the simulation is a pure function of
//! `(seed, outer path, date, inner path, draw index)`, so results are bitwise identical
//! for any number of threads and can be reproduced draw for draw by a GPU kernel.
//!
//! Counter layout (four 32-bit words): `[block, inner_path, date, outer_path]`, where
//! `inner_path = OUTER_STREAM` for the outer path itself, and `block` counts the Philox
//! blocks used so far in that stream. The key is the 64-bit seed split in two words.

/// `inner_path` word of the stream of an outer path (as opposed to its inner paths).
pub const OUTER_STREAM: u32 = u32::MAX;

const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

/// One Philox4x32-10 block: 10 rounds of the bijection keyed by `key`.
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        let (hi0, lo0) = mulhilo(PHILOX_M0, c[0]);
        let (hi1, lo1) = mulhilo(PHILOX_M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// A uniform in the open interval (0, 1) from 32 random bits: `(u + 0.5) / 2^32`.
#[inline(always)]
pub fn uniform_open(u: u32) -> f64 {
    (u as f64 + 0.5) * (1.0 / 4_294_967_296.0)
}

/// Two independent standard normals from two uniforms in (0, 1) (Box–Muller).
#[inline(always)]
pub fn box_muller(u1: f64, u2: f64) -> (f64, f64) {
    let r = (-2.0 * u1.ln()).sqrt();
    let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
    (r * c, r * s)
}

/// The normal stream of one (outer path, date, inner path) triple.
#[derive(Debug, Clone, Copy)]
pub struct NormalStream {
    key: [u32; 2],
    outer_path: u32,
    date: u32,
    inner_path: u32,
}

impl NormalStream {
    pub fn new(seed: u64, outer_path: u32, date: u32, inner_path: u32) -> Self {
        Self {
            key: [seed as u32, (seed >> 32) as u32],
            outer_path,
            date,
            inner_path,
        }
    }

    /// Fills `z` with the standard normals of blocks `first_block..`: four normals per
    /// Philox block, in order; the last block's surplus is discarded. Returns the number
    /// of blocks used (`ceil(z.len() / 4)`).
    #[inline]
    pub fn fill(&self, first_block: u32, z: &mut [f64]) -> u32 {
        let mut block = first_block;
        for chunk in z.chunks_mut(4) {
            let r = philox4x32_10(
                [block, self.inner_path, self.date, self.outer_path],
                self.key,
            );
            let (z0, z1) = box_muller(uniform_open(r[0]), uniform_open(r[1]));
            let (z2, z3) = box_muller(uniform_open(r[2]), uniform_open(r[3]));
            let all = [z0, z1, z2, z3];
            chunk.copy_from_slice(&all[..chunk.len()]);
            block += 1;
        }
        block - first_block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors published with Random123 (`kat_vectors`, philox4x32_10).
    #[test]
    fn philox_known_answers() {
        assert_eq!(
            philox4x32_10([0, 0, 0, 0], [0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn normals_have_unit_moments() {
        let s = NormalStream::new(7, 3, 1, 2);
        let mut z = vec![0.0; 400_000];
        s.fill(0, &mut z);
        let m = z.iter().sum::<f64>() / z.len() as f64;
        let v = z.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / z.len() as f64;
        // standard errors: 1/sqrt(N) = 0.0016 for the mean, sqrt(2/N) = 0.0022 for the variance
        assert!(m.abs() < 5.0 * 0.0016, "mean {m}");
        assert!((v - 1.0).abs() < 5.0 * 0.0022, "variance {v}");
    }
}
