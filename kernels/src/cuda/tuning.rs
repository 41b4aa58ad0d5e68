//! Tunables of the GPU kernels: the number of communicating threads `n*` per system
//! (the paper's Fig. 5, measured here on an H100), and the shared-memory layout.

/// `n*` of the hybrid `L D L^T` for size `n` (Algorithm 1): the number of threads
/// that share one system. Measured on one H100 SXM (132 SMs) with batch 2^20
/// (2^18-2^19 for n >= 48) by `bench_solvers` over n* in {2, 4, 8, 16, 32, 64, n}:
/// n = 4, 8, 16, 30, 32, 48, 64 in the first rounds, then n = 10, 12, ..., 28, 29, 30,
/// 31, 32 again in round 6 of benches/RESULTS.md, "L D L^T register cap re-measured"
/// (the register cap removed for f64 n > 8). Sizes between the
/// measured ones take the value of the next measured size. The paper's rule
/// (n* ~ n/2 below 40, ~ n above) does not hold on the H100: with rows in registers,
/// n* ~ n/4 to n/2 wins below 32 (f32: 4 up to n = 22, then 4 or 8).
pub fn ldlt_hybrid_nstar(n: usize, f64: bool) -> usize {
    let nstar = match (n, f64) {
        (0..=4, _) => 2,
        (5..=16, _) => 4,
        (17..=24, true) => 8,
        (25..=32, true) => 16,
        (17..=22, false) => 4,
        (23..=24, false) => 8,
        (25..=26, false) => 4,
        (27..=32, false) => 8,
        (33..=48, true) => 32,
        (33..=48, false) => 16,
        (_, true) => 64,
        (_, false) => 32,
    };
    nstar.min(n.max(1))
}

/// Four-byte registers per thread that the rows of the hybrid `L D L^T` occupy:
/// slot `s` holds row entries `0..min(n, (s+1) n*)`. Above about 160 the kernel
/// spills; the `n*` sweep of the benchmark skips such configurations.
pub fn ldlt_row_registers(n: usize, nstar: usize, elem_bytes: usize) -> usize {
    let slots = n.div_ceil(nstar.max(1));
    (0..slots).map(|s| n.min((s + 1) * nstar)).sum::<usize>() * elem_bytes / 4
}

/// Four-byte registers per thread that the full rows of Householder + PCR occupy
/// (`ceil(n / n*) * n` entries); above about 128 the kernel spills.
pub fn householder_row_registers(n: usize, nstar: usize, elem_bytes: usize) -> usize {
    n.div_ceil(nstar.max(1)) * n * elem_bytes / 4
}

/// `n*` of the Householder + PCR kernel for size `n` (threads per system), measured
/// like [`ldlt_hybrid_nstar`] over n* in {4, 8, 16, 32, 64} (configurations whose rows
/// do not fit in registers excluded), last in round 8 of benches/RESULTS.md with one
/// tile per block: f64 n = 16 n* = 4 (515 against 468 M/s at n* = 8), f32 n = 32 n* = 16
/// (152 against 106 at n* = 8); f64 30 <= n <= 32 n* = 16 with the rolled step loop of
/// round 9 (`HH_ROLL`, 168 registers, 12 warps/SM: n = 30 76.0 against 66.4 unrolled at
/// n* = 32 and 57.6 rolled at n* = 32); f64 17 <= n <= 21 n* = 8, up to the largest size
/// whose three rows per thread fit (eleventh session, shuffle sums: n = 17 323.5 against
/// 200.8 M/s at n* = 16, n = 19 227.8 against 176.2, n = 21 205.1 against 124.2; with the
/// tensor-core sums 326-212 M/s); f32 n* = 4 up to n = 20 and 8 for 21 <= n <= 24
/// (eleventh session: n = 17 692 against 321 M/s at n* = 16, n = 20 581 against 272,
/// n = 21 408 against 252, n = 24 353 against 203; n* = 16 from n = 25, 179 against 145
/// at n* = 8, except n = 27 and 28 where n* = 8 was 6-9% faster, left out of the table).
/// Sizes between measured ones take the value of a measured neighbour.
pub fn householder_nstar(n: usize, f64: bool) -> usize {
    let nstar = match (n, f64) {
        (0..=16, true) => 4,
        (17..=21, true) => 8,
        (22..=32, true) => 16,
        (_, true) => 64,
        (0..=20, false) => 4,
        (21..=24, false) => 8,
        (25..=32, false) => 16,
        (33..=48, false) => 32,
        (_, false) => 64,
    };
    nstar.min(n.max(1).next_power_of_two()).max(1)
}

/// Width of the lane segment of a group of `nstar` threads (next power of two; 64 for
/// `nstar > 32`, where one group is one block of 64 threads).
pub fn group_width(nstar: usize) -> usize {
    if nstar > 32 {
        64
    } else {
        nstar.next_power_of_two()
    }
}

/// Systems per warp for `nstar` threads per system.
pub fn systems_per_warp(nstar: usize) -> usize {
    let gw = group_width(nstar);
    if gw >= 32 {
        1
    } else {
        32 / gw
    }
}

