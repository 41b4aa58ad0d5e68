// Batched solve of small symmetric systems by Householder tridiagonalization,
// A = Q T Q^T, parallel cyclic reduction for T z = Q^T b, and x = Q z
// (Abbas-Turki & Graillat 2016, Section 4: Algorithm 2 and Fig. 9), with the residual
// and per-system status computed on the device.
//
// NSTAR communicating threads per system (a power of two, or 64 for n > 32); thread t
// owns rows t, t + NSTAR, ... of the full symmetric matrix in registers.
// Step i = 0..n-2 (LAPACK dsytd2, uplo = 'L'): the reflector H_i = I - tau v v^T with
// v_{i+1} = 1 annihilates A(i+2:n, i) (dlarfg); then p = tau A22 v,
// w = p - (tau/2)(p^T v) v, A22 -= v w^T + w v^T, and b <- H_i b (so that b ends as
// Q^T b). v stays in the registers of column i; Q is never formed: x = Q z is
// applied as x = H_0 (H_1 (... H_{n-2} z)).
// PCR: ceil(log2 n) steps; step with stride s replaces equation i by a combination of
// equations i - s, i, i + s (eq. (10)), so that after the step equation i couples
// only to i +- 2s. Equations with i +- s outside 0..n-1 simply have no such neighbour:
// this is the paper's permutation of Fig. 9 (the equations of one sub-system are
// those with equal i mod 2s, kept at their index instead of being moved together),
// so any n works without zero padding.

// Each module has two entries: the batch's systems (householder_pcr(A, B, X, rep,
// batch)), and the listed ones (householder_pcr_listed(A, B, X, rep, batch, idx, count,
// k0): the systems idx[k0 + p] for p < min(batch, *count - k0), X and rep written at the
// system's own index), see householder_body.
// HH_TRIDIAG_OUT 1 (set by the host for the module `HouseholderTridiag`): the entries are
// householder_tridiag(A, B, TRI, batch) and householder_tridiag_listed(A, B, TRI, batch,
// idx, count, k0), which reduces P A P (P the reversal
// permutation, so that its steps are those of the CPU's last-row-first
// householder_tridiagonalize on A), stops after the tridiagonalization and writes each
// system's record (d, e, tau, Q^T b, the reflectors of P A P; common.cu's TRI_STRIDE),
// at its position p, for divide and conquer's second kernel (stedc.cu) instead of running PCR.
#ifndef HH_TRIDIAG_OUT
#define HH_TRIDIAG_OUT 0
#endif

// HH_FMA 1: the dot products, the rank-2 update and the reflector applications use
// fused multiply-adds (one rounding per term instead of two; half the FP64
// instructions of the update; results differ from the unfused kernel in the last
// bits). 0: separate * and +, as the CPU reference.
#ifndef HH_FMA
#define HH_FMA 1
#endif
// acc + p * q.
__device__ __forceinline__ real hh_add_mul(real acc, real p, real q) {
#if HH_FMA
    return fma(p, q, acc);
#else
    return acc + p * q;
#endif
}

// HH_RED1 1: reductions of a single value shuffle that value only (the norm of the
// column below the subdiagonal, the reflector dot products of x = Q z); 0: they ride
// as the first of a pair with an unused second (twice the shuffles).
#ifndef HH_RED1
#define HH_RED1 1
#endif
// HH_TC_SUM 1 (f64, groups of 8, 16 or 32 threads, sm_80 or later): the group sums run
// on the FP64 tensor cores (common.cu's tc_segment_sum, tc_segment_sum2) instead of
// shuffle trees: results differ in the last bits. Latency on the H100 (microbenchmark,
// benches/RESULTS.md, eleventh session): a 16-thread sum of two values 150 -> 109
// cycles. Default: f64 24 <= n <= 32, where it won at every n* measured (H100, batch
// 2^20, M systems/s, shuffles -> tensor cores: n = 24 n* = 16 109.7 -> 116.5, n = 28
// 75.2 -> 97.6, n = 30 n* = 16 81.1-81.4 -> 83.4-83.6, n* = 32 65.2 -> 72.2-72.8,
// n = 31 79.5 -> 81.6-82.2, n = 32 71.0 -> 74.0-74.4, and n = 25, 27, 29 +7.5%, +13%,
// +27%), and at 17 <= n <= 23 with the host's n* (tuning::householder_nstar: 8 up to
// n = 21, then 16): n = 17 323.5 -> 326.1, 18 242.6 -> 262.1, 19 227.8 -> 239.8, 20
// 216.4 -> 230.6, 21 205.1 -> 211.8, 22 143.2 -> 146.1, 23 133.4 -> 140.9. Off elsewhere:
// other n* at n <= 23 lost (n = 20 n* = 16 166.6 -> 144.4, n = 16 n* = 8 478 -> 430: the
// fragments cost registers and warps).
#ifndef HH_TC_SUM
#define HH_TC_SUM \
    (REAL_F64 && ((N >= 24 && N <= 32) || (N >= 17 && N <= 23 && NSTAR == (N <= 21 ? 8 : 16))))
#endif
#if HH_TC_SUM && REAL_F64 && NSTAR > 4 && NSTAR <= 32 && TC_SUMS
#define HH_TC 1
#else
#define HH_TC 0
#endif

