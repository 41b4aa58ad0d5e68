// Path generation on the GPU, draw for draw the CPU engine's (src/rng.rs, src/model.rs).
//
// Random numbers: Philox4x32-10 keyed by the 64-bit seed (low word first), counter
// [block, inner_path, date, outer_path] with inner_path = 0xffffffff for an outer path;
// Box-Muller in single precision on words w1, w2 (src/rng.rs box_muller, bit for bit):
// r = sqrt(-2 ln u1), u1 = (w1 + 0.5) / 2^32, (z0, z1) = (r cos a, r sin a) with
// a = 2 pi (w2 + 0.5) / 2^32, as doubles; four normals per Philox block, in order.
// A path's normals are drawn in one run: step s, asset i uses draw s * d + i.
// Antithetic inner paths (PATHS_ANTITHETIC 1, src/engine.rs, an even number of inner
// paths): inner path 2j + 1 draws from inner path 2j's stream and negates every normal
// (the f32 sign bit, before any use), so the pair's shocks are z and -z. Outer paths never.
//
// Dynamics: exact GBM step S_i <- S_i * exp(drift_i + vol_i * w_i), w = C z with C the
// row-major lower-triangular correlation factor (w = z when there is none); the sum
// w_i = sum_{k<=i} C_ik z_k runs from 0.0 in increasing k, as on the CPU.
//
// Compiled by NVRTC with --fmad=false --prec-div=true --prec-sqrt=true: every +, *, /,
// sqrt rounds as in Rust. Box-Muller uses only IEEE-rounded f32 +, *, fma and sqrt, so
// raw Philox words and normals are bitwise the CPU's; exp is this file's own (below;
// within an ulp of the CPU's libm), so states agree to a few ulps.
//
// Two sets of path kernels share the random numbers and the step's arithmetic:
// - generic (`inner_paths`, `outer_paths`): d, drift, vol and the factor at run time; the
//   per-thread scratch lives in dynamic shared memory, column `threadIdx.x` of a
//   [2 d][blockDim.x] array of doubles (rows 0..d the state, rows d..2d the step's normals,
//   the second half only with a correlation factor);
// - fixed (`inner_paths_fixed`, `outer_paths_fixed`, compiled when the host defines
//   PATHS_D > 0): d = PATHS_D <= 32 and the market in constant memory (C_DRIFT, C_VOL and,
//   when PATHS_FACTOR, C_FACTOR, written by the host as exact hexadecimal literals), the
//   step fully unrolled over the assets: the correlation's products take the factor as
//   constant operands, its d sums are independent chains, and the exp of asset k starts
//   as soon as its sum is complete. A step's normals are generated PATHS_CHUNK assets
//   ahead of their use, a Philox block at a time, into a per-thread ring of chunk + 3
//   (rounded up to a multiple of 4) floats in shared memory (the normals are f32 values,
//   widened to double where used); the states stay in shared memory and
//   leave, after each step, through a block-wide copy whose consecutive threads write
//   consecutive addresses. Same operations in the same order as the generic kernels:
//   bitwise the same results.

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define OUTER_STREAM 0xFFFFFFFFu

struct U32x4 {
    unsigned x, y, z, w;
};

// hi:lo = a b, one 32 x 32 -> 64-bit product (IMAD.WIDE.U32).
__device__ __forceinline__ void mul_hi_lo(unsigned a, unsigned b, unsigned& hi, unsigned& lo) {
    asm("{\n\t.reg .u64 t;\n\tmul.wide.u32 t, %2, %3;\n\tmov.b64 {%1, %0}, t;\n\t}"
        : "=r"(hi), "=r"(lo)
        : "r"(a), "r"(b));
}

// One Philox4x32 round under the round key (k0, k1).
__device__ __forceinline__ U32x4 philox_round(U32x4 c, unsigned k0, unsigned k1) {
    unsigned hi0, lo0, hi1, lo1;
    mul_hi_lo(PHILOX_M0, c.x, hi0, lo0);
    mul_hi_lo(PHILOX_M1, c.z, hi1, lo1);
    U32x4 n;
    n.x = hi1 ^ c.y ^ k0;
    n.y = lo1;
    n.z = hi0 ^ c.w ^ k1;
    n.w = lo0;
    return n;
}

__device__ __forceinline__ U32x4 philox4x32_10(U32x4 c, unsigned k0, unsigned k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        c = philox_round(c, k0, k1);
    }
    return c;
}

// exp of |x| < 708 (others take CUDA's exp): Tang's table method, see exp_step; at most
// 1 ulp from the CPU's exp, bitwise on 99.5% of 3.2 million arguments (gpu_paths,
// thirteenth session; the degree-10 polynomial it replaced was within 0.93 ulp of the
// correctly rounded values). PATHS_MATH 0 takes CUDA's exp instead (for comparison). The
// coefficients live in constant memory (PATHS_K_CONST below); loading them once into
// registers was measured no faster (152 registers: one block fewer per SM).
#ifndef PATHS_MATH
#define PATHS_MATH 1
#endif
// Out of the fast exp's range (|x| >= 708): the host defines PATHS_EXP_FALLBACK 1 for a
// market whose increments can reach it, and the exp then branches to CUDA's, out of line.
// Without it the exp is branch-free (measured: the branch, even never taken, costs as
// much as the rest of this code saves, through the call's register constraints).
#ifndef PATHS_EXP_FALLBACK
#define PATHS_EXP_FALLBACK 0
#endif
#define K_32LOG2E 0   // 32 / ln 2
#define K_LN2_32_LO 1 // (ln 2 - 0x1.62e42p-1) / 32
#define K_EXP 2       // 5: 1/2!, 1/3!, 1/4!, 1/5!, 1/6! (Taylor: |r| <= ln 2 / 64)
#define K_COUNT 7
#define LN2_32_HI 0x1.62e42p-6  // ln 2 / 32 to 20 bits: m LN2_32_HI exact for |m| < 2^33
#define ROUND_MAGIC 0x1.8p52
#define PATHS_K_VALUES \
    0x1.71547652b82fep+5, 0x1.fdf473de6af28p-27, 0x1.0000000000000p-1, \
    0x1.5555555555555p-3, 0x1.5555555555555p-5, 0x1.1111111111111p-7, \
    0x1.6c16c16c16c17p-10 \