/// Shared-memory elements per system, padded so that the systems of one warp start in
/// different banks and on 16-byte boundaries: with `spw` systems per warp, consecutive
/// systems are offset by `max(32 / spw, 4)` four-byte words modulo 32, so that their
/// threads' simultaneous accesses to the same relative entry do not collide and
/// 16-byte vector loads stay aligned.
pub fn padded_stride(elems: usize, elem_bytes: usize, spw: usize) -> usize {
    let words_per_elem = elem_bytes / 4;
    let target = (32 / spw.max(1)).max(4) % 32;
    let mut s = elems;
    while (s * words_per_elem) % 32 != target {
        s += 1;
    }
    s
}

/// Shared-memory elements per system of the `L D L^T` group kernel (`cuda/ldlt.cu`):
/// two buffers of `max(packed A, W)` entries that swap roles every system (the
/// current `A`; `W` row-major with rows padded to 16 bytes, whose buffer receives the
/// next system's `A` once the back substitution is done), two vectors and two buffers
/// of `b`.
pub fn ldlt_group_elems(n: usize, elem_bytes: usize) -> usize {
    let vec = 16 / elem_bytes;
    let round = |v: usize| v.div_ceil(vec) * vec;
    let w_size: usize = (0..n).map(|j| round(j + 1)).sum();
    2 * round(n * (n + 1) / 2).max(w_size) + 4 * n
}

/// Whether the Householder + PCR kernel runs one tile of systems per block with one
/// shared buffer of packed `A` (`true`), or as persistent blocks with two buffers, the
/// next tile's copy overlapping this one's work (`false`). One tile per block frees the
/// registers that the persistent loop keeps for its loop-invariant addresses (f64
/// n = 30: n* = 32 254 -> 122 registers, 8 -> 16 warps/SM; f32 n* = 16 163 -> 128,
/// 12 -> 16) and half of the packed-`A` shared memory (benches/RESULTS.md, "GPU
/// Householder + PCR, round 8"). The kernel tells the two apart by its shared stride
/// ([`householder_elems`]), which is unambiguous for `n >= 8` only; below that the
/// persistent kernel stays.
pub fn householder_single_buffer(n: usize, _f64: bool) -> bool {
    n >= 8
}

/// Shared-memory elements per system of the Householder + PCR kernel: one or two
/// buffers of packed `A` ([`householder_single_buffer`]), 14 vectors of length `n` and
/// one or two buffers of `b`.
pub fn householder_elems(n: usize, f64: bool) -> usize {
    if householder_single_buffer(n, f64) {
        n * (n + 1) / 2 + 16 * n
    } else {
        n * (n + 1) + 16 * n
    }
}

/// Whether `householder_pcr` runs its rolled step loop (`HH_ROLL > 0` by default in
/// `cuda/householder_pcr.cu`: f64, n* = 16, 30 <= n <= 32). The host then prefers blocks
/// of 4 warps on ties of resident systems (n = 30: 76.1 -> 77.8 M systems/s on the H100,
/// benches/RESULTS.md, Householder + PCR round 13; no gain elsewhere, round 14).
pub fn householder_rolled(n: usize, f64: bool, nstar: usize) -> bool {
    f64 && nstar == 16 && (30..=32).contains(&n)
}

/// Shared-memory elements per thread of the one-thread-per-system `L D L^T`.
pub fn ldlt_simd_elems(n: usize) -> usize {
    n * (n + 1) / 2 + n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_offset_banks() {
        for n in 1..=64 {
            for (eb, spw) in [
                (4, 1),
                (8, 1),
                (4, 2),
                (4, 4),
                (8, 2),
                (8, 4),
                (8, 8),
                (4, 16),
                (8, 32),
            ] {
                let e = ldlt_group_elems(n, eb);
                let s = padded_stride(e, eb, spw);
                assert!(s >= e && s < e + 32);
                let w = s * eb / 4;
                assert_eq!(w % 32, (32 / spw).max(4) % 32);
                assert_eq!((s * eb) % 16, 0);
            }
        }
    }

    #[test]
    fn householder_buffer_modes_are_told_apart() {
        // The kernel reads one buffer from SYS_STRIDE < n (n + 1) + 16 n.
        for n in 1..=64 {
            for f64 in [false, true] {
                for spw in [1, 2, 4, 8] {
                    let eb = if f64 { 8 } else { 4 };
                    let stride = padded_stride(householder_elems(n, f64), eb, spw);
                    let single = stride < n * (n + 1) + 16 * n;
                    assert_eq!(single, householder_single_buffer(n, f64), "n = {n}");
                }
            }
        }
    }

    #[test]
    fn group_geometry() {
        assert_eq!(systems_per_warp(8), 4);
        assert_eq!(systems_per_warp(10), 2);
        assert_eq!(systems_per_warp(30), 1);
        assert_eq!(systems_per_warp(64), 1);
        assert_eq!(group_width(33), 64);
        for n in 1..=64 {
            for f64 in [false, true] {
                assert!((1..=64).contains(&ldlt_hybrid_nstar(n, f64)));
                assert!((1..=64).contains(&householder_nstar(n, f64)));
            }
        }
    }
}
