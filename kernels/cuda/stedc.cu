// Batched solve of small symmetric systems by Householder tridiagonalization and
// divide and conquer with truncation (Abbas-Turki & Graillat 2016, Section 5 and
// Algorithm 3; Cuppen 1981; Gu & Eisenstat 1995; LAPACK dstedc/dlaed0-dlaed4), one
// warp per system, the work arrays in shared memory. Two forms (DC_SPLIT, at the entry
// below): in f64 the tridiagonalization is a kernel of its own (householder_tridiag of
// householder_pcr.cu, n* threads per system, on P A P with P the reversal, so that its
// reflectors are the CPU's last-row-first ones), which writes T, Q^T b and the
// reflectors to a record per system (TRI_STRIDE of common.cu) for divide_conquer here;
// in f32 divide_conquer runs the warp's own Householder step first (the reflectors in
// local memory while stedc runs).
//
// The method is the one of the CPU reference (same decisions, same formulas):
//   kernels/src/householder/tridiagonalize.rs   householder_tridiagonalize (last row first)
//   kernels/src/stedc/divide_conquer.rs         stedc, solve_unreduced, solve_2x2, merge
//   kernels/src/stedc/secular.rs                secular_equation_root (one lane per root)
//   kernels/src/stedc/truncated_solve.rs        truncated_eigen_solve
//   kernels/src/batch/escalate.rs               levels 1-2 of solve_one for divide and conquer
// but organised for the warp, so results agree with the CPU to rounding, not bit for bit:
//  * Householder (one-kernel form): lane r owns row r of the full symmetric matrix;
//    sums by shuffles. Q is never formed: the reflectors stay in A (u_i in row i,
//    w_i = u_i / beta_i in column i) and are applied to b; each lane then keeps its entries of them in local memory, the
//    array of A becomes W, and the reflectors come back from local memory for the solution.
//  * Divide and conquer: every unreduced block and every node of one depth of the
//    division trees is merged at once, lane i working for row / pole / root i of the
//    node that contains row i. Merge positions, deflation lists and ranks come from
//    counts, ballots and prefix popcounts; the deflation scan of dlaed2 is sequential
//    only when a close pair of poles is found (checked first on the unmodified poles,
//    for which the scan's decisions are those of the parallel test), then one lane per
//    node runs it. The secular iterations keep, per root, only the origin and tau:
//    d_j - lambda = (d_j - d_origin) - tau is recomputed (same rounding) where needed.
//  * Z = Q W row by row with the row's new entries in registers (Q is the children's
//    eigenvector block, sorted and rotated in place), W^T stored block-diagonally.
//
//  * Reciprocals and divisions of the secular equation, the Gu-Eisenstat product and the W
//    columns without the compiler's slow-path branch (rcp_rn_fast of rcp.cu, prepended to
//    this file, and div_rn_fast_f64; DC_FAST_RCP, DC_FAST_DIV): results equal to `/`, with
//    an out-of-line exact redo when an operand leaves their range.
//
// Requires N (system size, 1..64) and REAL_F64; no NSTAR. Block = one warp (32 threads).

#define METHOD_DIVIDE_CONQUER 2u

#if REAL_F64
#define REAL_EPS 2.220446049250313e-16
#else
#define REAL_EPS 1.1920928955078125e-07f
#endif

// Code-shape switches (no arithmetic operation or its order depends on them): `#pragma
// unroll 4` on the Householder p = A w and rank-2 update loops (DC_UNROLL_HH), on x = Q v
// (DC_UNROLL_QV), on the pole loop of the secular evaluation (DC_UNROLL_SEC), on the
// Gu-Eisenstat product and W columns (DC_UNROLL_GW); sec_evaluate out of line
// (DC_NOINLINE_EVAL). Chosen per precision by timing (benches/RESULTS.md, rounds 3-4);
// a source loaded through CVA_CUDA_SOURCE_DIR may define them first.
#ifndef DC_UNROLL_HH
#if REAL_F64
// f64 16 < n <= 32: unrolled by 4 (round 8, the one-kernel form: 8,479 -> 8,319 SASS
// instructions at n = 30 with DC_DIV_GUARD, and +4% on the diagonally dominant and paper
// families, H100; f64 now runs the Householder step in its own kernel, so this switch
// no longer changes the f64 divide_conquer entry).
#define DC_UNROLL_HH (N > 16 && N <= 32)
#define DC_UNROLL_QV 0
#define DC_UNROLL_SEC 0
#define DC_UNROLL_GW 0
#define DC_NOINLINE_EVAL 0
#else
#define DC_UNROLL_HH 1
#define DC_UNROLL_QV 1
#define DC_UNROLL_SEC 1
#define DC_UNROLL_GW 1
#define DC_NOINLINE_EVAL 1
#endif
#endif
// DC_W_REGS: the merges keep column j of W in registers of lane j and form Z = Q W in
// place, row chunk by row chunk, so W needs no matrix in shared memory (one N x LD
// matrix per system instead of two: at n = 30 f64 16 systems per SM instead of 12).
// Same operations in the same order as the shared-memory W. Off by default (a
// development switch, N <= 32 only; the host's two matrices are then more than
// enough): round 4 took it for f64 16 < N <= 32, where it made the diagonally dominant
// family 7% faster (6.8 -> 7.3 M/s at n = 30, H100) but the paper and basket29
// families 17-21% slower (2.56 -> 2.02 and 2.80 -> 2.33), measured side by side in
// RESULTS.md, "Final verification of main after the third session's rounds".
#ifndef DC_W_REGS
#define DC_W_REGS 0
#endif
// DC_ROUND4_SHAPE (development switch, 0 by default since round 7): 1 gives f64
// 16 < n <= 32 round 5's arithmetic and loop shapes (round 4's loop shapes, no fast
// reciprocals or divisions); round 5's code in full needs the round-7 code-size switches
// below (DC_ZW_ONE ... DC_ONE_BISECT) 0 as well (alone it ran 3.4 M/s, RESULTS round 8). That code was 6.8 M/s on the diagonally dominant family at f64 n = 30
// but 2.6 / 2.8 on the paper / basket29 families, and slower than the default at n = 24
// and 32 on both (RESULTS.md round 7).
#ifndef DC_ROUND4_SHAPE
#define DC_ROUND4_SHAPE 0
#endif
// Code-size switches (round 7; no arithmetic operation or its order depends on them),
// DC_SMALL_CODE: on for f64 16 < n <= 32 while the kernel held its own Householder step
// and its executed code was at the size of the SM instruction cache (RESULTS.md rounds
// 6-7). Off since the fifteenth session: with the Householder step in its own kernel
// (f64) the code is half that size, and turning them off made f64 n = 30 7% faster
// (benches/RESULTS.md, fifteenth session):
// DC_ZW_ONE: one zw_product instance (node length <= N) instead of one per power of two
// (at n = 30 every merge depth ran a different one, so all four ran per system).
// DC_ROLL_WARP: the butterfly loops of the warp reductions not unrolled.
// DC_RES_JOINT: the residual check's seven warp maxima in one loop (not unrolled), its
// row loop unrolled by 2 (not completely).
#ifndef DC_SMALL_CODE
#define DC_SMALL_CODE 0
#endif
#ifndef DC_ZW_ONE
#define DC_ZW_ONE DC_SMALL_CODE
#endif
#ifndef DC_ROLL_WARP
#define DC_ROLL_WARP DC_SMALL_CODE
#endif
#ifndef DC_RES_JOINT
#define DC_RES_JOINT DC_SMALL_CODE
#endif
// DC_ROLL_ROWS: the once-per-system loops over a row of Z (sorting, copy, finiteness
// check, truncated solve) unrolled by 2 instead of completely.
#ifndef DC_ROLL_ROWS
#define DC_ROLL_ROWS DC_SMALL_CODE
#endif
#if DC_ROLL_ROWS
#define ROLL_ROWS _Pragma("unroll 2")
#else
#define ROLL_ROWS
#endif
// DC_ONE_BISECT (with DC_ONE_EVAL): the secular iteration's bisection step inlined once.
#ifndef DC_ONE_BISECT
#define DC_ONE_BISECT DC_SMALL_CODE
#endif
// DC_DIV_GUARD (round 8): no division with a zero numerator where the quotient is then
// known (the Householder w = u / beta of the lanes past the reflector, u = 0; the model's
// outer-pole quotients d / d2 when no pole lies on that side, unused then): the
// compiler's division takes its out-of-line slow path for a zero or subnormal quotient,
// which ran 47 times per system at f64 n = 30 (ncu). Same results bit for bit.
// DC_BLOCK_N: n <= 48, both precisions: the division guard and the block layout
// (DC_BLOCK_WARPS, DC_PHASE_SYNC below) are on by default there (f64 16 < n <= 32 since
// rounds 8-9, f32 16 < n <= 32 since round 11, every n <= 48 since round 12; H100,
// benches/RESULTS.md: n = 30 f32 8.2 / 6.9 / 7.1 -> 13.0 / 10.8 / 11.8 M/s; paper family
// n = 8 / 16 / 48 f64 +30-35% / +37-40% / +3-6%, f32 +23% / +30% / +75-87%; at n = 64 the
// layout lost 11-18%, so it stays off above 48).
#define DC_BLOCK_N (N <= 48)
// DC_TOP_NO_Z (round 14; default 1 for f64 n <= 48 and f32 32 < n <= 48): the top merge
// does not form Z = Q W; the truncated solve applies Q and W to its two vectors
// (truncated_solve_top). Needs W in shared memory (!DC_W_REGS). H100, benches/RESULTS.md,
// batch 2^20, diag-dominant / paper / basket29: f64 n = 30 6.71 / 6.72 / 6.55 -> 7.03-7.09
// / 6.80-6.85 / 6.74-6.79 M/s; n = 48 (batch 2^18) f64 0.92 -> 1.08, f32 2.29 / 2.22 ->
// 2.85 / 2.68. Off for f32 n <= 32: at n = 30 paper +30% but basket29 -16% (8.88 ->
// 11.5, 14.11 -> 11.8), not understood (code layout suspected). DC_TOP_ROLL: unroll
// factor of its loops.
#ifndef DC_TOP_NO_Z
#define DC_TOP_NO_Z (DC_BLOCK_N && !DC_W_REGS && (REAL_F64 || N > 32))
#endif
#ifndef DC_TOP_ROLL
#define DC_TOP_ROLL 2
#endif
#define ROLL_TOP DC_UNROLL_BY(DC_TOP_ROLL)
#ifndef DC_DIV_GUARD
#define DC_DIV_GUARD DC_BLOCK_N
#endif
#if DC_ROLL_WARP
#define ROLL_WARP _Pragma("unroll 1")
#else
#define ROLL_WARP _Pragma("unroll")
#endif
// DC_ROLL_COLD: `#pragma unroll 1` on loops that run once per merge or per root (merge
// positions, pole maximum, ranks, |z|^2 sums, the Gu-Eisenstat product), so that the
// compiler's partial unrolling does not copy them (code size: the kernel's speed
// depends on its hot loops staying in the instruction cache, RESULTS.md round 4).
// DC_WREG_JB (DC_W_REGS only): the register-W product is instantiated for node lengths
// <= 4, 8, 16, N (4), <= 8 and <= N (2) or <= N (1). DC_WCOL_LOCAL (DC_W_REGS only):
// the W column's divisions in rolled loops through local memory.
// Defaults: rolled (round 5), except under DC_ROUND4_SHAPE.
#ifndef DC_ROLL_COLD
#define DC_ROLL_COLD (!DC_ROUND4_SHAPE)
#endif
#ifndef DC_WREG_JB
#define DC_WREG_JB 4
#endif
#ifndef DC_WCOL_LOCAL
#define DC_WCOL_LOCAL 0
#endif
#if DC_ROLL_COLD
#define ROLL_COLD _Pragma("unroll 1")
#else
#define ROLL_COLD
#endif
#define DC_PRAGMA(x) _Pragma(#x)
#define DC_UNROLL_BY(k) DC_PRAGMA(unroll k)
#if DC_UNROLL_HH
#define UNROLL_HH _Pragma("unroll 4")
#else
#define UNROLL_HH
#endif
#if DC_UNROLL_QV
#define UNROLL_QV _Pragma("unroll 4")
#else
#define UNROLL_QV
#endif
#if DC_UNROLL_SEC
#define UNROLL_SEC _Pragma("unroll 4")
#else
#define UNROLL_SEC
#endif
#if DC_UNROLL_GW
#define UNROLL_GW _Pragma("unroll 4")
#else
#define UNROLL_GW
#endif
#if DC_NOINLINE_EVAL
#define EVAL_INLINE __noinline__
#else
#define EVAL_INLINE
#endif

// DC_ROLL_STEPS: `#pragma unroll 1` on the Householder step loop, apply_q and (without
// DC_UNROLL_QV) apply_q_saved; otherwise the compiler may unroll them completely
// (apply_q_saved: 28 copies at n = 30). Default as DC_ROLL_COLD.
#ifndef DC_ROLL_STEPS
#define DC_ROLL_STEPS (!DC_ROUND4_SHAPE)
#endif
// (DC_ROLL_HH, DC_ROLL_QT, DC_ROLL_QS: the three loops separately.)
#ifndef DC_ROLL_HH
#define DC_ROLL_HH DC_ROLL_STEPS
#endif
#ifndef DC_ROLL_QT
#define DC_ROLL_QT DC_ROLL_STEPS
#endif
#ifndef DC_ROLL_QS
#define DC_ROLL_QS DC_ROLL_STEPS
#endif
// DC_QS_PREFETCH = QB > 0: apply_q_saved rolled over blocks of QB steps, the next
// block's reflector entries loaded ahead (development switch).
#ifndef DC_QS_PREFETCH
#define DC_QS_PREFETCH 0
#endif
// DC_HH_STEP_BY (development switch, default 0 = as DC_ROLL_HH says): the Householder
// step loop unrolled by this factor (fewer backward jumps; built in round 9, not timed).
#ifndef DC_HH_STEP_BY
#define DC_HH_STEP_BY 0
#endif
#if DC_HH_STEP_BY > 0
#define ROLL_HH DC_UNROLL_BY(DC_HH_STEP_BY)
#elif DC_ROLL_HH
#define ROLL_HH _Pragma("unroll 1")
#else
#define ROLL_HH
#endif
#if DC_ROLL_QT
#define ROLL_QT _Pragma("unroll 1")
#else
#define ROLL_QT
#endif
#if DC_ROLL_QS
#define ROLL_QS _Pragma("unroll 1")
#else
#define ROLL_QS
#endif
#ifndef DC_ROW_CHUNK
#define DC_ROW_CHUNK 4
#endif