struct MathK {
    double c[K_COUNT];
};

// The functions below read the coefficients from the __constant__ copy PATHS_K_CONST
// (one uniform constant load each), not as literals: the compiler materialises a 64-bit
// literal with two uniform moves before every use (about 48 issued instructions per state
// at basket29's d = 29, in a kernel bound by instruction issue). Same values, same
// operations, same bits. Measured (H100, basket29 100k, one stream): path phase 0.327 ->
// 0.318 s (benches/RESULTS.md, "GPU inner paths, round 5").
__constant__ MathK PATHS_K_CONST = {{PATHS_K_VALUES}};
#define KC(i) (PATHS_K_CONST.c[i])

// 2^(j/32) = x + y for j < 32: x the double nearest, y the double nearest the rest
// (Python's decimal at 60 digits), so x + y carries 2^(j/32) to about 2^-106 relative.
// exp_step reads it through a pointer: the fixed kernels copy it into shared memory (the
// lanes' indices differ; constant memory would serialise them), the generic kernels pass
// this array.
__constant__ double2 PATHS_EXP_T[32] = {
    {0x1.0000000000000p+0, 0.0}, {0x1.059b0d3158574p+0, 0x1.d73e2a475b465p-55},
    {0x1.0b5586cf9890fp+0, 0x1.8a62e4adc610bp-54}, {0x1.11301d0125b51p+0, -0x1.6c51039449b3ap-54},
    {0x1.172b83c7d517bp+0, -0x1.19041b9d78a76p-55}, {0x1.1d4873168b9aap+0, 0x1.e016e00a2643cp-54},
    {0x1.2387a6e756238p+0, 0x1.9b07eb6c70573p-54}, {0x1.29e9df51fdee1p+0, 0x1.612e8afad1255p-55},
    {0x1.306fe0a31b715p+0, 0x1.6f46ad23182e4p-55}, {0x1.371a7373aa9cbp+0, -0x1.63aeabf42eae2p-54},
    {0x1.3dea64c123422p+0, 0x1.ada0911f09ebcp-55}, {0x1.44e086061892dp+0, 0x1.89b7a04ef80d0p-59},
    {0x1.4bfdad5362a27p+0, 0x1.d4397afec42e2p-56}, {0x1.5342b569d4f82p+0, -0x1.07abe1db13cadp-55},
    {0x1.5ab07dd485429p+0, 0x1.6324c054647adp-54}, {0x1.6247eb03a5585p+0, -0x1.383c17e40b497p-54},
    {0x1.6a09e667f3bcdp+0, -0x1.bdd3413b26456p-54}, {0x1.71f75e8ec5f74p+0, -0x1.16e4786887a99p-55},
    {0x1.7a11473eb0187p+0, -0x1.41577ee04992fp-55}, {0x1.82589994cce13p+0, -0x1.d4c1dd41532d8p-54},
    {0x1.8ace5422aa0dbp+0, 0x1.6e9f156864b27p-54}, {0x1.93737b0cdc5e5p+0, -0x1.75fc781b57ebcp-57},
    {0x1.9c49182a3f090p+0, 0x1.c7c46b071f2bep-56}, {0x1.a5503b23e255dp+0, -0x1.d2f6edb8d41e1p-54},
    {0x1.ae89f995ad3adp+0, 0x1.7a1cd345dcc81p-54}, {0x1.b7f76f2fb5e47p+0, -0x1.5584f7e54ac3bp-56},
    {0x1.c199bdd85529cp+0, 0x1.11065895048ddp-55}, {0x1.cb720dcef9069p+0, 0x1.503cbd1e949dbp-56},
    {0x1.d5818dcfba487p+0, 0x1.2ed02d75b3707p-55}, {0x1.dfc97337b9b5fp+0, -0x1.1a5cd4f184b5cp-54},
    {0x1.ea4afa2a490dap+0, -0x1.e9c23179c2893p-54}, {0x1.f50765b6e4540p+0, 0x1.9d3e12dd8a18bp-54}};

// Out of the fast path's range: CUDA's exp, out of line (one copy, not one per asset).
__device__ __noinline__ double exp_outside(double x) { return exp(x); }

// e^x for |x| < 708 (Tang's table method): m = rint(32 x / ln 2), r = x - m ln 2 / 32
// (|r| <= ln 2 / 64, two parts of ln 2 / 32, the first exact in the product),
// e^r - 1 = r + r^2 (1/2 + r (1/6 + r (1/24 + r (1/120 + r / 720)))) (Taylor; the first
// term left out is below 2^-58 relative), e^x = 2^(m >> 5) (T + (T p + t)) with
// T + t = 2^((m & 31) / 32) from `tab` (PATHS_EXP_T); 2^(m >> 5) through the exponent.
// Twelve FP64 operations and one 16-byte load instead of a degree-10 polynomial's
// seventeen; the error is the final rounding plus a few hundredths of an ulp. Measured
// (H100, basket29 100k, path kernel alone): 0.265 -> 0.255 s, and the states agree with
// the CPU's bitwise on 94-96% instead of 79-87% (benches/RESULTS.md, thirteenth session).
__device__ __forceinline__ double exp_step(double x, const double2* tab) {
#if PATHS_MATH
#if PATHS_EXP_FALLBACK
    if (!(fabs(x) < 708.0)) return exp_outside(x);
#endif
    const double t = fma(x, KC(K_32LOG2E), ROUND_MAGIC);
    const double nd = t - ROUND_MAGIC;
    const int m = __double2loint(t);
    double r = fma(-nd, LN2_32_HI, x);
    r = fma(-nd, KC(K_LN2_32_LO), r);
    double q = KC(K_EXP + 4);
#pragma unroll
    for (int j = 3; j >= 0; --j) q = fma(q, r, KC(K_EXP + j));
    const double p = fma(r * r, q, r);
    const double2 tt = tab[m & 31];
    const double y = tt.x + fma(tt.x, p, tt.y);
    return __hiloint2double(__double2hiint(y) + ((m >> 5) << 20), __double2loint(y));
#else
    return exp(x);
#endif
}