// HH_SQRT1 1: beta = -sign(alpha) sqrt(alpha^2 + ||x||^2), one square root, as the CPU
// reference (`reduce_row`: g = sqrt(sigma + f f)); 0: sqrt of ||x||^2, then hypot.
#ifndef HH_SQRT1
#define HH_SQRT1 1
#endif
// HH_RSQ 1: dlarfg from one reciprocal square root and one reciprocal of a number in
// [1, 2], both short fixed sequences without a slow path: with nrm = ||(alpha, x)||,
// rs = 1 / nrm, beta = -sign(alpha) q rs (q = alpha^2 + ||x||^2),
// tau = (beta - alpha) / beta = 1 + |alpha| rs and 1 / (alpha - beta) = sign(alpha) rs / tau
// (a few ulps from the CPU's sqrt and divisions). 0: sqrt and two IEEE divisions (as
// the CPU reference; longer chain per step). Default: f64 only (f64 n = 30 n* = 16:
// 56.0 -> 64.9 M/s, H100); in f32 the kernel goes from 163 to 214 registers, 12 -> 8
// warps/SM, 132 -> 114 M/s (benches/RESULTS.md, round 7).
#ifndef HH_RSQ
#define HH_RSQ REAL_F64
#endif
// HH_P4 1: four interleaved partial sums per row in p = tau A22 v (0: two). Measured
// with HH_RSQ 1 (round 7, H100, f64 n = 30 n* = 16): 64.2 M/s against 64.9-65.2; off.
#ifndef HH_P4
#define HH_P4 0
#endif
// HH_SINGLE 1: one tile of systems per block (the host launches one block per tile),
// one shared buffer of packed A and b per system, copied in and waited for at the start;
// the copy latency is hidden by the other resident warps. Without the persistent loop
// the compiler no longer keeps loop-invariant addresses in registers across tiles (f64
// n = 30: n* = 16 254 -> 212 registers, n* = 32 254 -> 122; f32 n* = 16 163 -> 128).
// 0: persistent blocks with two buffers (the
// next tile's copy overlaps this one's work). The host chooses
// (`tuning::householder_single_buffer`) and sizes the shared stride accordingly: one
// buffer when SYS_STRIDE is below the two-buffer size n (n + 1) + 16 n.
#ifndef HH_SINGLE
#define HH_SINGLE (SYS_STRIDE < N * (N + 1) + 16 * N)
#endif
#if HH_SINGLE
#define HH_BUFS 1
#else
#define HH_BUFS 2
#endif
// HH_ROLL L > 0: the tridiagonalization runs as rolled loops (runtime step i) over phases
// of L steps; phase B (steps B..B+L-1) is compiled once, its per-row loops unrolled over
// the columns k >= B + 1 of the register rows (columns B+1..i multiplied by the zeros
// that v and w hold there), so the code holds ceil((n-1) / L) step bodies instead of
// n - 1 (f64 n = 30 n* = 16: 11.9k -> 5.7k SASS lines, 186 -> 89 KB). Column i is read
// from and v written into the register rows by selects over the L columns of the phase. Same arithmetic and order
// as the unrolled steps (the extra terms are exact zeros), up to the sign of zeros.
// 0: every step unrolled (straight-line code). Default: L = 2 for f64 n* = 16 with
// 30 <= n <= 32, together with the cap of 168 registers (12 warps/SM). The rolled steps
// first won in round 9 (L = 8: f64 n = 30 66.4 (n* = 32, unrolled) -> 76.0 M/s, n = 32
// 62.8 -> 68.7; H100, batch 2^20, benches/RESULTS.md). Elsewhere the unrolled code was as
// fast or faster: f64 n = 20 167.4 unrolled against 127.4 rolled, n = 24 108.7 against
// 101.5 (its code still fits), f64 n* = 32 at n = 30 (66.4 against 57.6), f64 n = 16 and
// 48, f32. The phase length, re-measured on the present kernel (thirtieth session, M
// systems/s at L = 8 / 4 / 3 / 2 / 1): n = 30 84.0 / 89.1 / 83.2 / 91.1 / 70.1, n = 31 (L = 4
// before) 82.8 / 82.8 / 84.9 / 85.8 / 52.2, n = 32 74.4 / 77.6 / 78.9 / 80.6 / 39.3. Fewer
// columns per select and fewer zero columns in the loops, against more step bodies
// (n = 30: 15.2k SASS lines at L = 2, 9.9k at L = 8).
#ifndef HH_ROLL
#if REAL_F64 && NSTAR == 16 && N >= 30 && N <= 32
#define HH_ROLL 2
#else
#define HH_ROLL 0
#endif
#endif

// HH_SPLIT 1 (with HH_ROLL > 0): the rolled step's rank-2 update in two halves around the
// group sum of p^T v and v^T b. With w = p + kk v (kk = -tau p^T v / 2),
// A - v w^T - w v^T = A - v p^T - (p + 2 kk v) v^T: p (zero on the rows r <= i) goes to the
// shared vector where w went, and after its barrier the half a(r, k) -= v_r p_k needs
// nothing from the sum, which is in flight meanwhile; the half a(r, k) -= w'_r v_k, with
// w'_r = p_r + 2 kk v_r, reads v_k published by v's barrier. No w barrier; the same FMAs
// and shared loads in two passes instead of one; results differ from the one-pass update
// in the last bits. 0: w formed after the sum, one pass. Default: f64 n = 30 and 31
// (thirtieth session, H100, batch 2^20, with L = 2: n = 30 91.1 -> 94.0 M/s, n = 31 85.8 ->
// 88.8); at n = 32 (v and column i in shared memory) it lost, 80.6 -> 78.6, and with L = 8
// at n = 30 too, 84.0 -> 82.0.
#ifndef HH_SPLIT
#define HH_SPLIT (HH_ROLL > 0 && N < 32)
#endif

// HH_VSH 1 (with HH_ROLL > 0, one buffer): v_i goes into the packed column i of the
// shared copy of A (rows i+1..n-1, v_{i+1} = 1) instead of into column i of the register
// rows (no per-step selects to write it); x = Q z is a rolled loop that reads v from
// there, and the original A is copied in again (cp.async, from L2 as a rule) for the
// residual once x = Q z is done. Same arithmetic as the register column.
// HH_COLSH 1 (with HH_ROLL > 0 and every phase inside one row slot, NSTAR a multiple of
// HH_ROLL): column i is read through shared memory from row i (A symmetric) instead of by
// selects over the phase's columns: the owner of row i stores A(i, k), k >= B, into sx
// (free until the PCR), every thread loads its rows' entries, alpha = A(i, i+1) is read
// there too (no local-memory pick of the row slot). The rank-2 update rounds A(r, k) and
// A(k, r) differently, so row i and column i differ in the last bits: results differ
// from the column-read kernel at rounding level.
// HH_RES_UNROLL u > 0: the residual's column loop unrolled u times (0: fully; same sums
// in the same order either way).
// Default: all three on the rolled kernel at n = 32 only. Measured on the rolled kernel
// (f64 n* = 16, H100, batch 2^20, benches/RESULTS.md "GPU Householder + PCR, round 10"):
// all three together f64 n = 32 68.7-69.1 -> 72.4-72.9 M/s, but n = 30 76.5-76.6 -> 73.0
// (each alone: n = 30 73.6-73.7), though the step loops execute 28% fewer instructions;
// not understood, so n = 30 and 31 keep the column-read kernel. Round 11: with the shared
// vectors moved to 16-byte alignment the n = 30 spills fell from 40 to 4 B and the loss
// went (75.4-76.1 against main's 76.0-76.4), but no gain: not taken (benches/RESULTS.md).
#if HH_ROLL > 0 && N == 32
#define HH_SHARED_V_DEFAULT 1
#define HH_RES_UNROLL_DEFAULT 5
#else
#define HH_SHARED_V_DEFAULT 0
#define HH_RES_UNROLL_DEFAULT 0
#endif
#ifndef HH_VSH
#define HH_VSH HH_SHARED_V_DEFAULT
#endif
#ifndef HH_COLSH
#define HH_COLSH HH_SHARED_V_DEFAULT
#endif
#ifndef HH_RES_UNROLL
#define HH_RES_UNROLL HH_RES_UNROLL_DEFAULT
#endif
#if HH_VSH && !(HH_ROLL > 0 && HH_SINGLE)
#error "HH_VSH needs the rolled steps (HH_ROLL > 0) and one buffer (HH_SINGLE)"
#endif

// HH_MAXREG: register cap per thread (`__maxnreg__`; 0: none). Warps per SM go by the
// registers of one SM sub-partition (16,384, a warp stays on one): up to 255 registers
// 8 warps/SM, 168 12, 128 16. The cap pays where it lifts 8 to 12 warps with few spills
// (H100, batch 2^20, benches/RESULTS.md round 8): f64 n* = 64 (n = 48: 8.9 -> 11.5 M/s,
// n = 64: 6.4 -> 8.0) and f32 n* = 32 with n > 32 (n = 48: 28.9 M/s against 21.7 at
// n* = 64). It does not at f64 n = 30 n* = 16 (192 B of spills: 61.5 against 63.5).
#ifndef HH_MAXREG
#if (REAL_F64 && NSTAR > 32) || (!REAL_F64 && NSTAR == 32 && N > 32) || (REAL_F64 && NSTAR == 16 && HH_ROLL > 0)
#define HH_MAXREG 168
#else
#define HH_MAXREG 0
#endif
#endif