#define SECULAR_MAX_ITERATIONS 30
#define MODEL_ITERATIONS 8
#define FULL_MASK 0xffffffffu

// DC_FAST_RCP: the reciprocals of the secular evaluation (one per pole) and of the
// model iterations by rcp_rn_fast_f64 / _f32 (kernels/cuda/rcp.cu, prepended to this
// file): the compiler's own correctly rounded reciprocal without its out-of-line slow
// path, so equal to (real)1 / x, for |x| in [2^-1000, 2^1001) (f64) or [2^-100, 2^101)
// (f32). An evaluation (or model root) that met a value outside that range is redone
// with true divisions, so the results are those of `/` bit for bit. Without the branch
// to the slow path inside the pole loop, the reciprocals of consecutive poles overlap.
// Off under DC_ROUND4_SHAPE, where all three switches below give round 5's code. (With
// round 5's other code at f64 16 < n <= 32, the fast reciprocals made the diagonally
// dominant family ~1.6x slower through instruction-fetch stalls, RESULTS.md round 6;
// round 7 made the code smaller there, DC_SMALL_CODE.)
#ifndef DC_FAST_RCP
#define DC_FAST_RCP (!DC_ROUND4_SHAPE)
#endif
// DC_ONE_EVAL: the secular iteration evaluates f at one place in its loop (the midpoint
// evaluation is the loop's first pass), so the pole loop is inlined once, not three
// times (same evaluations in the same order).
#ifndef DC_ONE_EVAL
#define DC_ONE_EVAL (!DC_ROUND4_SHAPE)
#endif
// DC_EVAL_MASKS (fifteenth session): the fast evaluation sums the two sides' derivative
// groups with 0/1 factors instead of selects and recomputes poles a and a + 1 after its
// loop instead of capturing them in it: half the selects (the SASS of sec_evaluate_t at
// f64 n = 30, exact path included: 199 -> 102 selects, 783 -> 657 instructions), the same
// values bit for bit (f64 n = 30 +3% alone, H100, benches/RESULTS.md fifteenth session).
#ifndef DC_EVAL_MASKS
#define DC_EVAL_MASKS 1
#endif
// Inlining of the evaluation and model templates: forced with the fast reciprocals
// (their exact copies are out of line), the compiler's choice otherwise (round 5's code).
#if DC_FAST_RCP
#define DC_SEC_INLINE __forceinline__
#else
#define DC_SEC_INLINE
#endif
#if REAL_F64
// Absolute high word of x; rcp_rn_fast_f64 is exact for keys in [hi(2^-1000), hi(2^1001)).
__device__ __forceinline__ unsigned rcp_key_abs(double x) { return (unsigned)__double2hiint(x) & 0x7fffffffu; }
#define DC_RCP_KEY_LO (23u << 20)
#define DC_RCP_KEY_HI (2024u << 20)
__device__ __forceinline__ double sec_rcp_fast(double x) { return rcp_rn_fast_f64(x); }
#else
__device__ __forceinline__ unsigned rcp_key_abs(float x) { return (unsigned)__float_as_int(x) & 0x7fffffffu; }
#define DC_RCP_KEY_LO (27u << 23)
#define DC_RCP_KEY_HI (228u << 23)
__device__ __forceinline__ float sec_rcp_fast(float x) { return rcp_rn_fast_f32(x); }
#endif
// 1 / x: by rcp_rn_fast when FAST (the key range is tracked in kmin, kmax), else `/`.
template <bool FAST>
__device__ __forceinline__ real sec_rcp(real x, unsigned& kmin, unsigned& kmax) {
    if constexpr (FAST) {
        const unsigned key = rcp_key_abs(x);
        kmin = min(kmin, key);
        kmax = max(kmax, key);
        return sec_rcp_fast(x);
    } else {
        return (real)1 / x;
    }
}
__device__ __forceinline__ bool rcp_keys_ok(unsigned kmin, unsigned kmax) {
    return kmin >= DC_RCP_KEY_LO && kmax < DC_RCP_KEY_HI;
}

// DC_FAST_DIV (f64): the divisions of the Gu-Eisenstat product and of the W columns by
// div_rn_fast_f64, the instruction sequence of the compiler's own IEEE division without
// its branch to the slow path (MUFU.RCP64H with the low word 1, a cubic and a quadratic
// Newton step, q = a y and one correction). The compiler keeps that sequence's result
// unless the numerator or the quotient is near the ends of the exponent range (or the
// divisor's high word is not finite as a float); a column whose numerators, divisors or
// quotients leave [2^-960, 2^1000) is redone with `/`. So the results are those of `/`.
#ifndef DC_FAST_DIV
#define DC_FAST_DIV (REAL_F64 && !DC_ROUND4_SHAPE)
#endif
// DC_FAST_MDIV (f64, with DC_FAST_RCP): the model solve's divisions (its set-up: the two
// outer poles' positions and the four constant terms; each iteration's two-pole root) by
// div_rn_fast_f64 as well (the model solve is redone exactly if out of range). On since
// the fifteenth session (f64 n = 30 +1-2%, H100, benches/RESULTS.md).
#ifndef DC_FAST_MDIV
#define DC_FAST_MDIV 1
#endif
#define DC_DIV_KEY_LO (63u << 20)
#define DC_DIV_KEY_HI (2023u << 20)
#if REAL_F64
__device__ __forceinline__ double div_rn_fast_f64(double a, double d) {
    double y;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(d));
    y = __hiloint2double(__double2hiint(y), 1);
    double e = fma(-d, y, 1.0);
    e = fma(e, e, e);
    y = fma(y, e, y);
    e = fma(-d, y, 1.0);
    y = fma(y, e, y);
    const double q = a * y;
    const double r = fma(-d, q, a);
    return fma(y, r, q);
}
#endif
// a / d: by div_rn_fast_f64 when FAST (f64; the keys of a, q and d tracked), else `/`.
template <bool FAST>
__device__ __forceinline__ real sec_div(real a, real d, unsigned& kmin, unsigned& kmax) {
#if REAL_F64
    if constexpr (FAST) {
        const double q = div_rn_fast_f64(a, d);
        const unsigned ka = rcp_key_abs(a), kq = rcp_key_abs(q), kd = rcp_key_abs(d);
        kmin = min(kmin, min(ka, kq));
        kmax = max(kmax, max(ka, max(kq, kd)));
        return q;
    }
#endif
    return a / d;
}
__device__ __forceinline__ bool div_keys_ok(unsigned kmin, unsigned kmax) {
    return kmin >= DC_DIV_KEY_LO && kmax < DC_DIV_KEY_HI;
}


// Elements per lane (rows, poles, roots) and the padded leading dimension of the
// matrices in shared memory (odd: rows and columns are read without bank conflicts).
constexpr int SLOTS = (N + 31) / 32;
constexpr int LD = (N % 2 == 0) ? N + 1 : N;

__device__ __forceinline__ double dnan() { return __longlong_as_double(0x7ff8000000000000ULL); }