// ---- Box-Muller in single precision (src/rng.rs box_muller: the same operations, so
// the same bits). Polynomials: Chebyshev fits (mpmath, 40 digits) rounded to f32. Against
// the double-precision transform on the same words the normals are within 7.9e-7 (3.0e-7
// relative where |z| >= 1e-3; src/rng.rs normals_are_close_to_double_precision_box_muller).
// Measured (H100, basket29 100k, path kernel alone): 0.256 -> 0.175 s with the ring of
// the fixed kernels in floats (benches/RESULTS.md, twentieth session): the FP64 work of
// the kernel more than halves (971 -> 435 FP64 instructions in its SASS).

// ln u for u = (w + 0.5) / 2^32: below sqrt(1/2) (w < 0xB504F334) u = 2^k m with m in
// [sqrt(1/2), sqrt(2)) and f = m - 1 (exact); above it f = -v with v = 1 - u =
// (~w + 0.5) / 2^32 from the word (u rounded to f32 would lose 1 - u's low bits). Then
// ln(1 + f) = f + f^2 P(f), P of degree 8 on [sqrt(1/2) - 1, sqrt(2) - 1], + k ln 2 in
// two parts. Both candidates are formed and one selected (no branch).
__device__ __forceinline__ float ln_uniform_f32(unsigned w) {
    const float u = fmaf((float)w, 0x1p-32f, 0x1p-33f);
    const float v = fmaf((float)(~w), 0x1p-32f, 0x1p-33f);
    const bool above = w >= 0xB504F334u;
    int ix = __float_as_int(u) + (0x3f800000 - 0x3f3504f3);
    const float kf = above ? 0.0f : (float)((ix >> 23) - 0x7f);
    ix = (ix & 0x007fffff) + 0x3f3504f3;
    const float f = above ? -v : __int_as_float(ix) - 1.0f;
    float p = -0x1.3a4ff6p-4f;
    p = fmaf(p, f, 0x1.048f72p-3f);
    p = fmaf(p, f, -0x1.0cda32p-3f);
    p = fmaf(p, f, 0x1.22ea5ap-3f);
    p = fmaf(p, f, -0x1.548382p-3f);
    p = fmaf(p, f, 0x1.99a012p-3f);
    p = fmaf(p, f, -0x1.00020cp-2f);
    p = fmaf(p, f, 0x1.555554p-2f);
    p = fmaf(p, f, -0x1.fffffep-2f);
    const float l = fmaf(f * f, p, f);
    return fmaf(kf, 0x1.62e430p-1f, fmaf(kf, -0x1.05c610p-29f, l));
}

// Square root of t in [2^-100, 2^126]: the fast path of CUDA's correctly rounded sqrtf
// (an estimate y of 1 / sqrt(t), s = t y, s + (t - s^2) y / 2), without its range test and
// the branch to the slow path, which -2 ln u in [2^-32, 46] never takes: the same bits
// as an IEEE square root (gpu_paths checks every float of [2^-34, 64) against sqrtf).
__device__ __forceinline__ float sqrt_pos_f32(float t) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(t));
    const float s = t * y;
    const float h = y * 0.5f;
    return fmaf(fmaf(-s, s, t), h, s);
}

// z0 = r cos a, z1 = r sin a in single precision. The angle from the word: quadrant
// q = (w2 + 2^29) >> 30 (mod 4), a = q pi/2 + pi f / 2 with f = (d + 0.5) / 2^30 in
// [-1/2, 1/2], d = w2 - q 2^30 as a signed integer; sin(pi f / 2) = f S(f^2),
// cos(pi f / 2) = 1 + f^2 C(f^2) (S, C of degree 3); the quadrant swaps them and flips
// the signs (integer operations on the sign bits).
__device__ __forceinline__ void box_muller_f32(unsigned w1, unsigned w2, float* z0, float* z1) {
    const float r = sqrt_pos_f32(-2.0f * ln_uniform_f32(w1));
    const unsigned q = (w2 + 0x20000000u) >> 30;
    const int d = (int)(w2 - (q << 30));
    const float f = fmaf((float)d, 0x1p-30f, 0x1p-31f);
    const float z = f * f;
    float ps = -0x1.2d9b40p-8f;
    ps = fmaf(ps, z, 0x1.465ec4p-4f);
    ps = fmaf(ps, z, -0x1.4abbbap-1f);
    ps = fmaf(ps, z, 0x1.921fb6p+0f);
    const float sr = f * ps;
    float pc = -0x1.4e5e06p-6f;
    pc = fmaf(pc, z, 0x1.03af58p-2f);
    pc = fmaf(pc, z, -0x1.3bd392p+0f);
    const float cr = fmaf(pc, z, 1.0f);
    const float s0 = (q & 1) ? cr : sr;
    const float c0 = (q & 1) ? sr : cr;
    *z0 = r * __int_as_float(__float_as_int(c0) ^ (((q + 1) & 2) << 30));
    *z1 = r * __int_as_float(__float_as_int(s0) ^ ((q & 2) << 30));
}

#ifndef PATHS_ANTITHETIC
#define PATHS_ANTITHETIC 0
#endif

// The normal stream of one (outer path, date, inner path), consumed in order. y0, hia
// and loa are the parts of Philox's first two rounds that do not depend on the block
// (stream_prepare): the counter's words 1-3 are the stream's, only word 0 is the block.
// `neg`: with PATHS_ANTITHETIC, the sign bit (0 or 0x80000000) that stream_block_f32
// puts on every normal (the antithetic path of a pair); 0 otherwise. `pair_mask`: the
// live lanes of the warp, for the fixed kernel's pair-shared fill (fill_ring).
struct NormalStream {
    unsigned key0, key1, inner, date, outer, block;
    unsigned y0, hia, loa;
    unsigned neg, pair_mask;
    int pos;
    double b0, b1, b2, b3;
};

// The stream's block-independent words of rounds 0 and 1 (after its key is set): round 0
// gives x = hi(M1 date) ^ inner ^ key0 and y = lo(M1 date); round 1 multiplies x by M0.
__device__ __forceinline__ void stream_prepare(NormalStream& s) {
    unsigned hd;
    mul_hi_lo(PHILOX_M1, s.date, hd, s.y0);
    mul_hi_lo(PHILOX_M0, hd ^ s.inner ^ s.key0, s.hia, s.loa);
}

