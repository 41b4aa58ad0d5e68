//! Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror & Shaw 2011,
//! "Parallel random numbers: as easy as 1, 2, 3") and Box–Muller normals in single
//! precision ([`box_muller`]).
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

// Box–Muller in single precision. Coefficients as f32 bit patterns (Rust has no hex
// float literals); the kernels (`kernels/cuda/paths.cu`) carry the same values as C
// hexadecimal literals.
/// 2^-32 and 2^-33: `(w + 1/2) 2^-32 = w 2^-32 + 2^-33`.
const TWO_M32: f32 = f32::from_bits(0x2f80_0000);
const TWO_M33: f32 = f32::from_bits(0x2f00_0000);
/// `ln(1 + f) = f + f^2 P(f)` on `[sqrt(1/2) - 1, sqrt(2) - 1]`: `P` of degree 8, a
/// Chebyshev fit (mpmath, 40 digits) rounded to f32, highest degree first.
const LN_P: [f32; 9] = [
    f32::from_bits(0xbd9d_27fb), // -0x1.3a4ff6p-4
    f32::from_bits(0x3e02_47b9), // 0x1.048f72p-3
    f32::from_bits(0xbe06_6d19), // -0x1.0cda32p-3
    f32::from_bits(0x3e11_752d), // 0x1.22ea5ap-3
    f32::from_bits(0xbe2a_41c1), // -0x1.548382p-3
    f32::from_bits(0x3e4c_d009), // 0x1.99a012p-3
    f32::from_bits(0xbe80_0106), // -0x1.00020cp-2
    f32::from_bits(0x3eaa_aaaa), // 0x1.555554p-2
    f32::from_bits(0xbeff_ffff), // -0x1.fffffep-2
];
/// ln 2 in two parts: f32(ln 2) = 0x1.62e430p-1 and f32(ln 2 - that) = -0x1.05c610p-29.
const LN2_HI: f32 = f32::from_bits(0x3f31_7218);
const LN2_LO: f32 = f32::from_bits(0xb102_e308);
/// `sin(pi f / 2) = f S(f^2)` and `cos(pi f / 2) = 1 + f^2 C(f^2)` on `|f| <= 1/2`: `S`
/// and `C` of degree 3 (Chebyshev fits in f^2, rounded to f32), highest degree first.
const SIN_S: [f32; 4] = [
    f32::from_bits(0xbb96_cda0), // -0x1.2d9b40p-8
    f32::from_bits(0x3da3_2f62), // 0x1.465ec4p-4
    f32::from_bits(0xbf25_5ddd), // -0x1.4abbbap-1
    f32::from_bits(0x3fc9_0fdb), // 0x1.921fb6p+0
];
const COS_C: [f32; 3] = [
    f32::from_bits(0xbca7_2f03), // -0x1.4e5e06p-6
    f32::from_bits(0x3e81_d7ac), // 0x1.03af58p-2
    f32::from_bits(0xbf9d_e9c9), // -0x1.3bd392p+0
];

/// `ln u` for the uniform `u = (w + 1/2) 2^-32` in (0, 1), in single precision. Below
/// `sqrt(1/2)` (`w < 0xB504F334`): `u = 2^k m` with `m` in `[sqrt(1/2), sqrt(2))`,
/// `f = m - 1` (exact); above it `f = -v` with `v = 1 - u = (!w + 1/2) 2^-32`, formed
/// from the word because `u` itself, rounded to f32, would lose the low bits of `1 - u`.
/// Then `ln(1 + f) = f + f^2 P(f)` and `+ k ln 2` (two parts).
#[inline(always)]
fn ln_uniform(w: u32) -> f32 {
    let (k, f) = if w >= 0xB504_F334 {
        (0.0, -((!w) as f32).mul_add(TWO_M32, TWO_M33))
    } else {
        let u = (w as f32).mul_add(TWO_M32, TWO_M33);
        let ix = (u.to_bits() as i32).wrapping_add(0x3f80_0000 - 0x3f35_04f3);
        let m = f32::from_bits(((ix & 0x007f_ffff) + 0x3f35_04f3) as u32);
        (((ix >> 23) - 0x7f) as f32, m - 1.0)
    };
    let mut p = LN_P[0];
    for &c in &LN_P[1..] {
        p = p.mul_add(f, c);
    }
    let l = (f * f).mul_add(p, f);
    k.mul_add(LN2_HI, k.mul_add(LN2_LO, l))
}