__device__ __forceinline__ real warp_max(real v) {
ROLL_WARP
    for (int off = 16; off >= 1; off >>= 1) v = fmax(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}
__device__ __forceinline__ real warp_min(real v) {
ROLL_WARP
    for (int off = 16; off >= 1; off >>= 1) v = fmin(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}
// DC_TC_SUM 1 (f64, sm_80 or later): warp_sum on the FP64 tensor cores (common.cu's
// tc_segment_sum): latency on the H100 175 -> 70 cycles (benches/RESULTS.md, eleventh
// session); the sum's order differs from the butterfly's (results differ in the last
// bits). Default:
// f64 (H100, batch 2^20, M systems/s, butterfly -> tensor cores: n = 30 paper
// 6.84 -> 7.37-7.43, basket29 6.73-6.78 -> 7.32-7.36, diagonally dominant 7.08 -> 7.76;
// n = 16 +5-6%, n = 48 +5%).
#ifndef DC_TC_SUM
#define DC_TC_SUM REAL_F64
#endif
__device__ __forceinline__ real warp_sum(real v) {
#if DC_TC_SUM && REAL_F64 && TC_SUMS
    return tc_segment_sum<32>(v);
#else
ROLL_WARP
    for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
#endif
}
// Sums over the warp of a and of b (the tensor cores' two-value segment sum where
// warp_sum runs on them; two butterflies otherwise).
__device__ __forceinline__ void warp_sum2(real& a, real& b) {
#if DC_TC_SUM && REAL_F64 && TC_SUMS
    tc_segment_sum2<32>(a, b);
#else
    a = warp_sum(a);
    b = warp_sum(b);
#endif
}
__device__ __forceinline__ int warp_max_int(int v) {
ROLL_WARP
    for (int off = 16; off >= 1; off >>= 1) v = max(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}
__device__ __forceinline__ bool warp_any(bool p) { return __any_sync(FULL_MASK, p); }
__device__ __forceinline__ int warp_count(bool p) { return __popc(__ballot_sync(FULL_MASK, p)); }

// Bit i set where p holds for element i = lane + 32 s.
__device__ __forceinline__ unsigned long long ballot64(const bool (&p)[SLOTS]) {
    unsigned long long m = __ballot_sync(FULL_MASK, p[0]);
    if constexpr (SLOTS > 1) m |= (unsigned long long)__ballot_sync(FULL_MASK, p[1]) << 32;
    return m;
}
// Bits 0..k-1 (k in 0..64).
__device__ __forceinline__ unsigned long long low_bits(int k) {
    return k >= 64 ? ~0ULL : ((1ULL << k) - 1ULL);
}

// floor(log2 |x|) from the exponent bits of |x| as a double (ilogb of divide_conquer.rs).
__device__ __forceinline__ int ilogb_bits(double v) {
    v = fabs(v);
    int shift = 0;
    if (v < 2.2250738585072014e-308) {
        v *= 18446744073709551616.0;
        shift = 64;
    }
    long long bits = __double_as_longlong(v);
    return (int)((bits >> 52) & 0x7ff) - 1023 - shift;
}

// x 2^k by factors of at most 2^64 (scale_pow2).
__device__ __forceinline__ real scale_pow2(real x, int k) {
    while (k != 0) {
        int step = k < -64 ? -64 : (k > 64 ? 64 : k);
        x *= (real)ldexp(1.0, step);
        k -= step;
    }
    return x;
}

// ---------------------------------------------------------------------------------
// Residual check (kernels/src/batch/residual.rs::residual_check): the relative
// residual and the equilibrated solution growth. A: column-major n x n (lower read),
// here in shared or global memory; one lane per row, columns in ascending order.
// ---------------------------------------------------------------------------------
struct Check {
    double residual;
    double growth;
};

// Equilibration S = diag(|a_ii|^{-1/2}) (1 where a_ii = 0) into scale[0..N).
__device__ __forceinline__ void equilibration(const real* a, real* scale, int lane) {
    for (int r = lane; r < N; r += 32) {
        real dr = fabs(a[r + r * N]);
        scale[r] = dr > (real)0 ? (real)1 / sqrt(dr) : (real)1;
    }
    __syncwarp();
}

// scale: shared scratch of N reals (the equilibration, computed here).
__device__ Check residual_check_warp(const real* a, const real* b, const real* x, real* scale, int lane) {
    real r_max = 0, a_max = 0, x_max = 0, b_max = 0, sa_max = 0, sx_max = 0, sb_max = 0;
    bool nan_row = false;
    equilibration(a, scale, lane);
    for (int r = lane; r < N; r += 32) {
        const real sr = scale[r];
        real acc = 0, row = 0, srow = 0;
#if DC_RES_JOINT
#pragma unroll 2
#endif
        for (int c = 0; c < N; ++c) {
            real arc = r >= c ? a[r + c * N] : a[c + r * N];
            const real sc = scale[c];
            acc += arc * x[c];
            row += fabs(arc);
            srow += fabs(sr * arc * sc);
        }
        sa_max = fmax(sa_max, srow);
        sx_max = fmax(sx_max, fabs(x[r] / sr));
        sb_max = fmax(sb_max, fabs(sr * b[r]));
        real ri = fabs(b[r] - acc);
        if (isnan(ri) || !finite(x[r])) nan_row = true;
        r_max = fmax(r_max, ri);
        a_max = fmax(a_max, row);
        x_max = fmax(x_max, fabs(x[r]));
        b_max = fmax(b_max, fabs(b[r]));
    }
    Check ch;
    if (warp_any(nan_row)) {
        ch.residual = dnan();
        ch.growth = dnan();
        return ch;
    }
#if DC_RES_JOINT
#pragma unroll 1
    for (int off = 16; off >= 1; off >>= 1) {
        r_max = fmax(r_max, __shfl_xor_sync(FULL_MASK, r_max, off));
        a_max = fmax(a_max, __shfl_xor_sync(FULL_MASK, a_max, off));
        x_max = fmax(x_max, __shfl_xor_sync(FULL_MASK, x_max, off));
        b_max = fmax(b_max, __shfl_xor_sync(FULL_MASK, b_max, off));
        sa_max = fmax(sa_max, __shfl_xor_sync(FULL_MASK, sa_max, off));
        sx_max = fmax(sx_max, __shfl_xor_sync(FULL_MASK, sx_max, off));
        sb_max = fmax(sb_max, __shfl_xor_sync(FULL_MASK, sb_max, off));
    }
#else
    r_max = warp_max(r_max);
    a_max = warp_max(a_max);
    x_max = warp_max(x_max);
    b_max = warp_max(b_max);
    sa_max = warp_max(sa_max);
    sx_max = warp_max(sx_max);
    sb_max = warp_max(sb_max);
#endif
    double ax = (double)a_max * (double)x_max;
    double den = ax + (double)b_max;
    ch.residual = den == 0.0 ? 0.0 : (double)r_max / den;
    double sax = (double)sa_max * (double)sx_max;
    ch.growth = sax == 0.0 ? 0.0 : sax / (double)sb_max;
    return ch;
}


// ---------------------------------------------------------------------------------
// Householder tridiagonalization A = Q T Q^T (householder_tridiagonalize), in place in
// the full symmetric N x N array a (leading dimension LD), lane r owning row r. Step i
// (i = N-1 down to 2) reduces row i with H_i = I - u_i u_i^T / beta_i (u_i supported on
// rows < i); on exit row i holds u_i and column i holds w_i = u_i / beta_i (both zero
// where H_i = I), so Q = H_{N-1} ... H_2. d, e: diagonal and off-diagonal of T;
// qv: N scratch.
// ---------------------------------------------------------------------------------
// DC_HH_UNSCALED 1: each step first sums the squares of x = A(i, 0:l-1) unscaled (one
// warp sum, no column maximum, no divisions by it); where that sum s and
// q = s + A(i, l)^2 lie in [DC_HH_LO, DC_HH_HI] with s > q DC_HH_REL (so that the
// scaled path would not skip the step either), the reflector is formed from the
// unscaled values (scale 1: the same reflector H_i up to rounding, u and w scaled by
// sc^-1 and sc against the scaled form, their products unchanged); elsewhere the scaled
// path as before (column maximum sc, x / sc). 0: always scaled (LAPACK dlarfg's safe
// form, as the CPU reference). Results differ from the scaled form in the last bits.
// Default: f64, where the step's chain loses a warp maximum (5 shuffle rounds) and a
// division (H100, batch 2^20, M systems/s, scaled -> unscaled: n = 30 paper 7.38 ->
// 7.67-7.73, basket29 7.32 -> 7.62-7.68, diagonally dominant 7.71 -> 8.04; n = 16 paper
// 15.25 -> 15.73, n = 48 paper 1.131 -> 1.157); f32 gained 0.2-1.7% and stays scaled
// (benches/RESULTS.md, twelfth session).
#ifndef DC_HH_UNSCALED
#define DC_HH_UNSCALED REAL_F64
#endif
// DC_HH_QTB 1: y <- Q^T y (y = b, lane k holding y_k in slot k / 32) is applied inside
// the tridiagonalization, H_i as soon as step i has formed it (u_i^T y summed together
// with w^T p in one two-value warp sum), instead of by apply_q's separate pass of N - 2
// dependent sums afterwards. The same products in the same order; the sums' bits may
// differ (a two-value sum on the tensor cores; on the H100 they did not: the same result
// hash). 0: the separate pass. Default: f64, with DC_HH_RCP (below).
#ifndef DC_HH_QTB
#define DC_HH_QTB REAL_F64
#endif
// DC_HH_RCP 1: w = u (1 / beta) with the reciprocal from rcp_rn_fast_f64 / _f32 (rcp.cu:
// the compiler's correctly rounded 1 / beta without the slow-path branch; beta lies in
// [1, 2 (n + 1)] on the scaled path and in [q, 2 q] with q in [DC_HH_LO, DC_HH_HI] on the
// unscaled one, inside those functions' ranges) instead of one IEEE division u / beta per
// lane (two roundings instead of one). 0: the divisions.
// Measured together (H100, batch 2^20, n = 30, seconds of the bench, both switches 0 ->
// DC_HH_QTB alone -> both): f64 paper 0.1366 -> 0.1364 -> 0.1347 (+1.4%), basket29
// 0.1377 -> 0.1372 -> 0.1355 (+1.6%), diagonally dominant 0.1304 -> 0.1298 -> 0.1282
// (+1.7%); f32 paper 0.0976 -> 0.0990 -> 0.0968 (+0.8%), basket29 0.0888 -> 0.0900 ->
// 0.0883 (+0.6%) (benches/RESULTS.md, twelfth session, call 3). Default: f64. In f32
// the two roundings moved the GPU's answer on ill-conditioned systems away from the CPU
// reference's divisions enough to fail tests/gpu_engine.rs's f32 bound (american_put f32,
// where nearly every system reaches the truncated divide and conquer: CVA 0.35 standard
// errors from the CPU's against 0.06 with the divisions; call 4), for a gain of < 1%.
#ifndef DC_HH_RCP
#define DC_HH_RCP REAL_F64
#endif
#if REAL_F64
#define DC_HH_LO 0x1p-600
#define DC_HH_HI 0x1p600
#define DC_HH_REL 0x1p-900
#else
#define DC_HH_LO 0x1p-50f
#define DC_HH_HI 0x1p50f
#define DC_HH_REL 0x1p-100f
#endif
#if DC_HH_QTB
__device__ void householder_tridiagonalize(real* a, real* d, real* e, real* qv, real (&y)[SLOTS], int lane) {
#else
__device__ void householder_tridiagonalize(real* a, real* d, real* e, real* qv, int lane) {
#endif
    ROLL_HH
    for (int i = N - 1; i >= 2; --i) {
        const int l = i - 1;
        real x[SLOTS], t[SLOTS];
        real sc = 0;
#if DC_HH_UNSCALED
        // The sum of squares without the scale: where it lies safely inside the range
        // (and far enough above the scaled path's skip threshold), sc = 1.
        const real xl0 = a[i + l * LD];
        real su = 0;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            x[s] = k < i ? a[i + k * LD] : (real)0;
            t[s] = k < l ? x[s] : (real)0;
            su += t[s] * t[s];
        }
        su = warp_sum(su);
        const real qu = su + xl0 * xl0;
        real sigma = su;
        const bool unscaled = su > DC_HH_LO && qu < DC_HH_HI && su > qu * DC_HH_REL;
        if (unscaled) {
            sc = 1;
        } else {
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) sc = fmax(sc, fabs(x[s]));
            sc = warp_max(sc);
            sigma = 0;
        }
        if (!unscaled && sc != (real)0) {
#else
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            x[s] = k < i ? a[i + k * LD] : (real)0;
            sc = fmax(sc, fabs(x[s]));
        }
        sc = warp_max(sc);
        real sigma = 0;
        if (sc != (real)0) {
#endif
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const int k = lane + 32 * s;
                t[s] = k < l ? x[s] / sc : (real)0;
                sigma += t[s] * t[s];
            }
            sigma = warp_sum(sigma);
        }
        const real xl = a[i + l * LD];
        __syncwarp();
        if (sc == (real)0 || sigma < REAL_MIN_POSITIVE) {
            if (lane == 0) e[l] = xl;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const int k = lane + 32 * s;
                if (k < i) {
                    a[i + k * LD] = 0;
                    a[k + i * LD] = 0;
                }
            }
            __syncwarp();
            continue;
        }
#if DC_HH_UNSCALED
        const real f = unscaled ? xl : xl / sc;
#else
        const real f = xl / sc;
#endif
        const real g = sqrt(sigma + f * f);
        const real alpha = -copysign(g, f);
        const real beta = g * (g + fabs(f));
#if DC_HH_RCP
#if REAL_F64
        const real rbeta = rcp_rn_fast_f64(beta);
#else
        const real rbeta = rcp_rn_fast_f32(beta);
#endif
#endif
        real u[SLOTS], w[SLOTS];
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            u[s] = k < l ? t[s] : (k == l ? f - alpha : (real)0);
#if DC_HH_RCP
            w[s] = u[s] * rbeta;
#elif DC_DIV_GUARD
            w[s] = k <= l ? u[s] / beta : (real)0;
#else
            w[s] = u[s] / beta;
#endif
            if (k < i) {
                a[i + k * LD] = u[s];
                a[k + i * LD] = w[s];
            }
        }
        if (lane == 0) e[l] = alpha * sc;
        __syncwarp();
        // p = A_i w (row r by lane r), K = w^T p / 2, q = p - K u.
        real p[SLOTS];
        real kk = 0;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int r = lane + 32 * s;
            p[s] = 0;
            if (r < i) {
                UNROLL_HH
                for (int c = 0; c < i; ++c) p[s] += a[r + c * LD] * a[c + i * LD];
            }
            kk += w[s] * p[s];
        }
#if DC_HH_QTB
        // u_i^T y (u_k = 0 for k >= i), as apply_q's dot.
        real dy = 0;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) dy += u[s] * y[s];
        warp_sum2(kk, dy);
        kk *= (real)0.5;
        // y <- H_i y = y - w (u^T y) (w_k = 0 for k >= i).
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) y[s] -= w[s] * dy;
#else
        kk = warp_sum(kk) * (real)0.5;
#endif
        real q[SLOTS];
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int r = lane + 32 * s;
            q[s] = p[s] - kk * u[s];
            if (r < i) qv[r] = q[s];
        }
        __syncwarp();
        // A_i -= q u^T + u q^T (both triangles, row r by lane r).
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int r = lane + 32 * s;
            if (r < i) {
                UNROLL_HH
                for (int c = 0; c < i; ++c) a[r + c * LD] -= q[s] * a[i + c * LD] + u[s] * qv[c];
            }
        }
        __syncwarp();
    }
    if (N >= 2 && lane == 0) e[0] = a[1];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int k = lane + 32 * s;
        if (k < N) d[k] = a[k + k * LD];
    }
    __syncwarp();
}

// y <- Q^T y (transpose = true) or Q y with the reflectors left in a; y: lane k holds
// y_k in slot k / 32.
__device__ void apply_q(const real* a, real (&y)[SLOTS], bool transpose, int lane) {
    ROLL_QT
    for (int step = 0; step < N - 2; ++step) {
        const int i = transpose ? N - 1 - step : 2 + step;
        real dot = 0;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            if (k < i) dot += a[i + k * LD] * y[s];
        }
        dot = warp_sum(dot);
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            if (k < i) y[s] -= a[k + i * LD] * dot;
        }
    }
}

// The reflectors per lane (lane k: entries k + 32 s of u_i and w_i, i = 2..N-1), kept in
// local memory (dynamically indexed, so never in registers) while stedc reuses the
// shared array that held them.
struct Reflectors {
    real u[SLOTS][N];
    real w[SLOTS][N];
};

__device__ void save_reflectors(const real* a, Reflectors& h, int lane) {
#pragma unroll 1
    for (int i = 2; i < N; ++i) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            h.u[s][i] = k < i ? a[i + k * LD] : (real)0;
            h.w[s][i] = k < i ? a[k + i * LD] : (real)0;
        }
    }
}

// apply_q with the reflectors from `h` (same operations in the same order).
__device__ void apply_q_saved(const Reflectors& h, real (&y)[SLOTS], bool transpose, int lane) {
#if DC_QS_PREFETCH > 0
    // Rolled over blocks of QB steps; the next block's reflector entries are loaded
    // (from local memory) while this block runs. Same operations in the same order.
    constexpr int QB = DC_QS_PREFETCH;
    constexpr int STEPS = N - 2;
    real ub[QB][SLOTS], wb[QB][SLOTS];
#pragma unroll
    for (int t = 0; t < QB; ++t) {
        const int st = t < STEPS ? t : STEPS - 1;
        const int i = transpose ? N - 1 - st : 2 + st;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            ub[t][s] = h.u[s][i];
            wb[t][s] = h.w[s][i];
        }
    }
#pragma unroll 1
    for (int b0 = 0; b0 < STEPS; b0 += QB) {
        real un[QB][SLOTS], wn[QB][SLOTS];
#pragma unroll
        for (int t = 0; t < QB; ++t) {
            const int st = b0 + QB + t < STEPS ? b0 + QB + t : STEPS - 1;
            const int i = transpose ? N - 1 - st : 2 + st;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                un[t][s] = h.u[s][i];
                wn[t][s] = h.w[s][i];
            }
        }
#pragma unroll
        for (int t = 0; t < QB; ++t) {
            const int step = b0 + t;
            if (step < STEPS) {
                const int i = transpose ? N - 1 - step : 2 + step;
                real dot = 0;
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int k = lane + 32 * s;
                    if (k < i) dot += ub[t][s] * y[s];
                }
                dot = warp_sum(dot);
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int k = lane + 32 * s;
                    if (k < i) y[s] -= wb[t][s] * dot;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < QB; ++t)
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                ub[t][s] = un[t][s];
                wb[t][s] = wn[t][s];
            }
    }
    return;
#endif
#if DC_UNROLL_QV
    UNROLL_QV
#else
    ROLL_QS
#endif
    for (int step = 0; step < N - 2; ++step) {
        const int i = transpose ? N - 1 - step : 2 + step;
        real dot = 0;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            if (k < i) dot += h.u[s][i] * y[s];
        }
        dot = warp_sum(dot);
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int k = lane + 32 * s;
            if (k < i) y[s] -= h.w[s][i] * dot;
        }
    }
}

// ---------------------------------------------------------------------------------
// Secular equation (secular.rs), one root per lane; d, z in shared memory. A root is
// returned as (origin, tau): lambda = d[origin] + tau, d_j - lambda = (d_j - d_origin) - tau.
// ---------------------------------------------------------------------------------
// The divisions by sec_div<FAST> (keys tracked in kmin, kmax); FAST = false: `/`.
template <bool FAST>
__device__ __forceinline__ real root_between_t(real a, real b, real c, unsigned& kmin, unsigned& kmax) {
    real disc = sqrt(fabs(a * a - (real)4 * b * c));
    if (a <= (real)0) return sec_div<FAST>(a - disc, (real)2 * c, kmin, kmax);
    return sec_div<FAST>((real)2 * b, a + disc, kmin, kmax);
}
template <bool FAST>
__device__ __forceinline__ real root_right_t(real a, real b, real c, unsigned& kmin, unsigned& kmax) {
    real disc = sqrt(fabs(a * a - (real)4 * b * c));
    if (a >= (real)0) return sec_div<FAST>(a + disc, (real)2 * c, kmin, kmax);
    return sec_div<FAST>((real)2 * b, a - disc, kmin, kmax);
}
__device__ __forceinline__ real root_between(real a, real b, real c) {
    unsigned u0 = 0, u1 = 0;
    return root_between_t<false>(a, b, c, u0, u1);
}
__device__ __forceinline__ real root_right(real a, real b, real c) {
    unsigned u0 = 0, u1 = 0;
    return root_right_t<false>(a, b, c, u0, u1);
}