// philox4x32_10 of the counter [block, inner, date, outer] under the stream's key, with
// the block-independent products of rounds 0 and 1 taken from stream_prepare: the same
// words, two multiplications fewer per block.
__device__ __forceinline__ U32x4 stream_philox(const NormalStream& s, unsigned block) {
    unsigned hb, lb, hz, lz;
    mul_hi_lo(PHILOX_M0, block, hb, lb);
    const unsigned z = hb ^ s.outer ^ s.key1;
    unsigned k0 = s.key0 + PHILOX_W0, k1 = s.key1 + PHILOX_W1;
    mul_hi_lo(PHILOX_M1, z, hz, lz);
    U32x4 c;
    c.x = hz ^ s.y0 ^ k0;
    c.y = lz;
    c.z = s.hia ^ lb ^ k1;
    c.w = s.loa;
#pragma unroll
    for (int round = 2; round < 10; ++round) {
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
        c = philox_round(c, k0, k1);
    }
    return c;
}

__device__ __forceinline__ void stream_init(NormalStream& s, unsigned long long seed, unsigned outer,
                                            unsigned date, unsigned inner) {
    s.key0 = (unsigned)seed;
    s.key1 = (unsigned)(seed >> 32);
    s.inner = inner;
    s.date = date;
    s.outer = outer;
    s.block = 0;
    s.neg = 0;
    s.pair_mask = 0;
    s.pos = 4;
    s.b0 = s.b1 = s.b2 = s.b3 = 0.0;
    stream_prepare(s);
}

// The four normals of Philox block `block` of the stream, as the f32 values they are
// (the fixed kernels' ring stores them so).
__device__ __forceinline__ void stream_block_f32(const NormalStream& s, unsigned block, float* z0,
                                                 float* z1, float* z2, float* z3) {
    const U32x4 r = stream_philox(s, block);
    box_muller_f32(r.x, r.y, z0, z1);
    box_muller_f32(r.z, r.w, z2, z3);
#if PATHS_ANTITHETIC
    *z0 = __int_as_float(__float_as_int(*z0) ^ s.neg);
    *z1 = __int_as_float(__float_as_int(*z1) ^ s.neg);
    *z2 = __int_as_float(__float_as_int(*z2) ^ s.neg);
    *z3 = __int_as_float(__float_as_int(*z3) ^ s.neg);
#endif
}

// The same normals widened to double.
__device__ __forceinline__ void stream_block(const NormalStream& s, unsigned block, double* z0,
                                             double* z1, double* z2, double* z3) {
    float a0, a1, a2, a3;
    stream_block_f32(s, block, &a0, &a1, &a2, &a3);
    *z0 = (double)a0;
    *z1 = (double)a1;
    *z2 = (double)a2;
    *z3 = (double)a3;
}

__device__ __forceinline__ double stream_next(NormalStream& s) {
    if (s.pos == 4) {
        stream_block(s, s.block, &s.b0, &s.b1, &s.b2, &s.b3);
        s.block += 1;
        s.pos = 0;
    }
    const int p = s.pos++;
    return p == 0 ? s.b0 : p == 1 ? s.b1 : p == 2 ? s.b2 : s.b3;
}

// One exact GBM step of the state x[i * ld] (i < d); z is scratch with the same stride.
__device__ __forceinline__ void gbm_step(double* x, double* z, int ld, int d,
                                         const double* __restrict__ drift,
                                         const double* __restrict__ vol,
                                         const double* __restrict__ factor, NormalStream& ns) {
    if (factor != 0) {
        for (int i = 0; i < d; ++i) z[i * ld] = stream_next(ns);
        for (int i = 0; i < d; ++i) {
            double acc = 0.0;
            const double* row = factor + (long long)i * d;
            for (int k = 0; k <= i; ++k) acc = acc + row[k] * z[k * ld];
            x[i * ld] = x[i * ld] * exp_step(drift[i] + vol[i] * acc, PATHS_EXP_T);
        }
    } else {
        for (int i = 0; i < d; ++i) {
            const double w = stream_next(ns);
            x[i * ld] = x[i * ld] * exp_step(drift[i] + vol[i] * w, PATHS_EXP_T);
        }
    }
}

// Raw Philox4x32-10 blocks: out[4 q..4 q+4] = philox(ctr[4 q..], key[2 q..]).
extern "C" __global__ void philox_blocks(const unsigned* __restrict__ ctr,
                                         const unsigned* __restrict__ key,
                                         unsigned* __restrict__ out, long long count) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= count) return;
    U32x4 c;
    c.x = ctr[4 * q];
    c.y = ctr[4 * q + 1];
    c.z = ctr[4 * q + 2];
    c.w = ctr[4 * q + 3];
    const U32x4 r = philox4x32_10(c, key[2 * q], key[2 * q + 1]);
    out[4 * q] = r.x;
    out[4 * q + 1] = r.y;
    out[4 * q + 2] = r.z;
    out[4 * q + 3] = r.w;
}

// out[q] = exp_step(x[q]) for q < n, with the table from constant memory (for tests:
// compared with the CPU's exp).
extern "C" __global__ void exp_step_values(const double* __restrict__ x, double* __restrict__ out,
                                           long long n) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q < n) out[q] = exp_step(x[q], PATHS_EXP_T);
}

// The number of floats with bit patterns lo + q (q < n) where sqrt_pos_f32 differs from
// the IEEE square root __fsqrt_rn, added to *mismatches (for tests: every float of
// Box-Muller's range).
extern "C" __global__ void sqrt_pos_f32_mismatches(unsigned lo, long long n,
                                                   unsigned long long* __restrict__ mismatches) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n) return;
    const float t = __int_as_float((int)(lo + (unsigned)q));
    if (__float_as_int(sqrt_pos_f32(t)) != __float_as_int(__fsqrt_rn(t)))
        atomicAdd(mismatches, 1ull);
}

// The first `count` normals of the stream (seed, outer, date, inner): thread q writes
// draws 4q..4q+3 (block q).
extern "C" __global__ void normal_draws(unsigned long long seed, unsigned outer, unsigned date,
                                        unsigned inner, double* __restrict__ out,
                                        long long count) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * q >= count) return;
    NormalStream s;
    stream_init(s, seed, outer, date, inner);
    double z[4];
    stream_block(s, (unsigned)q, &z[0], &z[1], &z[2], &z[3]);