#if HH_RSQ
__device__ __forceinline__ real hh_rsqrt(real q) {
#if REAL_F64
    return rsqrt(q);
#else
    return rsqrtf(q);
#endif
}
__device__ __forceinline__ real hh_rcp12(real d) {
#if REAL_F64
    return rcp_rn_fast_f64(d);
#else
    return rcp_rn_fast_f32(d);
#endif
}
#endif

// Sum over the group's threads of one value.
__device__ __forceinline__ void hh_group_sum1(real& a, real* scratch) {
#if HH_TC
    a = tc_segment_sum<GW>(a);
#elif HH_RED1 && NSTAR <= 32
#pragma unroll
    for (int off = GW / 2; off >= 1; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
#else
    real unused = 0;
    group_sum2(a, unused, scratch);
#endif
}

// Sums over the group's threads of two values.
__device__ __forceinline__ void hh_group_sum2(real& a, real& b, real* scratch) {
#if HH_TC
    tc_segment_sum2<GW>(a, b);
#else
    group_sum2(a, b, scratch);
#endif
}

// dlarfg: beta = -sign(alpha) ||(alpha, x)||, tau = (beta - alpha) / beta,
// v = (1, x / (alpha - beta)) with scal = 1 / (alpha - beta); xs = ||x||^2. A column
// whose x underflows is skipped (tau = 0, beta = alpha).
__device__ __forceinline__ void hh_dlarfg(real xs, real alpha, real& tau, real& beta, real& scal) {
    tau = 0;
    beta = alpha;
    scal = 0;
#if HH_RSQ
    if (xs > (real)0) {
        const real q = hh_add_mul(xs, alpha, alpha);
        const real rs = hh_rsqrt(q);
        beta = -copysign(q * rs, alpha);
        tau = hh_add_mul((real)1, fabs(alpha), rs);
        scal = copysign(rs * hh_rcp12(tau), alpha);
    }
#else
#if HH_SQRT1
    // sqrt(xs) >= REAL_MIN_POSITIVE for every xs > 0 (even the least subnormal).
    if (xs > (real)0) {
        beta = -copysign(sqrt(hh_add_mul(xs, alpha, alpha)), alpha);
#else
    const real xnorm = sqrt(xs);
    if (xnorm >= REAL_MIN_POSITIVE) {
        beta = -copysign(hypot(alpha, xnorm), alpha);
#endif
        tau = (beta - alpha) / beta;
        scal = (real)1 / (alpha - beta);
    }
#endif
}

// HH_LATE_CHECK 1 (not with HH_TRIDIAG_OUT): A's entries are checked for NaN and infinity
// only when the solve broke down or the residual is not finite, which a non-finite entry
// of the lower triangle always causes (its row of A x - b, or of |A| with x != 0, is not
// finite); b is still checked as it is loaded. The register rows are then loaded without
// a check or select per entry (ncu, thirty-first session: the row loads ~7% of the
// kernel's stall samples at f64 n = 30, one finiteness test and two selects per entry).
// Statuses are the same as with the check at load.
#ifndef HH_LATE_CHECK
#define HH_LATE_CHECK (!HH_TRIDIAG_OUT)
#endif

// HH_PCR_RCP 1: PCR divides by the pivots of its neighbours through reciprocals: every
// row publishes 1 / d (rcp_rn_fast of rcp.cu, the correctly rounded reciprocal without the
// out-of-line slow path of IEEE division, or `/` for all of the thread's rows when some
// |d| is outside its range), and alpha = -a 1 / d_lo, gamma = -c 1 / d_hi, z = v 1 / d are
// products. One reciprocal per row and step instead of two divisions, and without the
// divisions' slow-path branches, which kept the compiler from overlapping them (ncu,
// thirty-first session: the PCR's 22 divisions per thread ran one after another,
// ~10% of the kernel's stall samples at f64 n = 30). Results differ from `/` in the last
// bits (a product with a rounded reciprocal); a zero or non-finite pivot still ends in
// a non-finite d, v or c, so breakdown is flagged where it was. On ill-conditioned
// systems the largest residual grows: basket29 f64 n = 30, max over 2^20 systems, 6.2e-14
// with `/` against 1.33e-13 (16 n eps = 1.07e-13: such a system escalates); the paper and
// diagonally dominant families stay near 1e-15 (thirty-third session, benches/RESULTS.md).
#ifndef HH_PCR_RCP
#define HH_PCR_RCP 1
#endif
#if HH_PCR_RCP && !HH_TRIDIAG_OUT
#if REAL_F64
#define PCR_RCP_KEY_LO (23u << 20)    // |hi(d)| of 2^-1000
#define PCR_RCP_KEY_HI (2024u << 20)  // |hi(d)| of 2^1001
__device__ __forceinline__ unsigned pcr_rcp_key(double d) { return (unsigned)__double2hiint(d) & 0x7fffffffu; }
__device__ __forceinline__ double pcr_rcp_fast(double d) { return rcp_rn_fast_f64(d); }
#else
#define PCR_RCP_KEY_LO (27u << 23)    // |bits| of 2^-100
#define PCR_RCP_KEY_HI (228u << 23)   // |bits| of 2^101
__device__ __forceinline__ unsigned pcr_rcp_key(float d) { return (unsigned)__float_as_int(d) & 0x7fffffffu; }
__device__ __forceinline__ float pcr_rcp_fast(float d) { return rcp_rn_fast_f32(d); }
#endif
// r = 1 / d for this thread's rows (the rows it does not own hold d = 1).
__device__ __forceinline__ void pcr_reciprocals(const real (&d)[R], real (&r)[R]) {
    bool fast = true;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const unsigned key = pcr_rcp_key(d[s]);
        fast &= key >= PCR_RCP_KEY_LO && key < PCR_RCP_KEY_HI;
        r[s] = pcr_rcp_fast(d[s]);
    }
    if (!fast) {
#pragma unroll
        for (int s = 0; s < R; ++s) r[s] = (real)1 / d[s];
    }
}
#endif

// HH_PCR_LOCAL 1 (with HH_PCR_RCP, n* a power of two below n): PCR stops once the
// stride reaches n*. After the steps of strides 1, 2, ..., n*/2 row r couples only with
// rows r -+ n*, so the rows t, t + n*, t + 2 n*, ... of thread t form a symmetric
// tridiagonal system of their own (diagonal d, off-diagonal c), which the thread solves
// alone by L D L^T (Thomas, no pivoting) instead of the last ceil(log2(n / n*)) shared
// steps: no exchange through shared memory, and two reciprocals where PCR's last step and
// z = v / d took four (n = 30, n* = 16: 4 shared steps and a 2 x 2 solve instead of 5).
// The PCR-Thomas hybrid of the tridiagonal-solver literature. Measured (batch 2^20, M
// systems/s, benches/RESULTS.md): f64 n = 30 98.2-98.6 -> 98.7-99.1 (H100), and on an H200
// against the kernel without it f64 n = 8 +3%, n = 16 +2%, n = 32 +0.4%, f32 n = 16 +3%,
// f32 n = 32 -1.7% (one run each).
#ifndef HH_PCR_LOCAL
#define HH_PCR_LOCAL 1
#endif
#if HH_PCR_RCP && !HH_TRIDIAG_OUT
// 1 / d: rcp_rn_fast inside its range, `/` outside it.
__device__ __forceinline__ real pcr_rcp1(real d) {
    const unsigned key = pcr_rcp_key(d);
    if (key >= PCR_RCP_KEY_LO && key < PCR_RCP_KEY_HI) return pcr_rcp_fast(d);
    return (real)1 / d;
}
#endif

// Step N - 2 of dsytd2 reduces an empty x: dlarfg returns tau = 0 and beta = alpha, so
// H_{N-2} = I and the step only records d_{N-2} = A(N-2, N-2), e_{N-2} = alpha and
// tau_{N-2} = 0 (the full step left A and b bit for bit as they were: its p, w and the
// update are exact zeros). alpha is A(N-1, N-2), or A(N-2, N-1) from row N-2 where the
// rolled steps read the column from the row (HH_COLSH), as the full step did. x = Q z
// skips H_{N-2} for the same reason.
__device__ __forceinline__ void hh_identity_step(const real (&a)[R][N], real* sd, real* se, real* stau,
                                                 const Group& g) {
    constexpr int I = N >= 2 ? N - 2 : 0;
    constexpr int J = I + 1 < N ? I + 1 : I;
#if NSTAR > 32
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int r = g.t + s * NSTAR;
        if (g.t < NSTAR && r == I) sd[I] = a[s][I];
        if (g.t < NSTAR && r == J) se[I] = a[s][I];
    }
    if (g.t == 0) stau[I] = 0;
#else
#if HH_ROLL > 0 && HH_COLSH
    const real e = group_bcast(a[I / NSTAR][J], g, I % NSTAR);
#else
    const real e = group_bcast(a[J / NSTAR][I], g, J % NSTAR);
#endif
    if (g.t == I % NSTAR) sd[I] = a[I / NSTAR][I];
    if (g.t == 0) {
        se[I] = e;
        stau[I] = 0;
    }
#endif
}