__device__ void two_poles(int i, const real* d, const real* z, real rho, int* origin, real* tau) {
    const real two = 2;
    real gap = d[1] - d[0];
    real w0 = z[0] * z[0];
    real w1 = z[1] * z[1];
    bool origin_left = i == 0 && gap + two * rho * (w1 - w0) >= (real)0;
    if (origin_left) {
        real a = gap + rho * (w0 + w1);
        real b = rho * w0 * gap;
        *origin = 0;
        *tau = root_between(a, b, (real)1);
        return;
    }
    real a = rho * (w0 + w1) - gap;
    real b = -(rho * w1 * gap);
    *origin = 1;
    *tau = i == 0 ? root_between(a, b, (real)1) : root_right(a, b, (real)1);
}

struct Evaluation {
    real f, d_left, d2_left, d_a, d_b, d_right, d2_right, err, delta_a, delta_b;
};

// Pole j's terms of the secular evaluation at lambda = d_origin + tau: dj = d_j - lambda
// (as (d_j - d_origin) - tau), z_j^2 / dj and the derivative terms (z_j / dj)^2 and
// (z_j / dj)^2 / dj; the reciprocal by sec_rcp<FAST>.
struct PoleTerms {
    real dj, term, deriv, deriv2;
};
template <bool FAST>
__device__ __forceinline__ PoleTerms pole_terms(const real* d, const real* z, int j, real d_origin, real tau,
                                                unsigned& kmin, unsigned& kmax) {
    PoleTerms p;
    p.dj = (d[j] - d_origin) - tau;
    const real inv = sec_rcp<FAST>(p.dj, kmin, kmax);
    const real zj = z[j];
    const real t = zj * inv;
    p.term = zj * t;
    p.deriv = t * t;
    p.deriv2 = p.deriv * inv;
    return p;
}

// f at lambda = d[origin] + tau with the derivative groups of model_root; one division
// per pole (the reciprocal of d_j - lambda).
template <bool FAST>
__device__ DC_SEC_INLINE Evaluation sec_evaluate_t(const real* d, const real* z, int k, real rhoinv, int origin, int a,
                                                     real tau, bool* in_range) {
    unsigned kmin = DC_RCP_KEY_LO, kmax = 0;
    real f = rhoinv, d_left = 0, d2_left = 0, d_a = 0, d_b = 0, d_right = 0, d2_right = 0, abs_sum = 0;
    real delta_a = 0, delta_b = 0;
    const real d_origin = d[origin];
#if DC_EVAL_MASKS
    if constexpr (FAST) {
        // The side sums by 0/1 factors (fma(1, x, s) = s + x, fma(0, x, s) = s for finite
        // x), poles a and a + 1 redone after the loop: the values of the loop below, bit
        // for bit, where every sum is finite (else the caller's exact evaluation runs).
        UNROLL_SEC
        for (int j = 0; j < k; ++j) {
            const PoleTerms p = pole_terms<true>(d, z, j, d_origin, tau, kmin, kmax);
            f += p.term;
            abs_sum += fabs(p.term);
            const real ml = j < a ? (real)1 : (real)0;
            const real mr = j > a + 1 ? (real)1 : (real)0;
            d_left = fma(ml, p.deriv, d_left);
            d2_left = fma(ml, p.deriv2, d2_left);
            d_right = fma(mr, p.deriv, d_right);
            d2_right = fma(mr, p.deriv2, d2_right);
        }
        delta_a = (d[a] - d_origin) - tau;
        const real ta = z[a] * sec_rcp<true>(delta_a, kmin, kmax);
        d_a = ta * ta;
        delta_b = (d[a + 1] - d_origin) - tau;
        const real tb = z[a + 1] * sec_rcp<true>(delta_b, kmin, kmax);
        d_b = tb * tb;
    } else
#endif
    UNROLL_SEC
    for (int j = 0; j < k; ++j) {
        const PoleTerms p = pole_terms<FAST>(d, z, j, d_origin, tau, kmin, kmax);
        f += p.term;
        abs_sum += fabs(p.term);
        const bool left = j < a, right = j > a + 1;
        d_left += left ? p.deriv : (real)0;
        d2_left += left ? p.deriv2 : (real)0;
        d_right += right ? p.deriv : (real)0;
        d2_right += right ? p.deriv2 : (real)0;
        if (j == a) {
            d_a = p.deriv;
            delta_a = p.dj;
        }
        if (j == a + 1) {
            d_b = p.deriv;
            delta_b = p.dj;
        }
    }
    Evaluation ev;
    ev.f = f;
    ev.d_left = d_left;
    ev.d2_left = d2_left;
    ev.d_a = d_a;
    ev.d_b = d_b;
    ev.d_right = d_right;
    ev.d2_right = d2_right;
    ev.delta_a = delta_a;
    ev.delta_b = delta_b;
    ev.err = (real)8 * (abs_sum + rhoinv) + fabs(tau) * (((d_left + d_a) + d_b) + d_right);
#if DC_EVAL_MASKS
    if (FAST)
        *in_range = rcp_keys_ok(kmin, kmax) && finite(d_left) && finite(d2_left) && finite(d_right) &&
                    finite(d2_right);
#else
    if (FAST) *in_range = rcp_keys_ok(kmin, kmax);
#endif
    return ev;
}

// The evaluation with true divisions (out of line: taken only when a distance d_j - lambda
// lies outside the range of rcp_rn_fast).
__device__ __noinline__ Evaluation sec_evaluate_exact(const real* d, const real* z, int k, real rhoinv, int origin, int a,
                                                      real tau) {
    return sec_evaluate_t<false>(d, z, k, rhoinv, origin, a, tau, nullptr);
}

__device__ EVAL_INLINE Evaluation sec_evaluate(const real* d, const real* z, int k, real rhoinv, int origin, int a, real tau) {
#if DC_FAST_RCP
    bool ok = true;
    Evaluation ev = sec_evaluate_t<true>(d, z, k, rhoinv, origin, a, tau, &ok);
    if (!ok) ev = sec_evaluate_exact(d, z, k, rhoinv, origin, a, tau);
    return ev;
#else
    return sec_evaluate_t<false>(d, z, k, rhoinv, origin, a, tau, nullptr);
#endif
}

__device__ __forceinline__ real bisect(real lo, real hi) {
    const real four = 4;
    if (lo > (real)0 && hi > four * lo) return sqrt(lo) * sqrt(hi);
    if (hi < (real)0 && lo < four * hi) return -(sqrt(-lo) * sqrt(-hi));
    return (lo + hi) / (real)2;
}

// Returns false when the model has no root right of the poles (last root, c <= 0).
template <bool FAST>
__device__ __forceinline__ bool two_pole_root_t(real c, real pa, real s, real pb, real sb, bool last, real* out,
                                                unsigned& kmin, unsigned& kmax) {
    real a = c * (pa + pb) + s + sb;
    real b = c * pa * pb + s * pb + sb * pa;
    if (!last) {
        *out = root_between_t<FAST>(a, b, c, kmin, kmax);
        return true;
    }
    if (c > (real)0) {
        *out = root_right_t<FAST>(a, b, c, kmin, kmax);
        return true;
    }
    return false;
}
__device__ __forceinline__ bool two_pole_root(real c, real pa, real s, real pb, real sb, bool last, real* out) {
    unsigned u0 = 0, u1 = 0;
    return two_pole_root_t<false>(c, pa, s, pb, sb, last, out, u0, u1);
}

__device__ real middle_way_root(const Evaluation& ev, const real* d, int origin, int a, bool last, real tau) {
    real f = ev.f;
    real p = ev.delta_a;
    real q = ev.delta_b;
    real dpsi = ev.d_left + ev.d_a;
    real dphi = ev.d_b + ev.d_right;
    real c = f - p * dpsi - q * dphi;
    real out;
    if (two_pole_root(c, d[a] - d[origin], dpsi * p * p, d[a + 1] - d[origin], dphi * q * q, last, &out)) return out;
    return tau - f / (dpsi + dphi);
}

// Fixed slots: 0 left remainder, 1 pole a, 2 pole a+1, 3 right remainder (present[]).
template <bool FAST>
__device__ DC_SEC_INLINE real model_root_t(const Evaluation& ev, const real* d, const real* z, int origin, int a,
                                             bool last, real tau, real hi_outer, bool* in_range) {
    unsigned kmin = DC_RCP_KEY_LO, kmax = 0, dmin = DC_DIV_KEY_LO, dmax = 0;
    real pos[4], weights[4], dist[4];
    bool present[4];
#if DC_DIV_GUARD
    real p_left = ev.d_left > (real)0 ? sec_div<FAST && DC_FAST_MDIV>(ev.d_left, ev.d2_left, dmin, dmax) : (real)0;
#else
    real p_left = ev.d_left / ev.d2_left;
#endif
    present[0] = ev.d_left > (real)0 && finite(p_left);
    dist[0] = p_left;
    pos[0] = p_left + tau;
    weights[0] = ev.d_left * p_left * p_left;
    present[1] = true;
    dist[1] = ev.delta_a;
    pos[1] = d[a] - d[origin];
    weights[1] = z[a] * z[a];
    present[2] = true;
    dist[2] = ev.delta_b;
    pos[2] = d[a + 1] - d[origin];
    weights[2] = z[a + 1] * z[a + 1];
#if DC_DIV_GUARD
    real p_right = ev.d_right > (real)0 ? sec_div<FAST && DC_FAST_MDIV>(ev.d_right, ev.d2_right, dmin, dmax) : (real)0;
#else
    real p_right = ev.d_right / ev.d2_right;
#endif
    present[3] = ev.d_right > (real)0 && finite(p_right);
    dist[3] = p_right;
    pos[3] = p_right + tau;
    weights[3] = ev.d_right * p_right * p_right;
    real c = ev.f;
#pragma unroll
    for (int l = 0; l < 4; ++l)
        if (present[l]) c -= sec_div<FAST && DC_FAST_MDIV>(weights[l], dist[l], dmin, dmax);
    real lo, hi;
    if (last) {
        lo = pos[2];
        hi = hi_outer;
    } else {
        lo = pos[1];
        hi = pos[2];
    }
    real t = tau;
    for (int it = 0; it < MODEL_ITERATIONS; ++it) {
        real g = c, g_abs = fabs(c), dpsi = 0, dphi = 0;
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            if (present[l]) {
                real inv = sec_rcp<FAST>(pos[l] - t, kmin, kmax);
                real r = weights[l] * inv;
                g += r;
                g_abs += fabs(r);
                if (l <= 1) dpsi += r * inv;
                else dphi += r * inv;
            }
        }
        if (fabs(g) <= REAL_EPS * g_abs) break;
        if (g < (real)0) lo = t;
        else hi = t;
        real dg = dpsi + dphi;
        real p = pos[1] - t;
        real q = pos[2] - t;
        real cm = g - p * dpsi - q * dphi;
        real next;
        if (!two_pole_root_t<FAST && DC_FAST_MDIV>(cm, pos[1], dpsi * p * p, pos[2], dphi * q * q, last, &next, dmin,
                                                   dmax))
            next = t - g / dg;
        if (!finite(next) || g * (next - t) > (real)0) next = t - g / dg;
        if (next == t) break;
        if (!(next > lo && next < hi)) next = bisect(lo, hi);
        bool done = fabs(next - t) <= REAL_EPS * fabs(next);
        t = next;
        if (done) break;
    }
    if (FAST) *in_range = rcp_keys_ok(kmin, kmax) && div_keys_ok(dmin, dmax);
    return t;
}

// The model solve with true divisions (out of line). The evaluation comes as the fields
// that model_root_t reads, so that the caller's evaluation can stay in registers.
__device__ __noinline__ real model_root_exact(real f, real d_left, real d2_left, real d_right, real d2_right,
                                              real delta_a, real delta_b, const real* d, const real* z, int origin,
                                              int a, bool last, real tau, real hi_outer) {
    Evaluation ev;
    ev.f = f;
    ev.d_left = d_left;
    ev.d2_left = d2_left;
    ev.d_right = d_right;
    ev.d2_right = d2_right;
    ev.delta_a = delta_a;
    ev.delta_b = delta_b;
    ev.d_a = 0;
    ev.d_b = 0;
    ev.err = 0;
    return model_root_t<false>(ev, d, z, origin, a, last, tau, hi_outer, nullptr);
}

// Root of the rational model (see model_root_t); the model's reciprocals as in sec_evaluate.
__device__ __forceinline__ real model_root(const Evaluation& ev, const real* d, const real* z, int origin, int a,
                                           bool last, real tau, real hi_outer) {
#if DC_FAST_RCP
    bool ok = true;
    real t = model_root_t<true>(ev, d, z, origin, a, last, tau, hi_outer, &ok);
    if (!ok)
        t = model_root_exact(ev.f, ev.d_left, ev.d2_left, ev.d_right, ev.d2_right, ev.delta_a, ev.delta_b, d, z, origin,
                             a, last, tau, hi_outer);
    return t;
#else
    return model_root_t<false>(ev, d, z, origin, a, last, tau, hi_outer, nullptr);
#endif
}