#pragma unroll
    for (int k = 0; k < 4; ++k)
        if (4 * q + k < count) out[4 * q + k] = z[k];
}

// Outer paths first_path .. first_path + paths of `steps` steps from the spots:
// out[(l * (steps + 1) + k) * d + i] = S^i at date k of path l (k = 0: the spots).
extern "C" __global__ void outer_paths(unsigned long long seed, unsigned first_path, long long paths,
                                       int steps, int d, const double* __restrict__ spots,
                                       const double* __restrict__ drift,
                                       const double* __restrict__ vol,
                                       const double* __restrict__ factor,
                                       double* __restrict__ out) {
    extern __shared__ double scratch[];
    const int ld = blockDim.x;
    double* x = scratch + threadIdx.x;
    double* z = scratch + (long long)d * ld + threadIdx.x;
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= paths) return;
    NormalStream ns;
    stream_init(ns, seed, first_path + (unsigned)l, 0u, OUTER_STREAM);
    double* o = out + l * (long long)(steps + 1) * d;
    for (int i = 0; i < d; ++i) {
        x[i * ld] = spots[i];
        o[i] = spots[i];
    }
    for (int k = 1; k <= steps; ++k) {
        gbm_step(x, z, ld, d, drift, vol, factor, ns);
        for (int i = 0; i < d; ++i) o[(long long)k * d + i] = x[i * ld];
    }
}

// The stored inner states. The states of outer path l at step s (date `date + s + 1`)
// take the inner * d doubles from out + (l * steps + s) * inner * d, as the CPU engine's
// [l][s][mm][i] layout, but held as two planes of 32-bit words: word e = mm * d + i of
// the block is the high word of S(l, s, mm, i) (sign, exponent and the top 20 bits of
// the significand), word inner * d + e its low word. A reader that wants the double
// joins the two words (the same bits); the regression basis reads the high words alone
// (state_high in prelude.cu), so the exercise update reads the high-word plane and the
// payoffs (half the bytes). With PATHS_PAYOFF_PLANE (inner_paths_fixed below) the low
// words are not stored: their place holds the payoffs.
__device__ __forceinline__ void state_store(unsigned* __restrict__ hi, long long plane, double v) {
    hi[0] = (unsigned)__double2hiint(v);
    hi[plane] = (unsigned)__double2loint(v);
}

// Inner paths of `outer` outer paths (global indices first_outer + l) from their states
// at exposure date `date`: path (l, mm), mm < inner, starts at start[l * start_stride + i]
// and uses the stream (seed, first_outer + l, date, mm). Its state after step s + 1
// (date `date + s + 1`, s < steps) is element (mm, i) of block (l, s) of `out`, in the
// two-plane layout above.
extern "C" __global__ void inner_paths(unsigned long long seed, unsigned first_outer,
                                       unsigned date, long long outer, int inner, int steps,
                                       int d, const double* __restrict__ start,
                                       long long start_stride, const double* __restrict__ drift,
                                       const double* __restrict__ vol,
                                       const double* __restrict__ factor,
                                       double* __restrict__ out) {
    extern __shared__ double scratch[];
    const int ld = blockDim.x;
    double* x = scratch + threadIdx.x;
    double* z = scratch + (long long)d * ld + threadIdx.x;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    const long long l = t / inner;
    const int mm = (int)(t - l * inner);
    NormalStream ns;
#if PATHS_ANTITHETIC
    stream_init(ns, seed, first_outer + (unsigned)l, date, (unsigned)mm & ~1u);
    ns.neg = ((unsigned)mm & 1u) << 31;
#else
    stream_init(ns, seed, first_outer + (unsigned)l, date, (unsigned)mm);
#endif
    for (int i = 0; i < d; ++i) x[i * ld] = start[l * start_stride + i];
    const long long plane = (long long)inner * d;
    unsigned* o = (unsigned*)out + 2 * l * steps * plane + (long long)mm * d;
    for (int s = 0; s < steps; ++s) {
        gbm_step(x, z, ld, d, drift, vol, factor, ns);
        unsigned* os = o + 2 * s * plane;
        for (int i = 0; i < d; ++i) state_store(os + i, plane, x[i * ld]);
    }
}

#ifndef PATHS_D
#define PATHS_D 0
#endif

#ifndef PATHS_PAYOFF
#define PATHS_PAYOFF 0
#endif

#ifndef PATHS_PAYOFF_PLANE
#define PATHS_PAYOFF_PLANE 0
#endif
#if PATHS_PAYOFF_PLANE && !PATHS_PAYOFF
#error "PATHS_PAYOFF_PLANE needs PATHS_PAYOFF (the payoff function)"
#endif