#if HH_ROLL > 0
// a(r, k) -= c_r x_k for the register rows r and the columns k >= B + 1 (x in shared
// memory): one half of HH_SPLIT's rank-2 update.
template <int B>
__device__ __forceinline__ void hh_rank1_update(real (&a)[R][N], const real (&c)[R], const real* x) {
#pragma unroll
    for (int k = B + 1; k < N; ++k) {
        const real xk = x[k];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (row_max(s) >= B + 1) a[s][k] = hh_add_mul(a[s][k], -c[s], xk);
        }
    }
}

// HH_COL_SEL 1: the rolled step picks column i (i in [B, KE), runtime) from the register
// columns by selects starting from column B; 0: by `k == i` tests with a zero default,
// which the compiler turned into uniform branches (f64 n = 30: ~5 per slot and step).
// HH_V_SEL 1: the slot's v is computed by every thread and selected, only its store
// under the row test; 0: a branch around it for the threads past row N - 1.
// The same values either way (same result bits). Defaults (rolled kernels without HH_VSH,
// i.e. f64 n* = 16, n = 30 and 31), measured on one H200 (thirty-third session, batch
// 2^20, M systems/s, benches/RESULTS.md), neither / HH_COL_SEL / HH_V_SEL / both:
// n = 30 98.6-98.8 / 100.0 / 101.7-101.8 / 90.5-90.8 (both: 128 B of stack, 360 B of
// spill stores, against 16-32 B), n = 31 93.7-93.9 / 94.0-94.2 / 95.8 / 97.3-97.4.
#ifndef HH_COL_SEL
#define HH_COL_SEL (N != 30)
#endif
#ifndef HH_V_SEL
#define HH_V_SEL 1
#endif
// One reflector step i (runtime, B <= i < B + HH_ROLL, i < N - 2) of phase B.
template <int B>
__device__ __forceinline__ void hh_step(const int i, real (&a)[R][N], real (&b)[R], real* sv, real* sw, real* sd,
                                        real* se, real* stau, real* sA, real* sc, const Group& g,
                                        real* red_scratch) {
    constexpr int KE = (B + HH_ROLL < N - 2) ? B + HH_ROLL : N - 2;  // i in [B, KE)
    real* v_sh = sv + (i & 1) * N;
    real* w_sh = sw + (i & 1) * N;
    // Column i of the rows r >= i (A(i, i) and the column below it).
    real col[R];
    constexpr bool COLSH = HH_COLSH && B / NSTAR == (KE - 1) / NSTAR;
    if constexpr (COLSH) {
        // Row i (slot B / NSTAR of thread i mod NSTAR) through shared memory.
        constexpr int SI = B / NSTAR;
        if (g.t == i - SI * NSTAR) {
#pragma unroll
            for (int k = B; k < N; ++k) sc[k] = a[SI][k];
        }
        group_sync();
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            col[s] = (row_max(s) >= B && g.t < NSTAR && r < N) ? sc[r] : (real)0;
        }
    } else {
#pragma unroll
        for (int s = 0; s < R; ++s) {
            col[s] = 0;
            if (row_max(s) >= B) {
#if HH_COL_SEL
                // i lies in [B, KE): selects from a[s][B], no default (no branches).
                col[s] = a[s][B];
#pragma unroll
                for (int k = B + 1; k < KE; ++k) col[s] = (k == i) ? a[s][k] : col[s];
#else
#pragma unroll
                for (int k = B; k < KE; ++k)
                    if (k == i) col[s] = a[s][k];
#endif
            }
        }
    }
    real xs = 0, alpha = 0;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
        if (row_max(s) >= B && g.t < NSTAR && r == i) sd[i] = col[s];
        if (row_max(s) >= B + 1 && g.t < NSTAR && r < N) {
            if (r >= i + 2) xs = hh_add_mul(xs, col[s], col[s]);
#if NSTAR > 32
            if (r == i + 1) alpha = col[s];
#endif
        }
    }
#if NSTAR > 32
    group_sum2(xs, alpha, red_scratch);
#else
    if constexpr (COLSH) {
        alpha = sc[i + 1];  // A(i, i+1) = A(i+1, i), from row i
    } else {
        // Row i + 1 lies in slot S0 or S1 = S0 + 1 (HH_ROLL <= NSTAR): constant indices and
        // a select, so that col stays in registers. A runtime index into col (a pick by
        // (i + 1) / NSTAR) made it a local-memory array and every column read a jump table
        // (f64 n = 30: 17 indirect branches, 32 B of stack; benches/RESULTS.md round 15).
        constexpr int S0 = (B + 1) / NSTAR < R ? (B + 1) / NSTAR : R - 1;
        constexpr int S1 = KE / NSTAR < R ? KE / NSTAR : R - 1;
        real ca = col[S0];
        static_assert(S1 <= S0 + 1, "HH_ROLL > NSTAR");
        if constexpr (S1 != S0) ca = (i + 1 >= S1 * NSTAR) ? col[S1] : ca;
        alpha = __shfl_sync(0xffffffffu, ca, g.lane0 + (i + 1) % NSTAR);
    }
    hh_group_sum1(xs, red_scratch);