// Root i of 1/rho + sum_j z_j^2/(d_j - lambda) = 0 as (origin, tau); false if not converged.
__device__ bool secular_root(int i, const real* d, const real* z, int k, real rho, int* origin_out, real* tau_out) {
    if (k == 1) {
        *origin_out = 0;
        *tau_out = rho * z[0] * z[0];
        return true;
    }
    if (k == 2) {
        two_poles(i, d, z, rho, origin_out, tau_out);
        return true;
    }
    const bool last = i == k - 1;
    const int a = last ? k - 2 : i;
    const real two = 2, four = 4;
    const real rhoinv = (real)1 / rho;
    int origin;
    real tau, lo, hi;
#if DC_ONE_EVAL
    // The first pass evaluates f at the midpoint (of (d_{k-1}, d_{k-1} + rho z^T z] for the
    // last root), whose sign halves the bracket and picks the origin; every later pass at
    // the step's tau. One copy of the pole loop.
    real gap = 0, mid, ub = 0;
    if (!last) {
        gap = d[i + 1] - d[i];
        mid = gap / two;
        origin = i;
    } else {
        real znorm2 = 0;
        ROLL_COLD
        for (int j = 0; j < k; ++j) znorm2 += z[j] * z[j];
        ub = rho * znorm2;
        mid = ub / two;
        origin = k - 1;
    }
    tau = mid;
    lo = 0;
    hi = 0;
    const real half = 0.5;
    real f_lo = real_nan(), f_hi = real_nan();
    for (int iteration = 0; iteration <= SECULAR_MAX_ITERATIONS; ++iteration) {
        const Evaluation ev = sec_evaluate(d, z, k, rhoinv, origin, a, tau);
        if (iteration == 0) {
            if (!last) {
                if (ev.f >= (real)0) {
                    real right = 0;
                    ROLL_COLD
                    for (int j = i + 1; j < k; ++j) right += z[j] * z[j];
                    hi = mid;
                    lo = z[i] * z[i] / (two * (rhoinv + two * right / gap));
                } else {
                    real left = 0;
                    ROLL_COLD
                    for (int j = 0; j <= i; ++j) left += z[j] * z[j];
                    origin = i + 1;
                    tau = mid - gap;
                    lo = tau;
                    hi = -(z[i + 1] * z[i + 1] * gap / (four * left));
                }
            } else if (ev.f <= (real)0) {
                lo = mid;
                hi = ub;
            } else {
                lo = rho * z[k - 1] * z[k - 1] / two;
                hi = mid;
            }
            if (!(lo < hi)) {
                if (origin == i + 1 && !last) hi = 0;
                else lo = 0;
            }
        }
        real f = ev.f;
        if (fabs(f) <= REAL_EPS * ev.err) {
            *origin_out = origin;
            *tau_out = tau;
            return true;
        }
        if (iteration == SECULAR_MAX_ITERATIONS) break;
        bool stalled;
        if (f < (real)0) {
            stalled = fabs(f) > half * fabs(f_lo);
            lo = tau;
            f_lo = f;
        } else {
            stalled = fabs(f) > half * fabs(f_hi);
            hi = tau;
            f_hi = f;
        }
#if DC_ONE_BISECT
        real next = tau;
        bool bis = stalled;
        if (!stalled) {
            next = model_root(ev, d, z, origin, a, last, tau, hi);
            if (next == tau || !(next > lo && next < hi)) {
                next = middle_way_root(ev, d, origin, a, last, tau);
                bis = next != tau && !(next > lo && next < hi);
            }
        }
        if (bis) next = bisect(lo, hi);
#else
        real next = stalled ? bisect(lo, hi) : model_root(ev, d, z, origin, a, last, tau, hi);
        if (!stalled && (next == tau || !(next > lo && next < hi))) {
            next = middle_way_root(ev, d, origin, a, last, tau);
            if (next != tau && !(next > lo && next < hi)) next = bisect(lo, hi);
        }
#endif
        if (next == tau) {
            *origin_out = origin;
            *tau_out = tau;
            return true;
        }
        tau = next;
    }
#else
    Evaluation ev;
    if (!last) {
        real gap = d[i + 1] - d[i];
        real mid = gap / two;
        ev = sec_evaluate(d, z, k, rhoinv, i, a, mid);
        if (ev.f >= (real)0) {
            real right = 0;
            ROLL_COLD
            for (int j = i + 1; j < k; ++j) right += z[j] * z[j];
            origin = i;
            tau = mid;
            hi = mid;
            lo = z[i] * z[i] / (two * (rhoinv + two * right / gap));
        } else {
            real left = 0;
            ROLL_COLD
            for (int j = 0; j <= i; ++j) left += z[j] * z[j];
            origin = i + 1;
            tau = mid - gap;
            lo = tau;
            hi = -(z[i + 1] * z[i + 1] * gap / (four * left));
        }
    } else {
        real znorm2 = 0;
        ROLL_COLD
        for (int j = 0; j < k; ++j) znorm2 += z[j] * z[j];
        real ub = rho * znorm2;
        real mid = ub / two;
        origin = k - 1;
        tau = mid;
        ev = sec_evaluate(d, z, k, rhoinv, origin, a, mid);
        if (ev.f <= (real)0) {
            lo = mid;
            hi = ub;
        } else {
            lo = rho * z[k - 1] * z[k - 1] / two;
            hi = mid;
        }
    }
    if (!(lo < hi)) {
        if (origin == i + 1 && !last) hi = 0;
        else lo = 0;
    }
    const real half = 0.5;
    real f_lo = real_nan(), f_hi = real_nan();
    for (int iteration = 0; iteration <= SECULAR_MAX_ITERATIONS; ++iteration) {
        real f = ev.f;
        if (fabs(f) <= REAL_EPS * ev.err) {
            *origin_out = origin;
            *tau_out = tau;
            return true;
        }
        if (iteration == SECULAR_MAX_ITERATIONS) break;
        bool stalled;
        if (f < (real)0) {
            stalled = fabs(f) > half * fabs(f_lo);
            lo = tau;
            f_lo = f;
        } else {
            stalled = fabs(f) > half * fabs(f_hi);
            hi = tau;
            f_hi = f;
        }
        real next = stalled ? bisect(lo, hi) : model_root(ev, d, z, origin, a, last, tau, hi);
        if (!stalled && (next == tau || !(next > lo && next < hi))) {
            next = middle_way_root(ev, d, origin, a, last, tau);
            if (next != tau && !(next > lo && next < hi)) next = bisect(lo, hi);
        }
        if (next == tau) {
            *origin_out = origin;
            *tau_out = tau;
            return true;
        }
        tau = next;
        ev = sec_evaluate(d, z, k, rhoinv, origin, a, tau);
    }
#endif
    return false;
}

// ---------------------------------------------------------------------------------
// Divide and conquer (divide_conquer.rs), all nodes of one depth at once.
// ---------------------------------------------------------------------------------
struct Ws {
    real* z;  // N x LD: eigenvectors, column c at z + c * LD
    real* w;  // N x LD: per node, W^T in the node's diagonal block (w[(f + j) + (f + l) LD] = W[l][j])
    // Indexed by row: entry f + k belongs to the node starting at row f.
    real *dsrt, *zsrt;  // poles and updating vector in sorted order
    real *dk, *zk;      // non-deflated poles (scaled) and weights
    real* zh;           // Gu-Eisenstat updating vector
    real* vals;         // new eigenvalues: K roots, then the deflated poles
    real* stau;         // tau of root j (its origin in sorg)
    real *rotc, *rots;  // deflation rotations (sequential path)
    int* perm;          // sorted position -> child-local column
    int* ord;           // sorted positions: K kept, then the deflated ones
    int* col;           // column of z holding entry ord[.]
    int* rnk;           // final position of vals[.]
    int* sorg;          // origin of root j
    int *rotp, *rotk;   // rotation pairs (sorted positions)
    int* cnt;           // [f]: K of the node starting at f (sequential path)
    int* rcnt;          // [f]: rotations of the node starting at f
};

// The node of depth `depth` of the division tree of block [bs, bs + bsz) that contains
// row i: returns its length (0 where the path ends in a leaf above that depth) and
// its first row in *first.
__device__ __forceinline__ int node_at(int i, int bs, int bsz, int depth, int* first) {
    int f = 0, len = bsz;
    const int t = i - bs;
    for (int dd = 0; dd < depth; ++dd) {
        if (len <= 2) return 0;
        const int m = len / 2;
        if (t - f < m) len = m;
        else {
            f += m;
            len -= m;
        }
    }
    *first = bs + f;
    return len;
}

__device__ void solve_2x2(int s, real* d, const real* e, real* z) {
    const real a = d[s], c = d[s + 1], b = e[s];
    real t, cs, sn;
    if (b == (real)0) {
        t = 0;
        cs = 1;
        sn = 0;
    } else {
        const real two = 2;
        real tau = (c - a) / (two * b);
        real big = (real)1 / sqrt(REAL_EPS);
        if (fabs(tau) > big) t = (real)1 / (two * tau);
        else t = copysign((real)1, tau) / (fabs(tau) + sqrt((real)1 + tau * tau));
        cs = (real)1 / sqrt((real)1 + t * t);
        sn = t * cs;
    }
    real la = a - t * b;
    real lc = c + t * b;
    real l0, l1, v00, v01, v10, v11;
    if (la <= lc) {
        l0 = la; v00 = cs; v01 = -sn;
        l1 = lc; v10 = sn; v11 = cs;
    } else {
        l0 = lc; v00 = sn; v01 = cs;
        l1 = la; v10 = cs; v11 = -sn;
    }
    d[s] = l0;
    d[s + 1] = l1;
    z[s + s * LD] = v00;
    z[s + 1 + s * LD] = v01;
    z[s + (s + 1) * LD] = v10;
    z[s + 1 + (s + 1) * LD] = v11;
}

// Z(rows of the node, its columns) = [Q_kept W, Q_deflated] with the columns placed by
// rnk: each lane computes its row's new entries in registers (JB >= node length).
template <int JB>
__device__ void zw_product(Ws& ws, const bool (&act)[SLOTS], const int (&nf)[SLOTS], const int (&nl)[SLOTS],
                           const int (&kk)[SLOTS], int lane) {
    real* z = ws.z;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (!act[s]) continue;
        const int r = lane + 32 * s;
        const int f = nf[s], len = nl[s], k = kk[s];
        const int* col = ws.col + f;
        real acc[JB];
#pragma unroll
        for (int j = 0; j < JB; ++j) {
            acc[j] = 0;
            if (j >= k && j < len) acc[j] = z[r + col[j] * LD];
        }
        const real* wblk = ws.w + f + f * LD;
        for (int l = 0; l < k; ++l) {
            const real qv = z[r + col[l] * LD];
            const real* wr = wblk + l * LD;
#pragma unroll
            for (int j = 0; j < JB; ++j)
                if (j < k) acc[j] += qv * wr[j];
        }
        const int* rk = ws.rnk + f;
#pragma unroll
        for (int j = 0; j < JB; ++j)
            if (j < len) z[r + (f + rk[j]) * LD] = acc[j];
    }
}

#if DC_W_REGS
// DC_W_REGS: column j of W (lane f + j, j < k) in registers, then Z(rows of the node, its
// columns) = [Q_kept W, Q_deflated] placed by rnk, DC_ROW_CHUNK rows at a time (row r of
// the new Z depends on row r of Q only, so it is written over Q after a warp barrier).
// JB >= node length. The values and their order are those of the W columns and
// zw_product above: W entry, scaling by vmax, by 1 / sqrt(norm2); acc over l ascending.
template <int JB>
__device__ void w_product_regs(Ws& ws, const bool (&act)[SLOTS], const int (&nf)[SLOTS], const int (&nl)[SLOTS],
                               const int (&kk)[SLOTS], int lmax, int lane) {
    static_assert(SLOTS == 1, "DC_W_REGS needs N <= 32");
    real* z = ws.z;
    const int i = lane;
    const bool on = act[0];
    const int f = nf[0], len = nl[0], k = kk[0], j = i - f;
    real wcol[JB];
#pragma unroll
    for (int l = 0; l < JB; ++l) wcol[l] = 0;
    if (on && j < k) {
        if (k == 1) {
            wcol[0] = 1;
        } else {
            const real* dkf = ws.dk + f;
            const real dorg = dkf[ws.sorg[i]], tau = ws.stau[i];
            real vmax = 0;
#if DC_WCOL_LOCAL
            // The entries go through a per-lane array in local memory so that the
            // divisions stay in two rolled loops (one copy of each in the code).
            real xs[JB];
#pragma unroll 1
            for (int l = 0; l < k; ++l) {
                const real x = ws.zh[f + l] / ((dkf[l] - dorg) - tau);
                xs[l] = x;
                vmax = fmax(vmax, fabs(x));
            }
            real norm2 = 0;
#pragma unroll 1
            for (int l = 0; l < k; ++l) {
                const real x = xs[l] / vmax;
                xs[l] = x;
                norm2 += x * x;
            }
            const real inv = (real)1 / sqrt(norm2);
#pragma unroll
            for (int l = 0; l < JB; ++l)
                if (l < k) wcol[l] = xs[l] * inv;
#else
#pragma unroll
            for (int l = 0; l < JB; ++l) {
                if (l < k) {
                    const real x = ws.zh[f + l] / ((dkf[l] - dorg) - tau);
                    wcol[l] = x;
                    vmax = fmax(vmax, fabs(x));
                }
            }
            real norm2 = 0;
#pragma unroll
            for (int l = 0; l < JB; ++l) {
                if (l < k) {
                    const real x = wcol[l] / vmax;
                    wcol[l] = x;
                    norm2 += x * x;
                }
            }
            const real inv = (real)1 / sqrt(norm2);
#pragma unroll
            for (int l = 0; l < JB; ++l)
                if (l < k) wcol[l] *= inv;
#endif
        }
    }
    // Column of the new Z written by this lane, source column of a deflated one.
    const int dst = on && j < len ? f + ws.rnk[i] : 0;
    const int srcc = on && j >= k && j < len ? ws.col[i] : 0;
    const int* col = ws.col + f;
    for (int t0 = 0; t0 < lmax; t0 += DC_ROW_CHUNK) {
        real acc[DC_ROW_CHUNK];
#pragma unroll
        for (int t = 0; t < DC_ROW_CHUNK; ++t) {
            acc[t] = 0;
            if (on && j >= k && j < len && t0 + t < len) acc[t] = z[(f + t0 + t) + srcc * LD];
        }
        if (on && j < k) {
#pragma unroll
            for (int l = 0; l < JB; ++l) {
                if (l < k) {
                    const real* qc = z + f + t0 + col[l] * LD;
                    const real wl = wcol[l];
#pragma unroll
                    for (int t = 0; t < DC_ROW_CHUNK; ++t)
                        if (t0 + t < len) acc[t] += qc[t] * wl;
                }
            }
        }
        __syncwarp();
        if (on && j < len) {
#pragma unroll
            for (int t = 0; t < DC_ROW_CHUNK; ++t)
                if (t0 + t < len) z[(f + t0 + t) + dst * LD] = acc[t];
        }
        __syncwarp();
    }
}
#endif