#if PATHS_D > 0
// Host defines: PATHS_D (assets, <= 32), PATHS_FACTOR (0/1), PATHS_BLOCK (threads per
// block), PATHS_KEY0 and PATHS_KEY1 (the Philox key: the low and high words of the seed;
// the fixed kernels' seed argument is not read, and constant keys fold into the rounds'
// XORs: measured 1% of the path kernel), optionally PATHS_PAYOFF (1, with paths_payoff
// defined before this file: see inner_paths_fixed) and PATHS_PAYOFF_PLANE (1: the payoff
// plane, see inner_paths_fixed), and __constant__ double
// C_DRIFT[PATHS_D], C_VOL[PATHS_D] and, when PATHS_FACTOR, C_FACTOR[PATHS_D * PATHS_D]
// (row-major lower triangular).
// A step's normals are generated PATHS_CHUNK assets ahead of their use, so the ring
// holds at most a chunk plus the 3 draws a Philox block may leave over: RING rows,
// >= chunk + 3, a multiple of 4. A short ring keeps the block's shared memory small
// (more blocks per SM); PATHS_CHUNK >= d generates the whole step first. Chunk 12 with
// one Philox block per fill iteration, the ring in floats: measured (H100, basket29 100k,
// path kernel alone, benches/RESULTS.md twentieth session) 0.167 s against 0.175 (16
// unrolled twice, the thirteenth session's choice for a ring of doubles and the
// double-precision transform), 0.167 (10, 11, 13 once), 0.173 (9 and 14 once), 0.174 (8
// once), 0.174 (16 once, 20 twice), 0.177 (16 thrice), 0.171 (29: the whole step, twice
// or four times), 0.173-0.174 (10, 12 twice), 0.180 (24 twice), 0.182-0.191 (12 thrice,
// 8 twice).
// With PATHS_ANTITHETIC the fill runs ahead by up to 7 draws instead of 3 (fill_ring), and
// chunk 9 keeps the ring at 16 rows (11 blocks per SM; chunk 12 would take 20 rows and
// one block per SM): measured (H200, basket29 100k antithetic, thirty-ninth session) 0.332
// / 0.333 s against 0.336 / 0.337 (chunk 12) and 0.331 / 0.334 (chunk 8).
#ifndef PATHS_CHUNK
#if PATHS_ANTITHETIC
#define PATHS_CHUNK 9
#else
#define PATHS_CHUNK 12
#endif
#endif
// PATHS_FILL_UNROLL: Philox blocks per iteration of the ring's fill loop (their Box-Muller
// transforms overlap).
#ifndef PATHS_FILL_UNROLL
#define PATHS_FILL_UNROLL 1
#endif
// PATHS_GROUP: assets whose normals and states are loaded before their exps (see
// gbm_step_fixed); 1 is one asset at a time.
#ifndef PATHS_GROUP
#define PATHS_GROUP 4
#endif
#define PATHS_PRAGMA(x) _Pragma(#x)
#define PATHS_UNROLL_BY(k) PATHS_PRAGMA(unroll k)
#define PATHS_CH (PATHS_CHUNK < PATHS_D ? PATHS_CHUNK : PATHS_D)
// With PATHS_ANTITHETIC the inner kernel's fill generates two Philox blocks per
// iteration (fill_ring), up to 7 draws beyond its end: a ring of >= chunk + 7 rows.
#if PATHS_ANTITHETIC
#define RING (((PATHS_CH + 10) / 4) * 4)
#else
#define RING (((PATHS_CH + 6) / 4) * 4)
#endif
#define LDX (PATHS_BLOCK + 1)  // odd row stride of the ring: conflict-free
// A thread's states xs_all[tid * SXS + i] (i < d): an odd stride, so that the 64-bit
// accesses of a half-warp fall in distinct banks; for odd d (SXS = d) the block's states
// are then one contiguous array in the order of the output, copied without index
// arithmetic (inner_paths_fixed).
#define SXS (PATHS_D | 1)

// Element o of the block's states (src, in shared memory) to its high word at dst[o]
// and, without the payoff plane, its low word at dstl[o] (the contiguous copy of
// inner_paths_fixed).
__device__ __forceinline__ void copy_element(unsigned* dst, unsigned* dstl, const double* src,
                                             int o) {
    const double v = src[o];
    dst[o] = (unsigned)__double2hiint(v);
#if !PATHS_PAYOFF_PLANE
    dstl[o] = (unsigned)__double2loint(v);
#endif
}

// state_store for inner_paths_fixed: the high word alone with the payoff plane.
__device__ __forceinline__ void fixed_state_store(unsigned* __restrict__ hi, long long plane,
                                                  double v) {
#if PATHS_PAYOFF_PLANE
    hi[0] = (unsigned)__double2hiint(v);
#else
    state_store(hi, plane, v);
#endif
}

// The block's copy of PATHS_EXP_T (then a barrier: every thread of the block calls it).
static_assert(PATHS_BLOCK >= 32, "the exp table is copied by the first 32 threads");
__device__ __forceinline__ void exp_table_to_shared(double2* et) {
    if (threadIdx.x < 32) et[threadIdx.x] = PATHS_EXP_T[threadIdx.x];
    __syncthreads();
}

// The compiled-in Philox key (the host's seed), for stream_init.
#define PATHS_SEED (((unsigned long long)PATHS_KEY1 << 32) | (unsigned long long)PATHS_KEY0)

// Normals of the stream up to draw `end` (exclusive) into the ring (row = draw mod RING),
// continuing from Philox block *next; at most 3 draws beyond `end` are generated, and
// the ring keeps them until the next step uses them.
// PAIRS (the inner kernel with PATHS_ANTITHETIC): the two threads of a pair (lanes 2j and
// 2j + 1 of a warp, inner paths 2j and 2j + 1 of one outer path: the number of inner paths
// is even and the block size too) share the stream, and each generates every other
// Philox block: per iteration lane 2j block b, lane 2j + 1 block b + 1 (b even), their
// four normals exchanged by shuffles, then both blocks into each thread's ring, the odd
// lane's negated. Half the Philox and Box-Muller work per thread; up to 7 draws beyond
// `end` (RING is sized for it). The same normals as stream_block_f32 with `neg` set.
template <bool PAIRS = false>
__device__ __forceinline__ void fill_ring(float* zr, unsigned* next, unsigned end,
                                          const NormalStream& ns) {
    unsigned b = *next;
#if PATHS_ANTITHETIC
    if (PAIRS) {
        const unsigned odd = threadIdx.x & 1u;
        const unsigned sign = odd << 31;
        PATHS_UNROLL_BY(PATHS_FILL_UNROLL)
        for (; 4u * b < end; b += 2) {
            float z[4], o[4];
            stream_block_f32(ns, b + odd, &z[0], &z[1], &z[2], &z[3]);
#pragma unroll
            for (int i = 0; i < 4; ++i) o[i] = __shfl_xor_sync(ns.pair_mask, z[i], 1);
            const unsigned row0 = (4u * b) % RING, row1 = (4u * b + 4u) % RING;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float e = odd ? o[i] : z[i];  // block b (the even lane's)
                const float f = odd ? z[i] : o[i];  // block b + 1 (the odd lane's)
                zr[(row0 + i) * LDX] = __int_as_float(__float_as_int(e) ^ sign);
                zr[(row1 + i) * LDX] = __int_as_float(__float_as_int(f) ^ sign);
            }
        }
        *next = b;
        return;
    }