#endif
    real tau, beta, scal;
    hh_dlarfg(xs, alpha, tau, beta, scal);
    // v (0 on the rows r <= i) into column i and into v_sh.
    real vr[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
#if HH_V_SEL && !HH_VSH
        // v computed by every thread and selected, only the store under the row test
        // (a branch around the slot's v otherwise, for the threads past row N - 1).
        const bool own = row_max(s) >= B + 1 && g.t < NSTAR && r < N;
        const real v = (r == i + 1) ? (real)1 : col[s] * scal;
        vr[s] = (own && r >= i + 1) ? v : (real)0;
        if (own) v_sh[r] = vr[s];
#else
        vr[s] = 0;
        if (row_max(s) >= B + 1 && g.t < NSTAR && r < N) {
            if (r >= i + 1) vr[s] = (r == i + 1) ? (real)1 : col[s] * scal;
            v_sh[r] = vr[s];
#if HH_VSH
            if (r >= i + 1) sA[packed_col(i) + r - i] = vr[s];
#endif
        }
#endif
#if !HH_VSH
        // Selects, not a branch per column (rows without a reflector entry take 0 there:
        // their column i is dead).
        if (row_max(s) >= B + 1) {
#pragma unroll
            for (int k = B; k < KE; ++k) a[s][k] = (k == i) ? vr[s] : a[s][k];
        }
#endif
    }
    if (g.t == 0) {
        se[i] = beta;
        stau[i] = tau;
    }
    group_sync();
    // p = tau A22 v; v_k = 0 for k <= i, so the sum over k >= B + 1 is the sum over k >= i + 1.
    real p[R], p2[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        p[s] = 0;
        p2[s] = 0;
    }
#pragma unroll
    for (int k = B + 1; k < N; ++k) {
        const real vk = v_sh[k];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (row_max(s) >= B + 1) {
                // Partial sums by the parity of k: the unrolled kernel's by that of k - i,
                // the same two sets (swapped for odd i), each summed in ascending k.
                if (k & 1) p[s] = hh_add_mul(p[s], a[s][k], vk);
                else p2[s] = hh_add_mul(p2[s], a[s][k], vk);
            }
        }
    }
#if HH_SPLIT
    real pv_loc = 0, vb_loc = 0;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
        p[s] = tau * (p[s] + p2[s]);
        pv_loc = hh_add_mul(pv_loc, p[s], vr[s]);
        vb_loc = hh_add_mul(vb_loc, vr[s], b[s]);
        if (r < i + 1) p[s] = 0;
        if (row_max(s) >= B + 1 && g.t < NSTAR && r < N) w_sh[r] = p[s];  // p, not w
    }
    group_sync();
    hh_group_sum2(pv_loc, vb_loc, red_scratch);
    // First half, A -= v p^T, while the sum is in flight (v_r = p_k = 0 for r, k <= i).
    hh_rank1_update<B>(a, vr, w_sh);
    const real kk2 = -tau * pv_loc;
    const real tvb = tau * vb_loc;
    real wr[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
        wr[s] = hh_add_mul(p[s], kk2, vr[s]);
        if (row_max(s) >= B + 1 && g.t < NSTAR && r < N) {
            if (r >= i + 1) b[s] = hh_add_mul(b[s], -tvb, vr[s]);
        }
    }
    // Second half, A -= w' v^T with w' = p + 2 kk v (kk2 = 2 kk); v_k published by v's barrier.
    hh_rank1_update<B>(a, wr, v_sh);
#else
    real pv_loc = 0, vb_loc = 0;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        p[s] = tau * (p[s] + p2[s]);
        pv_loc = hh_add_mul(pv_loc, p[s], vr[s]);
        vb_loc = hh_add_mul(vb_loc, vr[s], b[s]);
    }
    hh_group_sum2(pv_loc, vb_loc, red_scratch);
    const real kk = (real)(-0.5) * tau * pv_loc;
    const real tvb = tau * vb_loc;
    real wr[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
        wr[s] = (r >= i + 1) ? hh_add_mul(p[s], kk, vr[s]) : (real)0;
        if (row_max(s) >= B + 1 && g.t < NSTAR && r < N) {
            w_sh[r] = wr[s];
            if (r >= i + 1) b[s] = hh_add_mul(b[s], -tvb, vr[s]);
        }
    }
    group_sync();
    // Rank-2 update; v_k = w_k = 0 for k <= i and v_r = w_r = 0 for r <= i leave those unchanged.
#pragma unroll
    for (int k = B + 1; k < N; ++k) {
        const real vk = v_sh[k];
        const real wk = w_sh[k];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (row_max(s) >= B + 1) a[s][k] = hh_add_mul(hh_add_mul(a[s][k], -vr[s], wk), -wr[s], vk);
        }
    }
#endif
}

// Phases B, B + HH_ROLL, ... up to step N - 3, each a rolled loop over its steps.
template <int B>
__device__ __forceinline__ void hh_phases(real (&a)[R][N], real (&b)[R], real* sv, real* sw, real* sd, real* se,
                                          real* stau, real* sA, real* sc, const Group& g, real* red_scratch) {
    // Steps B .. E - 1 of this phase; the last phase stops before the identity step N - 2.
    constexpr int E = (B + HH_ROLL < N - 2) ? B + HH_ROLL : N - 2;
#pragma unroll 1
    for (int i = B; i < E; ++i) hh_step<B>(i, a, b, sv, sw, sd, se, stau, sA, sc, g, red_scratch);
    if constexpr (E < N - 2) hh_phases<E>(a, b, sv, sw, sd, se, stau, sA, sc, g, red_scratch);
}
#endif