// Gu-Eisenstat product of lane l (see merge_level): prod over j != l of
// delta_j / (d_j - d_l) times delta_l (in ascending j, as the CPU); *ok (FAST) false if a
// division left the range.
template <bool FAST>
__device__ __forceinline__ real ge_product(const real* dkf, const int* sorg, const real* stau, int l, int k, real prod,
                                           bool* ok) {
    const real dl = dkf[l];
    unsigned kmin = DC_DIV_KEY_LO, kmax = 0;
#if DC_ROLL_COLD && !DC_UNROLL_GW
#pragma unroll 1
#else
    UNROLL_GW
#endif
    for (int j = 0; j < k; ++j) {
        // j = l contributes the factor 1 / 1 (exact): no branch in the loop.
        const bool self = j == l;
        const real delta = self ? (real)1 : (dl - dkf[sorg[j]]) - stau[j];
        prod *= sec_div<FAST>(delta, self ? (real)1 : dl - dkf[j], kmin, kmax);
    }
    if (FAST) *ok = div_keys_ok(kmin, kmax);
    return prod;
}
__device__ __noinline__ real ge_product_exact(const real* dkf, const int* sorg, const real* stau, int l, int k,
                                              real prod) {
    return ge_product<false>(dkf, sorg, stau, l, k, prod, nullptr);
}

// Column of W for root (dorg, tau): wc[l LD] = zh_l / (d_l - lambda), scaled by the largest
// magnitude, normalised; *ok (FAST) false if a division left the range.
template <bool FAST>
__device__ __forceinline__ void w_column(real* wc, const real* dkf, const real* zh, int k, real dorg, real tau,
                                         bool* ok) {
    unsigned kmin = DC_DIV_KEY_LO, kmax = 0;
    real vmax = 0;
    UNROLL_GW
    for (int l = 0; l < k; ++l) {
        const real x = sec_div<FAST>(zh[l], (dkf[l] - dorg) - tau, kmin, kmax);
        wc[l * LD] = x;
        vmax = fmax(vmax, fabs(x));
    }
    real norm2 = 0;
    UNROLL_GW
    for (int l = 0; l < k; ++l) {
        const real x = sec_div<FAST>(wc[l * LD], vmax, kmin, kmax);
        wc[l * LD] = x;
        norm2 += x * x;
    }
    const real inv = (real)1 / sqrt(norm2);
    for (int l = 0; l < k; ++l) wc[l * LD] *= inv;
    if (FAST) *ok = div_keys_ok(kmin, kmax);
}
__device__ __noinline__ void w_column_exact(real* wc, const real* dkf, const real* zh, int k, real dorg, real tau) {
    w_column<false>(wc, dkf, zh, k, dorg, tau, nullptr);
}

// Z(rows of each active node, its columns) = [Q_kept W, Q_deflated] (see zw_product).
__device__ __forceinline__ void zw_dispatch(Ws& ws, const bool (&act)[SLOTS], const int (&nf)[SLOTS],
                                            const int (&nl)[SLOTS], const int (&kk)[SLOTS], int lane) {
    int lmax = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) lmax = max(lmax, act[s] ? nl[s] : 0);
    lmax = warp_max_int(lmax);
#if DC_W_REGS && DC_WREG_JB == 1
    w_product_regs<N>(ws, act, nf, nl, kk, lmax, lane);
#elif DC_W_REGS && DC_WREG_JB == 2
    if (lmax <= 8) w_product_regs<(N < 8 ? N : 8)>(ws, act, nf, nl, kk, lmax, lane);
    else w_product_regs<N>(ws, act, nf, nl, kk, lmax, lane);
#elif DC_W_REGS
    if (lmax <= 4) w_product_regs<(N < 4 ? N : 4)>(ws, act, nf, nl, kk, lmax, lane);
    else if (lmax <= 8) w_product_regs<(N < 8 ? N : 8)>(ws, act, nf, nl, kk, lmax, lane);
    else if (lmax <= 16) w_product_regs<(N < 16 ? N : 16)>(ws, act, nf, nl, kk, lmax, lane);
    else w_product_regs<N>(ws, act, nf, nl, kk, lmax, lane);
#elif DC_ZW_ONE
    zw_product<N>(ws, act, nf, nl, kk, lane);
#else
    if (lmax <= 4) zw_product<(N < 4 ? N : 4)>(ws, act, nf, nl, kk, lane);
    else if (lmax <= 8) zw_product<(N < 8 ? N : 8)>(ws, act, nf, nl, kk, lane);
    else if (lmax <= 16) zw_product<(N < 16 ? N : 16)>(ws, act, nf, nl, kk, lane);
    else if (lmax <= 32) zw_product<(N < 32 ? N : 32)>(ws, act, nf, nl, kk, lane);
    else zw_product<N>(ws, act, nf, nl, kk, lane);
#endif
}

// Merges every node of depth `depth` (length > 2) from its children (divide_conquer.rs
// merge). bs, bsz: the unreduced block of each slot's row. False if a secular equation
// did not converge or gave a non-finite root.
// skip_z (the top merge of a single unreduced block, DC_TOP_NO_Z): Z = Q W is not
// formed; ws.z keeps Q (the children's eigenvectors, deflation rotations applied, column
// col[j] for entry j), ws.w keeps W^T of the kept entries and ws.col, ws.rnk stay valid
// for truncated_solve_top; *ktop receives K.
__device__ bool merge_level(int depth, real* d, const real* e, Ws& ws, const int (&bs)[SLOTS],
                            const int (&bsz)[SLOTS], int lane, bool skip_z, int* ktop) {
    const real inv_sqrt2 = (real)0.7071067811865476;
    bool act[SLOTS];
    int nf[SLOTS], nl[SLOTS], n1[SLOTS], kk[SLOTS];
    bool any = false;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        nf[s] = 0;
        nl[s] = i < N ? node_at(i, bs[s], bsz[s], depth, &nf[s]) : 0;
        act[s] = nl[s] > 2;
        n1[s] = nl[s] / 2;
        any |= act[s];
    }
    if (!warp_any(any)) return true;
    // Merge the two ascending lists of child eigenvalues (stable, left child first).
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        const int f = nf[s], a = i - f;
        const real v = d[i];
        int pos;
        if (a < n1[s]) {
            int c = 0;
            ROLL_COLD
            for (int b = n1[s]; b < nl[s]; ++b) c += d[f + b] < v;
            pos = a + c;
        } else {
            int c = 0;
            ROLL_COLD
            for (int b = 0; b < n1[s]; ++b) c += d[f + b] <= v;
            pos = a - n1[s] + c;
        }
        ws.perm[f + pos] = a;
    }
    __syncwarp();
    // Poles and updating vector u in sorted order.
    real rho[SLOTS], zs[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        rho[s] = 0;
        zs[s] = 0;
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        const int f = nf[s], m = n1[s];
        const real e_cut = e[f + m - 1];
        rho[s] = (real)2 * fabs(e_cut);
        const real sigma = copysign((real)1, e_cut);
        const int src = ws.perm[i];
        zs[s] = src < m ? ws.z[(f + m - 1) + (f + src) * LD] * inv_sqrt2
                        : sigma * ws.z[(f + m) + (f + src) * LD] * inv_sqrt2;
        ws.dsrt[i] = d[f + src];
        ws.zsrt[i] = zs[s];
    }
    __syncwarp();
    // Deflation (dlaed2): tol, small components, then close pairs of poles.
    real tol[SLOTS], dmax[SLOTS];
    bool defl[SLOTS], kept[SLOTS], close[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        tol[s] = 0;
        dmax[s] = 0;
        defl[s] = false;
        kept[s] = false;
        if (!act[s]) continue;
        real m = 0;
        ROLL_COLD
        for (int b = 0; b < nl[s]; ++b) m = fmax(m, fabs(ws.dsrt[nf[s] + b]));
        dmax[s] = m;
        tol[s] = (real)8 * REAL_EPS * fmax(m, rho[s]);
        defl[s] = rho[s] * fabs(zs[s]) <= tol[s];
        kept[s] = !defl[s];
    }
    const unsigned long long kmask = ballot64(kept);
    const unsigned long long dmask = ballot64(defl);
    bool any_close = false;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        close[s] = false;
        if (!kept[s]) continue;
        const int i = lane + 32 * s;
        const unsigned long long before = kmask & low_bits(i) & ~low_bits(nf[s]);
        if (before == 0ULL) continue;
        const int p = 63 - __clzll((long long)before);
        const real zp = ws.zsrt[p], zk = zs[s];
        const real tau = sqrt(zp * zp + zk * zk);
        const real c = zk / tau;
        const real sn = -(zp / tau);
        const real gap = ws.dsrt[i] - ws.dsrt[p];
        close[s] = fabs(gap * c * sn) <= tol[s];
        any_close |= close[s];
    }
    if (warp_any(any_close)) {
        // The sequential scan of dlaed2, one lane per node (close pairs modify the
        // poles and weights that the next test reads).
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int i = lane + 32 * s;
            if (!act[s] || i != nf[s]) continue;
            const int f = nf[s], len = nl[s];
            real* zsr = ws.zsrt + f;
            real* dsr = ws.dsrt + f;
            int nk = 0, nrot = 0, pending = -1;
            int* kl = ws.ord + f;
            // Deflated entries are collected at the end of ord (reversed, then flipped).
            int nd = 0;
            for (int k = 0; k < len; ++k) {
                if (rho[s] * fabs(zsr[k]) <= tol[s]) {
                    ws.col[f + nd++] = k;  // col: scratch for the deflated list here
                    continue;
                }
                if (pending < 0) {
                    pending = k;
                    continue;
                }
                const int p = pending;
                const real zp = zsr[p], zk = zsr[k];
                const real tau = sqrt(zp * zp + zk * zk);
                const real c = zk / tau;
                const real sn = -(zp / tau);
                const real gap = dsr[k] - dsr[p];
                if (fabs(gap * c * sn) <= tol[s]) {
                    zsr[k] = tau;
                    zsr[p] = 0;
                    ws.rotp[f + nrot] = p;
                    ws.rotk[f + nrot] = k;
                    ws.rotc[f + nrot] = c;
                    ws.rots[f + nrot] = sn;
                    ++nrot;
                    const real dp = dsr[p], dk = dsr[k];
                    dsr[p] = dp * c * c + dk * sn * sn;
                    dsr[k] = dp * sn * sn + dk * c * c;
                    ws.col[f + nd++] = p;
                } else {
                    kl[nk++] = p;
                }
                pending = k;
            }
            if (pending >= 0) kl[nk++] = pending;
            for (int t = 0; t < nd; ++t) kl[nk + t] = ws.col[f + t];
            ws.cnt[f] = nk;
            ws.rcnt[f] = nrot;
        }
        __syncwarp();
        // Rotations of the columns of z (row by lane), in the scan's order.
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            if (!act[s]) continue;
            const int r = lane + 32 * s;
            const int f = nf[s];
            kk[s] = ws.cnt[f];
            const int nrot = ws.rcnt[f];
            for (int t = 0; t < nrot; ++t) {
                const int cp = f + ws.perm[f + ws.rotp[f + t]];
                const int ck = f + ws.perm[f + ws.rotk[f + t]];
                const real c = ws.rotc[f + t], sn = ws.rots[f + t];
                const real x = ws.z[r + cp * LD], y = ws.z[r + ck * LD];
                ws.z[r + cp * LD] = c * x + sn * y;
                ws.z[r + ck * LD] = c * y - sn * x;
            }
        }
    } else {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            kk[s] = 0;
            if (!act[s]) continue;
            const int i = lane + 32 * s;
            const int f = nf[s];
            const unsigned long long node = low_bits(f + nl[s]) & ~low_bits(f);
            const unsigned long long before = low_bits(i) & ~low_bits(f);
            kk[s] = __popcll(kmask & node);
            const int jj = kept[s] ? __popcll(kmask & before) : kk[s] + __popcll(dmask & before);
            ws.ord[f + jj] = i - f;
        }
    }
    __syncwarp();
    // Scaled kept poles and weights, deflated eigenvalues, source columns.
    int expo[SLOTS];
    real rho_s[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        expo[s] = 0;
        rho_s[s] = 0;
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        const int f = nf[s], jj = i - f;
        expo[s] = ilogb_bits((double)fmax(dmax[s], rho[s]));
        rho_s[s] = scale_pow2(rho[s], -expo[s]);
        const int k = ws.ord[i];
        ws.col[i] = f + ws.perm[f + k];
        if (jj < kk[s]) {
            ws.dk[i] = scale_pow2(ws.dsrt[f + k], -expo[s]);
            ws.zk[i] = ws.zsrt[f + k];
        } else {
            ws.vals[i] = ws.dsrt[f + k];
        }
    }
    __syncwarp();
    // Secular equation: lane f + j solves root j of its node.
    bool fail = false;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        const int f = nf[s], jj = i - f;
        if (jj >= kk[s]) continue;
        int origin = 0;
        real tau = 0;
        const bool ok = secular_root(jj, ws.dk + f, ws.zk + f, kk[s], rho_s[s], &origin, &tau);
        const real lambda = ws.dk[f + origin] + tau;
        if (!ok || !finite(lambda)) fail = true;
        ws.vals[i] = scale_pow2(lambda, expo[s]);
        ws.sorg[i] = origin;
        ws.stau[i] = tau;
    }
    if (warp_any(fail)) return false;
    __syncwarp();
    // Gu-Eisenstat: z_hat_l^2 = prod_j (lambda_j - d_l) / prod_{j != l} (d_j - d_l) (sign of z_l).
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        const int f = nf[s], l = i - f, k = kk[s];
        if (l >= k || k < 2) continue;
        const real* dkf = ws.dk + f;
        const real prod0 = (dkf[l] - dkf[ws.sorg[i]]) - ws.stau[i];