/// Two independent standard normals from two random words (Box–Muller in single
/// precision): `(r cos a, r sin a)` with `r = sqrt(-2 ln u1)`, `u1 = (w1 + 1/2) 2^-32`
/// and `a = 2 pi (w2 + 1/2) 2^-32`, as f64 values of f32 results.
///
/// The angle comes from the word: quadrant `q = (w2 + 2^29) >> 30` (mod 4) and
/// `a = q pi/2 + pi f / 2` with `f = (d + 1/2) 2^-30` in `[-1/2, 1/2]`, `d = w2 - q 2^30`
/// as a signed integer; `sin`/`cos` of `pi f / 2` by the polynomials above, the quadrant
/// swapping them and setting the signs. Every operation is an IEEE-rounded f32 `+`, `*`,
/// fused multiply-add or square root, so the GPU's path kernels (`box_muller_f32` in
/// `kernels/cuda/paths.cu`) draw the same bits. Against the double-precision formula
/// (`f64::ln`, `sin_cos`) on the same words the normals are within 8e-7 (a few f32 ulps;
/// `normals_are_close_to_double_precision_box_muller`). Twentieth session: the path
/// kernel's FP64 work halves (`benches/RESULTS.md`).
#[inline(always)]
pub fn box_muller(w1: u32, w2: u32) -> (f64, f64) {
    let r = (-2.0 * ln_uniform(w1)).sqrt();
    let q = w2.wrapping_add(0x2000_0000) >> 30;
    let d = w2.wrapping_sub(q << 30) as i32;
    let f = (d as f32).mul_add(1.0 / 1_073_741_824.0, 1.0 / 2_147_483_648.0);
    let z = f * f;
    let mut ps = SIN_S[0];
    for &c in &SIN_S[1..] {
        ps = ps.mul_add(z, c);
    }
    let sr = f * ps;
    let mut pc = COS_C[0];
    for &c in &COS_C[1..] {
        pc = pc.mul_add(z, c);
    }
    let cr = pc.mul_add(z, 1.0);
    let (s, c) = if q & 1 == 1 { (cr, sr) } else { (sr, cr) };
    // Sign flips of the quadrant: sin < 0 for q = 2, 3; cos < 0 for q = 1, 2.
    let s = f32::from_bits(s.to_bits() ^ ((q & 2) << 30));
    let c = f32::from_bits(c.to_bits() ^ ((q.wrapping_add(1) & 2) << 30));
    (f64::from(r * c), f64::from(r * s))
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
    ///
    /// On x86-64 CPUs with FMA the loop is compiled for it, so that [`box_muller`]'s fused
    /// multiply-adds are instructions rather than calls to `fmaf` (the same bits either
    /// way: `mul_add` is the correctly rounded fused operation in both).
    #[inline]
    pub fn fill(&self, first_block: u32, z: &mut [f64]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports FMA (checked just above), the only feature that
            // `fill_fma` is compiled for.
            return unsafe { self.fill_fma(first_block, z) };
        }
        self.fill_any(first_block, z)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn fill_fma(&self, first_block: u32, z: &mut [f64]) -> u32 {
        self.fill_any(first_block, z)
    }

    #[inline(always)]
    fn fill_any(&self, first_block: u32, z: &mut [f64]) -> u32 {
        let mut block = first_block;
        for chunk in z.chunks_mut(4) {
            let r = philox4x32_10(
                [block, self.inner_path, self.date, self.outer_path],
                self.key,
            );
            let (z0, z1) = box_muller(r[0], r[1]);
            let (z2, z3) = box_muller(r[2], r[3]);
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

    /// The double-precision Box–Muller transform of the same words (std's `ln`,
    /// `sqrt`, `sin_cos`), the reference the single-precision one is checked against.
    fn box_muller_f64(w1: u32, w2: u32) -> (f64, f64) {
        let u = |w: u32| (w as f64 + 0.5) / 4_294_967_296.0;
        let r = (-2.0 * u(w1).ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u(w2)).sin_cos();
        (r * c, r * s)
    }

    /// Within a few f32 ulps of the double-precision transform: on 2^21 pairs of words
    /// spread over all 2^32 and on named words (the extremes, the branch point of
    /// `ln_uniform` and its neighbours, the quadrant boundaries of the angle and theirs).
    #[test]
    fn normals_are_close_to_double_precision_box_muller() {
        let mut w1s: Vec<u32> = (0..1u64 << 21)
            .map(|k| (k * 0x9E37_79B9 % (1 << 32)) as u32)
            .collect();
        let mut w2s: Vec<u32> = w1s
            .iter()
            .map(|w| w.rotate_left(13) ^ 0x5bd1_e995)
            .collect();
        let named1 = [
            0,
            1,
            2,
            0xB504_F333,
            0xB504_F334,
            0xB504_F335,
            1 << 31,
            u32::MAX - 1,
            u32::MAX,
        ];
        let mut named2 = vec![0, u32::MAX];
        for q in 0..4u32 {
            for b in [q << 30, (q << 30) | (1 << 29)] {
                named2.extend([b.wrapping_sub(1), b, b.wrapping_add(1)]);
            }
        }
        for &a in &named1 {
            for &b in &named2 {
                w1s.push(a);
                w2s.push(b);
            }
        }
        let (mut abs, mut rel) = (0.0f64, 0.0f64);
        for (&w1, &w2) in w1s.iter().zip(&w2s) {
            let (a0, a1) = box_muller(w1, w2);
            let (b0, b1) = box_muller_f64(w1, w2);
            for (a, b) in [(a0, b0), (a1, b1)] {
                assert!(
                    a.is_finite() && a.abs() < 6.772,
                    "normal {a} for words {w1:#x}, {w2:#x}"
                );
                abs = abs.max((a - b).abs());
                if b.abs() >= 1e-3 {
                    rel = rel.max((a - b).abs() / b.abs());
                }
            }
        }
        println!("largest difference {abs:e}, relative {rel:e}");
        assert!(abs <= 1e-6, "largest difference {abs:e}");
        assert!(rel <= 5e-7, "largest relative difference {rel:e}");
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