// The body of both entry points of this module: LISTED false, the positions p < batch
// of the batch (systems p, the unlisted entry; its code is the same as before lists
// existed); LISTED true, the positions p < min(batch, *count - k0) of the list idx, the
// systems idx[k0 + p], where *count is a list length written on the device by an
// earlier kernel (the escalation's lists, never read on the host): every block then
// loops over tiles (one wave of blocks), also with one buffer (HH_SINGLE).
// OUT: X (rep the reports) or, with HH_TRIDIAG_OUT, TRI (record at position p; rep unused).
template <bool LISTED>
__device__ __forceinline__ void householder_body(const real* __restrict__ A, const real* __restrict__ B,
                                                 real* __restrict__ OUT, GpuReport* __restrict__ rep,
                                                 long long batch, const unsigned int* __restrict__ idx,
                                                 const unsigned int* __restrict__ count, long long k0) {
#if HH_TRIDIAG_OUT
    real* __restrict__ TRI = OUT;
#else
    real* __restrict__ X = OUT;
#endif
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ real red_scratch[8];
    __shared__ int iscratch[1];
    constexpr int PA = N * (N + 1) / 2;
    Group g = make_group();
    real* sbase = reinterpret_cast<real*>(smem_raw) + (long long)g.index * SYS_STRIDE;
    real* sv = sbase + HH_BUFS * PA;  // [2][N]
    real* sw = sv + 2 * N;      // [2][N]
    real* sd = sw + 2 * N;      // [N]
    real* se = sd + N;          // [N]
    real* stau = se + N;        // [N]
    real* sx = stau + N;        // [N]
    real* pd = sx + N;          // [2][N]
    real* pc = pd + 2 * N;      // [2][N]
    real* pv = pc + 2 * N;      // [2][N]
    real* sB0 = pv + 2 * N;     // [HH_BUFS][N]
    // Persistent loop over tiles of systems (one tile = the systems of one block); the
    // loop condition depends on the block only, so the compiler sees it as uniform.
#if NSTAR > 32
    const long long spb = 1;
#else
    const long long spb = (long long)(blockDim.x >> 5) * SPW;
#endif
    const long long stride = (long long)gridDim.x * spb;
    // Positions p < total, systems sys(p) (see above).
    const long long total = LISTED ? listed_total(batch, count, k0) : batch;
    auto system_at = [&](long long p) -> long long { return LISTED ? (long long)idx[k0 + p] : p; };

#if !HH_SINGLE
    prefetch_system(A + (g.sys < total ? system_at(g.sys) : 0) * (N * N),
                    B + (g.sys < total ? system_at(g.sys) : 0) * N, sbase, sB0, g, g.sys < total);
    async_copy_commit();
#endif
#pragma unroll 1
    for (long long tile = blockIdx.x, it = 0; tile * spb < total; tile += gridDim.x, ++it, g.sys += stride) {
    // pos: the system's position (its record in TRI); sys: its index in A, B, X, rep.
    const bool active = g.sys < total;
    const long long pos = active ? g.sys : 0;
    const long long sys = active ? system_at(pos) : 0;
#if HH_SINGLE
    const int buf = 0;
    prefetch_system(A + sys * (N * N), B + sys * N, sbase, sB0, g, active);
    async_copy_commit();
    async_copy_wait<0>();
#else
    const long long next = g.sys + stride;
    const long long nsys = next < total ? system_at(next) : 0;
    const int buf = it & 1;
    prefetch_system(A + nsys * (N * N), B + nsys * N, sbase + (buf ^ 1) * PA, sB0 + (buf ^ 1) * N, g,
                    next < total);
    async_copy_commit();
    async_copy_wait<1>();
#endif
    group_sync();
    const real* sA = sbase + buf * PA;
    const real* sB = sB0 + buf * N;
    bool bad = false;
    real b[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = g.t + s * NSTAR;
#if HH_TRIDIAG_OUT
        // Divide and conquer's first kernel reduces P A P (P the reversal permutation):
        // its first-column-first steps are the CPU's last-row-first ones on A.
        b[s] = (g.t < NSTAR && i < N && active) ? sB[N - 1 - i] : (real)0;
#else
        b[s] = (g.t < NSTAR && i < N && active) ? sB[i] : (real)0;
#endif
        bad |= !finite(b[s]);
    }

    // Full symmetric rows into registers.
    real a[R][N];
#if HH_LATE_CHECK
    // Row i from two base pointers: A(i, k) for k <= i at packed_col(k) + i - k, for k > i
    // at packed_col(i) + k - i; constant offsets from either. No finiteness check here
    // (see HH_LATE_CHECK) and no identity for an inactive system (its rows are whatever
    // the shared buffer holds; nothing of it is stored).
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int i = g.t + s * NSTAR;
        const bool own = g.t < NSTAR && i < N;
        const real* lower = sA + i;
        const real* upper = sA + (i * N - (i * (i - 1)) / 2) - i;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            real v = 0;
            if (own) v = (k <= i) ? lower[packed_col(k) - k] : upper[k];
            a[s][k] = v;
        }
    }
#else
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = g.t + s * NSTAR;
        bool own = g.t < NSTAR && i < N;
        int oi = i * N - (i * (i - 1)) / 2;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            real v = 0;
            if (own) {
#if HH_TRIDIAG_OUT
                // (P A P)(i, k) = A(N-1-i, N-1-k), from the packed lower triangle of A.
                const int ir = N - 1 - i, oir = ir * N - (ir * (ir - 1)) / 2;
                v = (k >= i) ? sA[packed_col(N - 1 - k) + ir - (N - 1 - k)] : sA[oir + (N - 1 - k) - ir];
#else
                v = (k <= i) ? sA[packed_col(k) + i - k] : sA[oi + k - i];
#endif
                v = active ? v : (real)(k == i ? 1 : 0);
            }
            if (k <= i) bad |= !finite(v);
            a[s][k] = v;
        }
    }
#endif

    // Tridiagonalization.
#if HH_ROLL > 0
    // sx is free until PCR is done: it carries row i in the HH_COLSH steps.
    if constexpr (N > 2) hh_phases<0>(a, b, sv, sw, sd, se, stau, sbase + buf * PA, sx, g, red_scratch);
#else
#pragma unroll
    for (int i = 0; i + 2 < N; ++i) {
        real* v_sh = sv + (i & 1) * N;
        real* w_sh = sw + (i & 1) * N;
        real xs = 0, alpha = 0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            if (row_max(s) >= i + 1 && g.t < NSTAR && r < N) {
                if (r >= i + 2) xs = hh_add_mul(xs, a[s][i], a[s][i]);
#if NSTAR > 32
                if (r == i + 1) alpha = a[s][i];
#endif
            }
        }
#if NSTAR > 32
        group_sum2(xs, alpha, red_scratch);
#else
        // alpha = A(i+1, i) lives in one known thread: a broadcast, not a reduction.
        alpha = group_bcast(a[(i + 1) / NSTAR][i], g, (i + 1) % NSTAR);
        hh_group_sum1(xs, red_scratch);
#endif
        real tau, beta, scal;
        hh_dlarfg(xs, alpha, tau, beta, scal);
        real vr[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            vr[s] = 0;
            if (row_max(s) >= i + 1 && g.t < NSTAR && r < N && r >= i + 1) {
                vr[s] = (r == i + 1) ? (real)1 : a[s][i] * scal;
                a[s][i] = vr[s];
                v_sh[r] = vr[s];
            }
        }
        if (g.t == 0) {
            se[i] = beta;
            stau[i] = tau;
        }
        group_sync();
        // p = tau A22 v over the rows r >= i+1.
        // (two interleaved partial sums per row for instruction-level parallelism)
        real p[R], p2[R];
#if HH_P4
        real p3[R], p4[R];
#endif
#pragma unroll
        for (int s = 0; s < R; ++s) {
            p[s] = 0;
            p2[s] = 0;
#if HH_P4
            p3[s] = 0;
            p4[s] = 0;
#endif
        }
#pragma unroll
        for (int k = 0; k < N; ++k) {
            if (k >= i + 1) {
                const real vk = v_sh[k];
#pragma unroll
                for (int s = 0; s < R; ++s) {
                    if (row_max(s) >= i + 1) {
#if HH_P4
                        switch ((k - i) & 3) {
                            case 1: p[s] = hh_add_mul(p[s], a[s][k], vk); break;
                            case 2: p2[s] = hh_add_mul(p2[s], a[s][k], vk); break;
                            case 3: p3[s] = hh_add_mul(p3[s], a[s][k], vk); break;
                            default: p4[s] = hh_add_mul(p4[s], a[s][k], vk); break;
                        }
#else
                        if ((k - i) & 1) p[s] = hh_add_mul(p[s], a[s][k], vk);
                        else p2[s] = hh_add_mul(p2[s], a[s][k], vk);
#endif
                    }
                }
            }
        }