#if DC_FAST_DIV
        bool ok = true;
        real prod = ge_product<true>(dkf, ws.sorg + f, ws.stau + f, l, k, prod0, &ok);
        if (!ok) prod = ge_product_exact(dkf, ws.sorg + f, ws.stau + f, l, k, prod0);
#else
        // (Round 5's loop, kept as it was: same operations as ge_product.)
        const real dl = dkf[l];
        real prod = prod0;
#if DC_ROLL_COLD && !DC_UNROLL_GW
#pragma unroll 1
#else
        UNROLL_GW
#endif
        for (int j = 0; j < k; ++j) {
            if (j == l) continue;
            const real delta = (dl - dkf[ws.sorg[f + j]]) - ws.stau[f + j];
            prod *= delta / (dl - dkf[j]);
        }
#endif
        ws.zh[i] = copysign(sqrt(-prod), ws.zk[i]);
    }
    __syncwarp();
    // Column j of W (lane f + j): (diag(d) - lambda_j)^{-1} z_hat, normalised; stored
    // transposed. Ranks of the new eigenvalues.
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        const int f = nf[s], j = i - f, k = kk[s];
        if (!DC_W_REGS && j < k) {
            real* wc = ws.w + i + f * LD;
            if (k == 1) {
                wc[0] = 1;
            } else {
                const real* dkf = ws.dk + f;
                const real dorg = dkf[ws.sorg[i]], tau = ws.stau[i];
#if DC_FAST_DIV
                bool ok = true;
                w_column<true>(wc, dkf, ws.zh + f, k, dorg, tau, &ok);
                if (!ok) w_column_exact(wc, dkf, ws.zh + f, k, dorg, tau);
#else
                // (Round 5's loops, kept as they were: same operations as w_column.)
                real vmax = 0;
                UNROLL_GW
                for (int l = 0; l < k; ++l) {
                    const real x = ws.zh[f + l] / ((dkf[l] - dorg) - tau);
                    wc[l * LD] = x;
                    vmax = fmax(vmax, fabs(x));
                }
                real norm2 = 0;
                UNROLL_GW
                for (int l = 0; l < k; ++l) {
                    const real x = wc[l * LD] / vmax;
                    wc[l * LD] = x;
                    norm2 += x * x;
                }
                const real inv = (real)1 / sqrt(norm2);
                for (int l = 0; l < k; ++l) wc[l * LD] *= inv;
#endif
            }
        }
        const real v = ws.vals[i];
        int r = 0;
        ROLL_COLD
        for (int b = 0; b < nl[s]; ++b) {
            const real vb = ws.vals[f + b];
            r += (vb < v || (vb == v && b < j));
        }
        ws.rnk[i] = r;
    }
    __syncwarp();
    if (skip_z) {
        // Lane 0 holds row 0, which belongs to the single top node.
        *ktop = __shfl_sync(FULL_MASK, kk[0], 0);
    } else {
        zw_dispatch(ws, act, nf, nl, kk, lane);
    }
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        if (!act[s]) continue;
        const int i = lane + 32 * s;
        d[nf[s] + ws.rnk[i]] = ws.vals[i];
    }
    __syncwarp();
    return true;
}

// stedc: d (N) eigenvalues ascending on exit, e (N-1) destroyed, ws.z (N x LD)
// eigenvectors. Returns false on failure (non-finite data, secular equation not
// converged).
// DC_BLOCK_WARPS (default 12 for n <= 48, both precisions; 1 elsewhere): the most
// systems (warps) per block of divide_conquer; the host picks how many (4, or
// CVA_DC_WARPS), each warp works on its own
// system in its own DC_WARP_BYTES of shared memory. DC_PHASE_SYNC (needs
// DC_BLOCK_WARPS > 1): block-wide barriers at phase boundaries so that the warps of a
// block run the same phase's code at once (1: after the Householder step, after stedc,
// after x = Q v; 2: also after each merge level). Every warp passes DC_PHASE_BARS
// barriers per system (a warp that finished early, failed or has no system pads).
#ifndef DC_BLOCK_WARPS
#define DC_BLOCK_WARPS (DC_BLOCK_N ? 12 : 1)
#endif
#ifndef DC_PHASE_SYNC
#define DC_PHASE_SYNC (DC_BLOCK_N ? 2 : 0)
#endif
#if DC_BLOCK_WARPS > 1 && DC_PHASE_SYNC
#define DC_PHASE_BARS (DC_PHASE_SYNC >= 2 ? 10 : 4)
__device__ __forceinline__ void phase_sync(int& bars) {
    __syncthreads();
    ++bars;
}
#else
__device__ __forceinline__ void phase_sync(int&) {}
#endif

// v[r] = out[s] for the rows r = lane + 32 s < N, after every lane's reads of v (the
// warp synchronises before and after).
__device__ __forceinline__ void store_rows(real* v, const real (&out)[SLOTS], int lane) {
    __syncwarp();
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int r = lane + 32 * s;
        if (r < N) v[r] = out[s];
    }
    __syncwarp();
}

// NO_Z (DC_TOP_NO_Z): when the matrix is one unreduced block of more than two rows, the
// top merge leaves Z = Q W unformed (see merge_level) and *ktop = K >= 0: ws.z then holds
// Q, ws.w W^T, and the eigenvalues come out in d ascending as always (apply Z with
// truncated_solve_top). Otherwise (or !NO_Z) *ktop = -1 and ws.z holds the eigenvectors.
template <bool NO_Z>
__device__ bool stedc(real* d, real* e, Ws& ws, int lane, int& bars, int* ktop) {
    real* z = ws.z;
    *ktop = -1;
    bool bad = false;
    real anorm = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        if (i < N) {
            bad |= !finite(d[i]);
            anorm = fmax(anorm, fabs(d[i]));
            if (i + 1 < N) {
                bad |= !finite(e[i]);
                anorm = fmax(anorm, fabs(e[i]));
            }
        }
    }
    if (warp_any(bad)) return false;
    anorm = warp_max(anorm);
    for (int c = 0; c < N; ++c) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int r = lane + 32 * s;
            if (r < N) z[r + c * LD] = 0;
        }
    }
    __syncwarp();
    if (anorm == (real)0) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int c = lane + 32 * s;
            if (c < N) z[c + c * LD] = 1;
        }
        __syncwarp();
        return true;
    }
    const int exponent = ilogb_bits((double)anorm);
    bool split[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        split[s] = i >= N - 1;
        if (i < N) {
            d[i] = scale_pow2(d[i], -exponent);
            if (i + 1 < N) e[i] = scale_pow2(e[i], -exponent);
        }
    }
    __syncwarp();
    // Splits where |e_i| <= eps sqrt|d_i| sqrt|d_{i+1}| (dstedc), unreduced blocks.
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        if (i < N - 1) {
            const real tiny = REAL_EPS * sqrt(fabs(d[i])) * sqrt(fabs(d[i + 1]));
            if (fabs(e[i]) <= tiny) {
                e[i] = 0;
                split[s] = true;
            }
        }
    }
    __syncwarp();
    const unsigned long long smask = ballot64(split) & low_bits(N);
    const int blocks = __popcll(smask);
    int bs[SLOTS], bsz[SLOTS];
    real dnew[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        bs[s] = 0;
        bsz[s] = 0;
        dnew[s] = 0;
        if (i >= N) continue;
        const unsigned long long below = smask & low_bits(i);
        bs[s] = below ? 64 - __clzll((long long)below) : 0;
        const int be = i + __ffsll((long long)(smask >> i)) - 1;
        bsz[s] = be - bs[s] + 1;
        // Cuppen's tearing: the cuts touching row i lie on its path from the root, met
        // in the breadth-first order of the CPU.
        const int t = i - bs[s];
        int f = 0, len = bsz[s];
        real di = d[i];
        while (len > 2) {
            const int m = len / 2;
            const int cut = f + m - 1;
            if (t == cut || t == cut + 1) di -= fabs(e[bs[s] + cut]);
            if (t - f < m) len = m;
            else {
                f += m;
                len -= m;
            }
        }
        dnew[s] = di;
    }
    store_rows(d, dnew, lane);
    // Leaves.
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        if (i >= N) continue;
        const int t = i - bs[s];
        int f = 0, len = bsz[s];
        while (len > 2) {
            const int m = len / 2;
            if (t - f < m) len = m;
            else {
                f += m;
                len -= m;
            }
        }
        if (len == 1) z[i + i * LD] = 1;
        else if (t == f) solve_2x2(bs[s] + f, d, e, z);
    }
    __syncwarp();
    // Merges, deepest first (a tree of at most 64 rows has merges at depths 0..4).
    for (int depth = 5; depth >= 0; --depth) {
        if (!merge_level(depth, d, e, ws, bs, bsz, lane, NO_Z && blocks == 1 && depth == 0, ktop)) return false;
#if DC_PHASE_SYNC >= 2
        phase_sync(bars);
#endif
    }
    // Blocks each come out ascending; merge them into one ascending order.
    if (blocks > 1) {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int i = lane + 32 * s;
            if (i >= N) continue;
            const real v = d[i];
            int r = 0;
            ROLL_COLD
            for (int b = 0; b < N; ++b) r += (d[b] < v || (d[b] == v && b < i));
            ws.rnk[i] = r;
        }
        __syncwarp();
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int i = lane + 32 * s;
            if (i >= N) continue;
            ws.vals[ws.rnk[i]] = d[i];
#if DC_W_REGS
            // Column c goes to column rnk[c]: follow the cycles of the permutation
            // (the same for every row, so the lanes stay together).
            unsigned long long moved = 0;
            for (int c0 = 0; c0 < N; ++c0) {
                if ((moved >> c0) & 1ULL) continue;
                real carry = z[i + c0 * LD];
                int c = c0;
                do {
                    const int to = ws.rnk[c];
                    moved |= 1ULL << to;
                    const real t = z[i + to * LD];
                    z[i + to * LD] = carry;
                    carry = t;
                    c = to;
                } while (c != c0);
            }
#else
            ROLL_ROWS
            for (int c = 0; c < N; ++c) ws.w[i + ws.rnk[c] * LD] = z[i + c * LD];
#endif
        }
        __syncwarp();
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int i = lane + 32 * s;
            if (i >= N) continue;
            d[i] = ws.vals[i];
#if !DC_W_REGS
            ROLL_ROWS
            for (int c = 0; c < N; ++c) z[i + c * LD] = ws.w[i + c * LD];
#endif
        }
        __syncwarp();
    }
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        if (i >= N) continue;
        d[i] = scale_pow2(d[i], exponent);
        bad |= !finite(d[i]);
        ROLL_ROWS
        for (int c = 0; c < N; ++c) bad |= !finite(z[i + c * LD]);
        // Z unformed: its factors W (row i: column i of W) are checked as well.
        if (NO_Z && i < *ktop)
            for (int c = 0; c < *ktop; ++c) bad |= !finite(ws.w[i + c * LD]);
    }
    __syncwarp();
    return !warp_any(bad);
}

// max_i |lambda_i| over i < N, in every lane.
__device__ __forceinline__ real warp_abs_max(const real* lambda, int lane) {
    real lmax = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        if (i < N) lmax = fmax(lmax, fabs(lambda[i]));
    }
    return warp_max(lmax);
}

// truncated_eigen_solve: v <- sum_{kept} (Z_i^T v / lambda_i) Z_i; returns the number
// of discarded eigenvalues. z: N x LD; tmp: N scratch.
__device__ int truncated_eigen_solve(const real* lambda, const real* z, real* v, real* tmp, real threshold, int lane) {
    const real lmax = warp_abs_max(lambda, lane);
    int discarded = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int i = lane + 32 * s;
        bool drop = false;
        if (i < N) {
            const real l = lambda[i];
            if (l == (real)0 || fabs(l) * threshold < lmax) {
                tmp[i] = 0;
                drop = true;
            } else {
                real acc = 0;
                ROLL_ROWS
                for (int r = 0; r < N; ++r) acc += z[r + i * LD] * v[r];
                tmp[i] = acc / l;
            }
        }
        discarded += warp_count(drop);
    }
    __syncwarp();
    real out[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int r = lane + 32 * s;
        out[s] = 0;
        if (r < N)
            ROLL_ROWS
            for (int i = 0; i < N; ++i) out[s] += z[r + i * LD] * tmp[i];
    }
    store_rows(v, out, lane);
    return discarded;
}