#endif
    PATHS_UNROLL_BY(PATHS_FILL_UNROLL)
    for (; 4u * b < end; ++b) {
        float z0, z1, z2, z3;
        stream_block_f32(ns, b, &z0, &z1, &z2, &z3);
        const unsigned row = (4u * b) % RING;
        zr[row * LDX] = z0;
        zr[(row + 1) * LDX] = z1;
        zr[(row + 2) * LDX] = z2;
        zr[(row + 3) * LDX] = z3;
    }
    *next = b;
}

// The normal of draw first + k (asset k < PATHS_D of the step whose draws start at
// `first`) from the ring, which is filled PATHS_CH assets ahead at each chunk's first
// asset; *row (the ring's row of that draw) advances to the next draw's.
template <bool PAIRS = false>
__device__ __forceinline__ double ring_normal(int k, float* zr, unsigned* row, unsigned first,
                                              unsigned* next, const NormalStream& ns) {
    if (k % PATHS_CH == 0)
        fill_ring<PAIRS>(zr, next, first + (k + PATHS_CH < PATHS_D ? k + PATHS_CH : PATHS_D), ns);
    const double z = (double)zr[*row * LDX];
    // A ring of a power-of-two size wraps by a mask (a mask for the compare and
    // select: one instruction fewer per asset in the SASS at basket29).
    *row = (RING & (RING - 1)) == 0 ? (*row + 1) & (RING - 1) : (*row + 1 == RING ? 0u : *row + 1);
    return z;
}

// One exact GBM step of the state xs[i] (i < d) with the normals of draws
// first .. first + d, generated into the ring a chunk of assets at a time. The correlated increment of asset i
// is ((C_i0 z_0 + C_i1 z_1) + ...) + C_ii z_i in increasing k, as the generic kernel
// forms it (it starts from 0.0 + C_i0 z_0; starting from C_i0 z_0 changes the sum only
// when every product is -0.0, and then only its sign, which leaves drift + vol * w and
// the state unchanged).
template <bool PAIRS = false>
__device__ __forceinline__ void gbm_step_fixed(double* xs, float* zr, unsigned first,
                                               unsigned* next, const NormalStream& ns,
                                               const double2* et) {
    unsigned row = first % RING;
#if PATHS_FACTOR
    double acc[PATHS_D];
#endif
    // Groups of PATHS_GROUP assets: their normals and states are loaded before any of
    // their new states is stored, so that the group's exp chains can overlap (a store of
    // xs[k] before the ring's load for k + 1 orders them: the compiler cannot tell the
    // two shared arrays apart through the pointers).
#pragma unroll
    for (int k0 = 0; k0 < PATHS_D; k0 += PATHS_GROUP) {
        double w[PATHS_GROUP], x[PATHS_GROUP];
#pragma unroll
        for (int j = 0; j < PATHS_GROUP; ++j) {
            const int k = k0 + j;
            if (k < PATHS_D) {
                const double z = ring_normal<PAIRS>(k, zr, &row, first, next, ns);
#if PATHS_FACTOR
#pragma unroll
                for (int i = k; i < PATHS_D; ++i) {
                    const double p = C_FACTOR[i * PATHS_D + k] * z;
                    acc[i] = k == 0 ? p : acc[i] + p;
                }
                w[j] = acc[k];
#else
                w[j] = z;
#endif
                x[j] = xs[k];
            }
        }
#pragma unroll
        for (int j = 0; j < PATHS_GROUP; ++j) {
            const int k = k0 + j;
            if (k < PATHS_D) xs[k] = x[j] * exp_step(C_DRIFT[k] + C_VOL[k] * w[j], et);
        }
    }
}