#pragma unroll
        for (int s = 0; s < R; ++s) {
#if HH_P4
            p[s] = (p[s] + p2[s]) + (p3[s] + p4[s]);
#else
            p[s] += p2[s];
#endif
        }
        real pv_loc = 0, vb_loc = 0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            p[s] = tau * p[s];
            pv_loc = hh_add_mul(pv_loc, p[s], vr[s]);
            vb_loc = hh_add_mul(vb_loc, vr[s], b[s]);
        }
        hh_group_sum2(pv_loc, vb_loc, red_scratch);
        const real kk = (real)(-0.5) * tau * pv_loc;
        const real tvb = tau * vb_loc;
        real wr[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            // Rows r <= i are finished: w_r = v_r = 0 leaves them unchanged below.
            wr[s] = (r >= i + 1) ? hh_add_mul(p[s], kk, vr[s]) : (real)0;
            if (row_max(s) >= i + 1 && g.t < NSTAR && r < N && r >= i + 1) {
                w_sh[r] = wr[s];
                b[s] = hh_add_mul(b[s], -tvb, vr[s]);
            }
        }
        group_sync();
        // Rank-2 update of the trailing rows and columns.
#pragma unroll
        for (int k = 0; k < N; ++k) {
            if (k >= i + 1) {
                const real vk = v_sh[k];
                const real wk = w_sh[k];
#pragma unroll
                for (int s = 0; s < R; ++s) {
                    if (row_max(s) >= i + 1) a[s][k] = hh_add_mul(hh_add_mul(a[s][k], -vr[s], wk), -wr[s], vk);
                }
            }
        }
        if (g.t == i % NSTAR) sd[i] = a[i / NSTAR][i];
    }
#endif
    if constexpr (N > 1) hh_identity_step(a, sd, se, stau, g);
    if (g.t == (N - 1) % NSTAR) sd[N - 1] = a[(N - 1) / NSTAR][N - 1];
    group_sync();

#if HH_TRIDIAG_OUT
    // Divide and conquer's first stage: the record of the system (layout at TRI_STRIDE)
    // instead of PCR, in the reversed order of P A P (the reader reverses it back).
    // v_k (k = 0..N-2) is column k of the register rows (or the packed column k of the
    // shared A, HH_VSH) on the rows r >= k + 1, v_k(k + 1) = 1; each thread writes the
    // entries of its own rows, which it wrote itself.
    bad = group_any(bad, g, iscratch);
    if (active) {
        real* rec = TRI + pos * TRI_STRIDE;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            const int r = g.t + s * NSTAR;
            if (g.t < NSTAR && r < N) {
                rec[r] = sd[r];
                rec[N + r] = r < N - 1 ? se[r] : (bad ? (real)1 : (real)0);
                rec[2 * N + r] = r < N - 1 ? stau[r] : (real)0;
                rec[3 * N + r] = b[s];
#pragma unroll
                for (int k = 0; k + 1 < N; ++k) {
#if HH_ROLL > 0 && HH_VSH
                    real vk = r >= k + 1 ? sA[packed_col(k) + r - k] : (real)0;
#else
                    real vk = r >= k + 1 ? a[s][k] : (real)0;
#endif
                    // The identity step N - 2 wrote no reflector: v = e_{N-1} (tau = 0).
                    if (k == N - 2) vk = r == N - 1 ? (real)1 : (real)0;
                    rec[4 * N + k * N + r] = vk;
                }
            }
        }
    }
#else
    // PCR on (d, e) with right-hand side Q^T b.
    real dd[R], cc[R], vv[R];
#if HH_PCR_RCP
    real rd[R];
#endif
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
        bool own = g.t < NSTAR && r < N;
        dd[s] = own ? sd[r] : (real)1;
        cc[s] = (own && r + 1 < N) ? se[r] : (real)0;
        vv[s] = own ? b[s] : (real)0;
    }
    bool breakdown = false;
    int cur = 0;
#if HH_PCR_RCP && HH_PCR_LOCAL
    // Shared steps up to the stride n* (HH_PCR_LOCAL), then the thread's own rows.
    constexpr bool PCR_LOCAL = NSTAR < N && (NSTAR & (NSTAR - 1)) == 0;
    constexpr int STEPS = PCR_LOCAL ? ceil_log2(NSTAR) : ceil_log2(N);
#else
    constexpr int STEPS = ceil_log2(N);
#endif
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
        const int stride = 1 << step;
        real* bd = pd + cur * N;
        real* bc = pc + cur * N;
        real* bv = pv + cur * N;
#if HH_PCR_RCP
        // Each row publishes 1 / d instead of d: its neighbours only divide by it.
        pcr_reciprocals(dd, rd);
#endif
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
#if HH_PCR_RCP
            if (g.t < NSTAR && r < N) { bd[r] = rd[s]; bc[r] = cc[s]; bv[r] = vv[s]; }
#else
            if (g.t < NSTAR && r < N) { bd[r] = dd[s]; bc[r] = cc[s]; bv[r] = vv[s]; }
#endif
        }
        group_sync();
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            if (g.t < NSTAR && r < N) {
                int lo = r - stride, hi = r + stride;
                real a_r = 0, alph = 0, v_lo = 0;
#if HH_PCR_RCP
                if (lo >= 0) {
                    a_r = bc[lo];  // coupling lo <-> r
                    alph = -a_r * bd[lo];
                    v_lo = bv[lo];
                }
                real c_r = cc[s], gam = 0, v_hi = 0, c_hi = 0;
                if (hi < N) {
                    gam = -c_r * bd[hi];
                    v_hi = bv[hi];
                    c_hi = bc[hi];  // coupling hi <-> hi + stride
                }
                real nd = dd[s] + alph * a_r + gam * c_r;
                real nv = vv[s] + alph * v_lo + gam * v_hi;
                real nc = gam * c_hi;
                // A non-finite alph (gam) makes alph a_r (gam c_r) and so nd non-finite:
                // a_r = 0 with 1 / d = inf gives NaN, a_r != 0 gives -inf or NaN.
                if (!finite(nd) || !finite(nv) || !finite(nc)) breakdown = true;
#else
                if (lo >= 0) {
                    a_r = bc[lo];  // coupling lo <-> r
                    alph = -a_r / bd[lo];
                    v_lo = bv[lo];
                }
                real c_r = cc[s], gam = 0, v_hi = 0, c_hi = 0;
                if (hi < N) {
                    gam = -c_r / bd[hi];
                    v_hi = bv[hi];
                    c_hi = bc[hi];  // coupling hi <-> hi + stride
                }
                real nd = dd[s] + alph * a_r + gam * c_r;
                real nv = vv[s] + alph * v_lo + gam * v_hi;
                real nc = gam * c_hi;
                if (!finite(alph) || !finite(gam) || !finite(nd) || !finite(nv) || !finite(nc)) breakdown = true;
#endif
                dd[s] = nd;
                vv[s] = nv;
                cc[s] = nc;
            }
        }
        cur ^= 1;
    }
    real x[R];