// truncated_solve_top: truncated_eigen_solve with Z = Q W left unformed by the top merge
// (stedc<true> with k = *ktop >= 0; one unreduced block, node [0, N)). Entry j of the top
// merge (j < k: secular root, column j of W; j >= k: deflated, child column col[j]) is
// eigenvalue lambda[rnk[j]] with eigenvector Q W e_j (j < k) or Q e_col[j]:
//   y = Q^T v, u_j = sum_l W[l][j] y_col[l] (j < k) or y_col[j], t_j = u_j / lambda (kept)
//   or 0, s_col[l] = sum_j W[l][j] t_j (l < k) or t_l, v <- Q s.
// Q: ws.z (N x LD), W[l][j] at ws.w[j + l LD]. Scratch: ws.zsrt, ws.dk, ws.zk. Returns the
// number of discarded eigenvalues (the same test and count as truncated_eigen_solve).
__device__ int truncated_solve_top(const real* lambda, const Ws& ws, real* v, real threshold, int k, int lane) {
    const real* z = ws.z;
    const real* w = ws.w;
    real* y = ws.zsrt;
    real* t = ws.dk;
    real* sv = ws.zk;
    const real lmax = warp_abs_max(lambda, lane);
    // y = Q^T v (lane m: column m of Q).
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int m = lane + 32 * s;
        if (m < N) {
            real acc = 0;
            ROLL_TOP
            for (int r = 0; r < N; ++r) acc += z[r + m * LD] * v[r];
            y[m] = acc;
        }
    }
    __syncwarp();
    // t_j = (W^T y)_j / lambda_j for the kept eigenvalues (lane j).
    int discarded = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int j = lane + 32 * s;
        bool drop = false;
        if (j < N) {
            const real l = lambda[ws.rnk[j]];
            drop = l == (real)0 || fabs(l) * threshold < lmax;
            real u = 0;
            if (j < k) {
                ROLL_TOP
                for (int c = 0; c < k; ++c) u += w[j + c * LD] * y[ws.col[c]];
            } else {
                u = y[ws.col[j]];
            }
            t[j] = 0;
            if (!drop) t[j] = u / l;
        }
        discarded += warp_count(drop);
    }
    __syncwarp();
    // s = W t on the kept entries (lane l), placed at the child columns.
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int l = lane + 32 * s;
        if (l < N) {
            real acc = 0;
            if (l < k) {
                ROLL_TOP
                for (int j = 0; j < k; ++j) acc += w[j + l * LD] * t[j];
            } else {
                acc = t[l];
            }
            sv[ws.col[l]] = acc;
        }
    }
    __syncwarp();
    // v = Q s (lane r: row r of Q).
    real out[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int r = lane + 32 * s;
        out[s] = 0;
        if (r < N)
            ROLL_TOP
            for (int m = 0; m < N; ++m) out[s] += z[r + m * LD] * sv[m];
    }
    store_rows(v, out, lane);
    return discarded;
}

// Shared-memory layout of one system: DC_MATS N x LD matrices (one when DC_W_REGS, two
// otherwise) and DC_VECS vectors of N reals, then DC_INTS ints; the host computes the
// size for two matrices (dc_shared_bytes in kernels/src/cuda/solver.rs). The first matrix holds A
// and the reflectors during the Householder step (the reflectors are then kept per lane
// in local memory, see Reflectors), then Z during stedc when DC_W_REGS; otherwise W
// during stedc, Z in the second; the rotations of the sequential deflation scan
// share vectors with zh, stau, sorg and rnk (written only after the rotations are
// applied).
constexpr int DC_VECS = 11;
constexpr int DC_MATS = DC_W_REGS ? 1 : 2;
constexpr int DC_REALS = DC_MATS * N * LD + DC_VECS * N;
constexpr int DC_INTS = 7 * N;

// Carves the workspace out of shared memory; returns the first free vector (after the
// stedc vectors: N reals each, DC_VECS - 7 of them left for the caller).
__device__ real* carve(unsigned char* smem, real** a, Ws& ws) {
    real* base = reinterpret_cast<real*>(smem);
    *a = base;
    ws.w = base;  // unused when DC_W_REGS
    ws.z = base + (DC_MATS - 1) * N * LD;
    real* v = base + DC_MATS * N * LD;
    ws.dsrt = v;
    ws.zsrt = v + N;
    ws.dk = v + 2 * N;
    ws.zk = v + 3 * N;
    ws.zh = v + 4 * N;
    ws.vals = v + 5 * N;
    ws.stau = v + 6 * N;
    ws.rotc = ws.zh;
    ws.rots = ws.stau;
    int* ib = reinterpret_cast<int*>(base + DC_REALS);
    ws.perm = ib;
    ws.ord = ib + N;
    ws.col = ib + 2 * N;
    ws.rnk = ib + 3 * N;
    ws.sorg = ib + 4 * N;
    ws.cnt = ib + 5 * N;
    ws.rcnt = ib + 6 * N;
    ws.rotp = ws.sorg;
    ws.rotk = ws.rnk;
    return v + 7 * N;
}

// Solves systems idx[k0 + k] (k < count; idx == nullptr: system k0 + k) by divide and
// conquer + truncated solve (levels 1-2 of solve_one for Strategy::DivideConquer), on
// the records TRI[k] of householder_tridiag (DC_SPLIT) or after the warp's own
// Householder step. X and rep are written for those systems only;
// rep.method = 2 | (discarded << 8).
// DC_MIN_BLOCKS (development switch): resident blocks per SM asked of the register
// allocator.
#if defined(DC_MIN_BLOCKS)
#define DC_BOUNDS __launch_bounds__(32, DC_MIN_BLOCKS)
#elif defined(DC_MAXNREG)
#define DC_BOUNDS __maxnreg__(DC_MAXNREG)
#else
#define DC_BOUNDS __launch_bounds__(32)
#endif
#if DC_BLOCK_WARPS > 1
#undef DC_BOUNDS
#define DC_BOUNDS __launch_bounds__(32 * DC_BLOCK_WARPS)
// Bytes of shared memory per warp: dc_shared_bytes of kernels/src/cuda/solver.rs.
constexpr int DC_WARP_BYTES = ((2 * N * (N | 1) + 11 * N) * (int)sizeof(real) + 7 * N * 4 + 15) / 16 * 16;
#endif
// DC_SPLIT 1 (default in f64): divide and conquer as two kernels, the records of
// householder_tridiag (householder_pcr.cu) read here (f64 n = 30 +16-20%, H100,
// benches/RESULTS.md, fourteenth session). 0 (f32): one kernel, the warp's own
// Householder step above (the CPU's formulas: in f32, where the engine's cubic basis is
// ill-conditioned, the CVA of american_put moved by 0.4 standard errors with the two
// kernels' other rounding of T, against 0.06 with this one). Same arguments either way
// (TRI unused by the one-kernel form).
#ifndef DC_SPLIT
#define DC_SPLIT REAL_F64
#endif
extern "C" __global__ void DC_BOUNDS
ENTRY(divide_conquer)(const real* __restrict__ A, const real* __restrict__ B, const real* __restrict__ TRI,
                      real* __restrict__ X, GpuReport* __restrict__ rep, const unsigned int* __restrict__ idx,
                      const unsigned int* __restrict__ listed, long long k0, long long capacity,
                      double threshold) {
    // Positions k < count: systems listed_system(idx, k0, k) (common.cu), TRI record k;
    // `listed`: the list's length as a device counter (null: `capacity` positions).
    const long long count = listed_total(capacity, listed, k0);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    real* qa;
    Ws ws;
#if DC_BLOCK_WARPS > 1
    const int nw = blockDim.x >> 5;
    real* vec = carve(smem_raw + (threadIdx.x >> 5) * DC_WARP_BYTES, &qa, ws);
#else
    real* vec = carve(smem_raw, &qa, ws);
#endif
    real* d = vec;
    real* e = d + N;
    real* v = e + N;
    real* bb = v + N;
    // Scratch outside stedc: vectors of stedc that are free before and after it.
    real* tmp = ws.zsrt;
    real* xb = ws.dsrt;
    const int lane = threadIdx.x & 31;
    const real thr = (real)threshold;
#if !DC_SPLIT
    Reflectors refl;
#endif

    int bars = 0;
#if DC_BLOCK_WARPS > 1
    for (long long kb = (long long)blockIdx.x * nw; kb < count; kb += (long long)gridDim.x * nw) {
        const long long k = kb + (threadIdx.x >> 5);
#if DC_PHASE_SYNC
        bars = 0;
#endif
        if (k < count) {
#else
    for (long long k = blockIdx.x; k < count; k += gridDim.x) {
        {
#endif
        const long long sys = listed_system(idx, k0, k);
        const real* a = A + sys * (N * N);
#if DC_SPLIT
        const real* rec = TRI + k * TRI_STRIDE;
        // T = P T' P and Q^T b = P Q'^T P b from the record of P A P = Q' T' Q'^T (P the
        // reversal); b. The input's finiteness was checked by the first kernel.
        const bool bad = warp_any(lane == 0 && rec[2 * N - 1] != (real)0);
        for (int i = lane; i < N; i += 32) {
            d[i] = rec[N - 1 - i];
            e[i] = i < N - 1 ? rec[N + N - 2 - i] : (real)0;
            v[i] = rec[3 * N + N - 1 - i];
            bb[i] = B[sys * N + i];
        }
#else
        // Lower triangle (copy_lower) into both triangles, b; finiteness of the input.
        bool bad = false;
        for (int e2 = lane; e2 < N * N; e2 += 32) {
            const int r = e2 % N, c = e2 / N;
            if (r >= c) {
                const real vv = a[e2];
                bad |= !finite(vv);
                qa[r + c * LD] = vv;
                qa[c + r * LD] = vv;
            }
        }
        for (int i = lane; i < N; i += 32) {
            const real vv = B[sys * N + i];
            bad |= !finite(vv);
            bb[i] = vv;
        }
        bad = warp_any(bad);
#endif
        __syncwarp();
        unsigned status = STATUS_OK;
        int discarded = 0;
        double residual = dnan();
        if (bad) {
            status = STATUS_NON_FINITE_INPUT;
        } else {
#if !DC_SPLIT
#if !DC_HH_QTB
            householder_tridiagonalize(qa, d, e, tmp, lane);
#endif
            // v = Q^T b.
            real y[SLOTS];
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const int i = lane + 32 * s;
                y[s] = i < N ? bb[i] : (real)0;
            }
#if DC_HH_QTB
            householder_tridiagonalize(qa, d, e, tmp, y, lane);
#else
            apply_q(qa, y, true, lane);
#endif
            save_reflectors(qa, refl, lane);
            phase_sync(bars);
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const int i = lane + 32 * s;
                if (i < N) v[i] = y[s];
            }
            __syncwarp();
#endif
            int ktop;
            const bool sok = stedc<DC_TOP_NO_Z>(d, e, ws, lane, bars, &ktop);
            phase_sync(bars);
            if (!sok) {
                status = STATUS_FAILED;
            } else {
                if (DC_TOP_NO_Z && ktop >= 0) discarded = truncated_solve_top(d, ws, v, thr, ktop, lane);
                else discarded = truncated_eigen_solve(d, ws.z, v, tmp, thr, lane);
#if DC_SPLIT
                // x = P Q' P v, Q' = H_0 (H_1 (... H_{N-2})), the reflectors staged in the
                // shared array of W (free once the truncated solve is done); lane r works
                // on row r of the reversed vectors.
                __syncwarp();
                for (int j = lane; j < (N - 1) * N; j += 32) {
#if REAL_F64
                    async_copy8(qa + j, rec + 4 * N + j);
#else
                    async_copy4(qa + j, rec + 4 * N + j);
#endif
                }
                async_copy_commit();
                real y[SLOTS];
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int i = lane + 32 * s;
                    y[s] = i < N ? v[N - 1 - i] : (real)0;
                }
                async_copy_wait<0>();
                __syncwarp();
#pragma unroll 1
                for (int i = N - 2; i >= 0; --i) {
                    const real tau = rec[2 * N + i];
                    real vi[SLOTS];
                    real dot = 0;
#pragma unroll
                    for (int s = 0; s < SLOTS; ++s) {
                        const int r = lane + 32 * s;
                        vi[s] = r < N ? qa[i * N + r] : (real)0;
                        dot = fma(vi[s], y[s], dot);
                    }
                    dot = warp_sum(dot);
                    const real f = tau * dot;
#pragma unroll
                    for (int s = 0; s < SLOTS; ++s) y[s] = fma(-f, vi[s], y[s]);
                }
                phase_sync(bars);
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int i = lane + 32 * s;
                    if (i < N) xb[N - 1 - i] = y[s];
                }
#else
                // x = Q v.
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int i = lane + 32 * s;
                    y[s] = i < N ? v[i] : (real)0;
                }
                apply_q_saved(refl, y, false, lane);
                phase_sync(bars);
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int i = lane + 32 * s;
                    if (i < N) xb[i] = y[s];
                }
#endif
                __syncwarp();
                Check ch = residual_check_warp(a, bb, xb, tmp, lane);
                bool fin = !isnan(ch.residual);
                for (int i = lane; i < N; i += 32) fin &= finite(xb[i]);
                fin = !warp_any(!fin);
                if (fin) residual = ch.residual;
                else status = STATUS_FAILED;
            }
        }
        const bool ok = status == STATUS_OK;
        for (int i = lane; i < N; i += 32) X[sys * N + i] = ok ? xb[i] : real_nan();
        if (lane == 0) {
            GpuReport rp;
            rp.residual = ok ? residual : dnan();
            rp.method = METHOD_DIVIDE_CONQUER | ((unsigned)discarded << 8);
            rp.status = status;
            rep[sys] = rp;
        }
        __syncwarp();
        }
#if DC_BLOCK_WARPS > 1 && DC_PHASE_SYNC
        // Pad to DC_PHASE_BARS barriers (at least one: the end of the system).
        do {
            __syncthreads();
        } while (++bars < DC_PHASE_BARS);
#endif
    }
}


// Eigendecomposition of `count` tridiagonal matrices (stedc alone, for tests): D: count
// x N diagonals, E: count x N (entries 0..N-2 read), lambda: count x N eigenvalues
// ascending, Z: count x N x N eigenvectors (column-major); NaN where stedc failed.
extern "C" __global__ void __launch_bounds__(32)
ENTRY(stedc_batched)(const real* __restrict__ D, const real* __restrict__ E, real* __restrict__ lambda,
                     real* __restrict__ Z, long long count) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    real* qa;
    Ws ws;
    real* vec = carve(smem_raw, &qa, ws);
    real* d = vec;
    real* e = d + N;
    const int lane = threadIdx.x & 31;
    for (long long k = blockIdx.x; k < count; k += gridDim.x) {
        for (int i = lane; i < N; i += 32) {
            d[i] = D[k * N + i];
            e[i] = E[k * N + i];
        }
        __syncwarp();
        int bars = 0;
        int ktop;
        const bool ok = stedc<false>(d, e, ws, lane, bars, &ktop);
        for (int i = lane; i < N; i += 32) lambda[k * N + i] = ok ? d[i] : real_nan();
        for (int c = 0; c < N; ++c)
            for (int r = lane; r < N; r += 32) Z[k * N * N + r + c * N] = ok ? ws.z[r + c * LD] : real_nan();
        __syncwarp();
    }
}