// inner_paths with d = PATHS_D and the market compiled in; same arguments and layout
// (the two planes of words); blockDim.x must be PATHS_BLOCK.
// With pay_step >= 0 (only when the host compiled in PATHS_PAYOFF and
// `double paths_payoff(const double* xs, int ld)`, the payoff of the states xs[i * ld] in the
// arithmetic of engine.cu's engine_payoff), step pay_step is the last one generated and
// its states are not stored: instead, as engine_cash_init would from them,
// cash[l * inner + mm] = payoff, cash_date[..] = pay_date and, where y is not null,
// y[..] = payoff * pay_df.
// With PATHS_PAYOFF_PLANE (the host checks that inner * d is even and d >= 2) every stored
// step keeps only the high-word plane; the block's second half (the low words' place)
// holds the payoffs of its inner paths instead, paths_payoff of the full states, as
// doubles: payoff (l, s, mm) at word inner * d + 2 mm of block (l, s).
extern "C" __global__ void __launch_bounds__(PATHS_BLOCK)
inner_paths_fixed(unsigned long long seed, unsigned first_outer, unsigned date, long long outer,
                  int inner, int steps, const double* __restrict__ start, long long start_stride,
                  double* __restrict__ out, int pay_step, unsigned pay_date, double pay_df,
                  double* __restrict__ cash, unsigned* __restrict__ cash_date,
                  double* __restrict__ y) {
    __shared__ double xs_all[PATHS_BLOCK * SXS];
    __shared__ float zr_all[RING * LDX];
    __shared__ long long base_all[PATHS_BLOCK];
    __shared__ double2 et[32];
    const int tid = threadIdx.x;
    exp_table_to_shared(et);
    const long long t0 = (long long)blockIdx.x * PATHS_BLOCK;
    const long long t = t0 + tid;
    const bool live = t < outer * inner;
    long long l = 0;
    int mm = 0;
    if (live) {
        l = t / inner;
        mm = (int)(t - l * inner);
    }
    // The high word of this thread's state (s, i) at word base + 2 s inner d + i of out.
    base_all[tid] = live ? 2 * l * steps * (long long)inner * PATHS_D + (long long)mm * PATHS_D : -1;
    double* xs = xs_all + tid * SXS;
    float* zr = zr_all + tid;
    NormalStream ns;
#if PATHS_ANTITHETIC
    // The pair's stream; the odd lane's sign is applied by fill_ring<true>. Live threads
    // are a prefix of the block and come in pairs (an even number of inner paths).
    static_assert(PATHS_BLOCK % 2 == 0, "pairs of lanes");
    stream_init(ns, PATHS_SEED, first_outer + (unsigned)l, date, (unsigned)mm & ~1u);
    ns.pair_mask = __ballot_sync(0xffffffffu, live);
#else
    stream_init(ns, PATHS_SEED, first_outer + (unsigned)l, date, (unsigned)mm);
#endif
    if (live)
        for (int i = 0; i < PATHS_D; ++i) xs[i] = start[l * start_stride + i];
    unsigned next = 0;
    const long long step_stride = (long long)inner * PATHS_D;
#if PATHS_D & 1
    // The copy of the block's states, element e = tl * d + i of step s: with at least a
    // block of inner paths, the block spans at most two outer paths, l0 for tl < t1 and
    // l0 + 1 after, each a contiguous run of each plane of the output: the high words of
    // l0's elements from word off0 + 2 s inner d on, those of l0 + 1's `jump` words further.
    // Thread tid copies its elements j = 0, 1, ... (e = tid + j * PATHS_BLOCK): those with
    // j < j1 lie before the boundary, those with j >= j_end are not live (live threads are
    // a prefix of the block).
    const bool contiguous = inner >= PATHS_BLOCK;
    long long off0 = 0, jump = 0;
    int j1 = 0, j_end = 0;
    // The block's rows all live and all of one outer path (the same for every thread):
    // each thread's elements then go to one run (j1, j_end >= d), copied without the
    // per-element boundary test and pointer selects of the general loop (~13 instructions
    // per element against 3).
    bool one_run = false;
    if (contiguous) {
        const long long l0 = t0 / inner;
        const int t1 = (int)((l0 + 1) * inner - t0);
        const int n_live = (int)(outer * inner - t0 < PATHS_BLOCK ? outer * inner - t0 : PATHS_BLOCK);
        off0 = (2 * l0 * steps * (long long)inner + (t0 - l0 * inner)) * PATHS_D;
        jump = (2 * steps * (long long)inner - t1) * PATHS_D - (t0 - l0 * inner) * PATHS_D;
        const int e1 = t1 * PATHS_D, e_end = n_live * PATHS_D;
        j1 = e1 > tid ? (e1 - tid + PATHS_BLOCK - 1) / PATHS_BLOCK : 0;
        j_end = e_end > tid ? (e_end - tid + PATHS_BLOCK - 1) / PATHS_BLOCK : 0;
        one_run = t1 >= PATHS_BLOCK && n_live == PATHS_BLOCK;
    }
#endif
    for (int s = 0; s < steps; ++s) {
        if (live) {
            gbm_step_fixed<PATHS_ANTITHETIC != 0>(xs, zr, (unsigned)s * PATHS_D, &next, ns, et);
        }
#if PATHS_PAYOFF
        if (s == pay_step) {  // the same for every thread: no barrier is skipped
            if (live) {
                const double p = paths_payoff(xs, 1);
                cash[t] = p;
                cash_date[t] = pay_date;
                if (y != nullptr) y[t] = p * pay_df;
            }
            return;
        }
#endif
#if PATHS_PAYOFF_PLANE
        if (live)
            *(double*)((unsigned*)out + 2 * (l * steps + s) * step_stride + step_stride + 2 * mm) =
                paths_payoff(xs, 1);
#endif
        __syncthreads();
        // Element e = tl * d + i of the block's states: thread tid copies e = tid,
        // tid + PATHS_BLOCK, ... (its high word, then its low word a plane further).
        unsigned* os = (unsigned*)out + 2 * s * step_stride;
#if PATHS_D & 1
        if (contiguous) {
            const double* src = xs_all + tid;
            unsigned* dst = os + off0 + tid;
            // The low words through a pointer of their own: an address formed from dst
            // and the plane's run-time size costs ~5 instructions per state (path kernel
            // alone at basket29 100k: 0.178 -> 0.174 s, benches/RESULTS.md).
            unsigned* dstl = dst + step_stride;
            if (one_run) {
#pragma unroll
                for (int j = 0; j < PATHS_D; ++j) copy_element(dst, dstl, src, j * PATHS_BLOCK);
            } else {
#pragma unroll
                for (int j = 0; j < PATHS_D; ++j) {
                    if (j == j1) {
                        dst += jump;
                        dstl += jump;
                    }
                    if (j < j_end) copy_element(dst, dstl, src, j * PATHS_BLOCK);
                }
            }
        } else
#endif
        {
            int tl = tid / PATHS_D, i = tid - tl * PATHS_D;
#pragma unroll 4
            for (int e = tid; e < PATHS_BLOCK * PATHS_D; e += PATHS_BLOCK) {
                const long long b = base_all[tl];
                if (b >= 0) fixed_state_store(os + b + i, step_stride, xs_all[tl * SXS + i]);
                tl += PATHS_BLOCK / PATHS_D;
                i += PATHS_BLOCK % PATHS_D;
                if (i >= PATHS_D) {
                    i -= PATHS_D;
                    ++tl;
                }
            }
        }
        __syncthreads();
    }
}

// outer_paths with d = PATHS_D and the market compiled in; same arguments and layout
// (out[(l * (steps + 1) + k) * d + i]); blockDim.x must be PATHS_BLOCK.
extern "C" __global__ void __launch_bounds__(PATHS_BLOCK)
outer_paths_fixed(unsigned long long seed, unsigned first_path, long long paths, int steps,
                  const double* __restrict__ spots, double* __restrict__ out) {
    __shared__ double xs_all[PATHS_BLOCK * SXS];
    __shared__ float zr_all[RING * LDX];
    __shared__ double2 et[32];
    const int tid = threadIdx.x;
    exp_table_to_shared(et);
    const long long l = (long long)blockIdx.x * PATHS_BLOCK + tid;
    if (l >= paths) return;  // no block-wide synchronisation below
    double* xs = xs_all + tid * SXS;
    float* zr = zr_all + tid;
    NormalStream ns;
    stream_init(ns, PATHS_SEED, first_path + (unsigned)l, 0u, OUTER_STREAM);
    double* o = out + l * (long long)(steps + 1) * PATHS_D;
    for (int i = 0; i < PATHS_D; ++i) {
        xs[i] = spots[i];
        o[i] = spots[i];
    }
    unsigned next = 0;
    for (int k = 1; k <= steps; ++k) {
        gbm_step_fixed(xs, zr, (unsigned)(k - 1) * PATHS_D, &next, ns, et);
        for (int i = 0; i < PATHS_D; ++i) o[(long long)k * PATHS_D + i] = xs[i];
    }
}
#endif