#if HH_PCR_RCP && HH_PCR_LOCAL
    if constexpr (PCR_LOCAL) {
        // The thread's rows t + s n* (s = 0..R-1): diagonal dd[s], coupling cc[s] between
        // slots s and s + 1 (0 past the last row; rows past N hold d = 1, c = v = 0, so
        // their x is 0). Forward: pivots p_s = d_s - c_{s-1}^2 / p_{s-1}, w_s = v_s -
        // (c_{s-1} / p_{s-1}) w_{s-1}; back: x_s = (w_s - c_s x_{s+1}) / p_s.
        real rp[R], w[R];
        bool piv_ok = true;
        w[0] = vv[0];
        rp[0] = pcr_rcp1(dd[0]);
#pragma unroll
        for (int s = 1; s < R; ++s) {
            const real m = cc[s - 1] * rp[s - 1];
            const real p = dd[s] - m * cc[s - 1];
            w[s] = vv[s] - m * w[s - 1];
            rp[s] = pcr_rcp1(p);
            if (g.t + s * NSTAR < N && !finite(p)) piv_ok = false;
        }
        x[R - 1] = w[R - 1] * rp[R - 1];
#pragma unroll
        for (int s = R - 2; s >= 0; --s) x[s] = (w[s] - cc[s] * x[s + 1]) * rp[s];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            const int r = g.t + s * NSTAR;
            if (g.t < NSTAR && r < N && (!finite(x[s]) || !piv_ok)) breakdown = true;
            if (!(g.t < NSTAR && r < N)) x[s] = 0;
        }
    } else
#endif
    {
        // PCR ran to the end: every row is decoupled, z = v / d.
#if HH_PCR_RCP
        pcr_reciprocals(dd, rd);
#endif
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            x[s] = 0;
            if (g.t < NSTAR && r < N) {
#if HH_PCR_RCP
                x[s] = vv[s] * rd[s];
#else
                x[s] = vv[s] / dd[s];
#endif
                if (!finite(x[s])) breakdown = true;
            }
        }
    }

    // x = Q z = H_0 (H_1 (... H_{n-2} z)).
#if HH_ROLL > 0 && HH_VSH
    // v_i from the packed column i of the shared A (rows i+1..n-1), a rolled loop.
#pragma unroll 1
    for (int i = N - 3; i >= 0; --i) {  // H_{N-2} = I
        const real tau = stau[i];
        const real* vcol = sA + packed_col(i) - i;
        real vi[R];
        real dot = 0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            vi[s] = 0;
            if (g.t < NSTAR && r < N && r >= i + 1) {
                vi[s] = vcol[r];
                dot = hh_add_mul(dot, vi[s], x[s]);
            }
        }
        hh_group_sum1(dot, red_scratch);
        const real f = tau * dot;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            if (g.t < NSTAR && r < N && r >= i + 1) x[s] = hh_add_mul(x[s], -f, vi[s]);
        }
    }
    // The original A again for the residual (the copy is in L2 by now, as a rule).
    group_sync();
    prefetch_system(A + sys * (N * N), B + sys * N, sbase + buf * PA, sB0 + buf * N, g, active);
    async_copy_commit();
    async_copy_wait<0>();
#else
#pragma unroll
    for (int i = N - 3; i >= 0; --i) {  // H_{N-2} = I
        const real tau = stau[i];
        real dot = 0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            if (row_max(s) >= i + 1 && g.t < NSTAR && r < N && r >= i + 1) dot = hh_add_mul(dot, a[s][i], x[s]);
        }
        hh_group_sum1(dot, red_scratch);
        const real f = tau * dot;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int r = g.t + s * NSTAR;
            if (row_max(s) >= i + 1 && g.t < NSTAR && r < N && r >= i + 1) x[s] = hh_add_mul(x[s], -f, a[s][i]);
        }
    }
#endif
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int r = g.t + s * NSTAR;
        if (g.t < NSTAR && r < N) sx[r] = x[s];
    }
    group_sync();

    bad = group_any(bad, g, iscratch);
    breakdown = group_any(breakdown, g, iscratch);
    // The right-hand side again from its shared buffer (not kept in registers).
    real borig[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = g.t + s * NSTAR;
        borig[s] = (g.t < NSTAR && i < N && active) ? sB[i] : (real)0;
    }
    double res = group_residual<HH_RES_UNROLL>(sA, sx, borig, x, g, red_scratch, iscratch);
#if HH_LATE_CHECK
    // A non-finite entry of A's lower triangle makes some row of A x - b or |A| non-finite,
    // so res is NaN: only then is the shared A (the original) scanned. The condition is
    // the same in every thread of a group; the warp (the block where NSTAR > 32) enters
    // together, as group_any's ballot needs.
    const bool suspect = breakdown || !isfinite(res);
#if NSTAR > 32
    if (suspect) {
#else
    if (__any_sync(0xffffffffu, suspect)) {
#endif
        bool nf = false;
        if (suspect && g.t < NSTAR) {
            for (int e = g.t; e < N * (N + 1) / 2; e += NSTAR) nf |= !finite(sA[e]);
        }
        bad = group_any(bad || nf, g, iscratch);
    }
#endif
    unsigned status = bad ? STATUS_NON_FINITE_INPUT
                    : breakdown ? STATUS_FAILED
                    : isnan(res) ? STATUS_FAILED : STATUS_OK;
    if (active) {
        const bool no_solution = bad || breakdown;
        store_group_solution(X, sys, g.t, x, no_solution);
        if (g.t == 0) store_report(rep, sys, no_solution, res, METHOD_HOUSEHOLDER_PCR, status);
    }
#endif  // HH_TRIDIAG_OUT
#if HH_SINGLE
    // Unlisted: one tile per block, the host launches a block for every tile (a loop
    // here would let the compiler keep loop-invariant addresses in registers across
    // tiles). Listed: the blocks of one wave loop.
    if constexpr (!LISTED) break;
#endif
    // Everyone is done with this buffer before the next iteration refills it.
    group_sync();
    }
    async_copy_wait<0>();
}

#if HH_MAXREG > 0
#define HH_ENTRY extern "C" __global__ void __maxnreg__(HH_MAXREG)
#else
#define HH_ENTRY extern "C" __global__ void __launch_bounds__(NSTAR > 32 ? 64 : 128)
#endif
#if HH_TRIDIAG_OUT
HH_ENTRY ENTRY(householder_tridiag)(const real* __restrict__ A, const real* __restrict__ B, real* __restrict__ TRI,
                                    long long batch) {
    householder_body<false>(A, B, TRI, nullptr, batch, nullptr, nullptr, 0);
}
HH_ENTRY ENTRY(householder_tridiag_listed)(const real* __restrict__ A, const real* __restrict__ B,
                                           real* __restrict__ TRI, long long batch,
                                           const unsigned int* __restrict__ idx,
                                           const unsigned int* __restrict__ count, long long k0) {
    householder_body<true>(A, B, TRI, nullptr, batch, idx, count, k0);
}
#else
HH_ENTRY ENTRY(householder_pcr)(const real* __restrict__ A, const real* __restrict__ B, real* __restrict__ X,
                                GpuReport* __restrict__ rep, long long batch) {
    householder_body<false>(A, B, X, rep, batch, nullptr, nullptr, 0);
}
HH_ENTRY ENTRY(householder_pcr_listed)(const real* __restrict__ A, const real* __restrict__ B, real* __restrict__ X,
                                       GpuReport* __restrict__ rep, long long batch,
                                       const unsigned int* __restrict__ idx, const unsigned int* __restrict__ count,
                                       long long k0) {
    householder_body<true>(A, B, X, rep, batch, idx, count, k0);
}
#endif
