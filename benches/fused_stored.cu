// Timing prototype, not part of `cva`: one fused Longstaff-Schwartz step per (outer path,
// regression date) on the stored states of the payoff plane (issue 5; benches/RESULTS.md,
// forty-fourth session). basket29's shape only (d = 29, linear basis n = 30, 300 inner
// paths, f64), synthetic states.
//
// One warp per outer path walks S regression dates backward. Per date it keeps the date's
// high words (34.8 KB) and payoffs (2.4 KB) in its own shared memory, so that the states
// are read from DRAM once: build [Psi y]^T [Psi y] on the FP64 tensor cores
// (mma.m16n8k8, the pipeline build's fragments and order), a one-warp L D L^T with the
// forward and back substitutions and the residual, then the exercise from the same shared
// states (continuation psi . beta as separate products and sums, as engine.cu forms it).
// The cash flows and their dates stay in registers across the walk, y in shared memory.
// The copies of the next date's chunks are issued as the exercise frees each chunk, and
// the build waits chunk by chunk.
//
// MODE 0: all; 1: no solve (beta fixed); 2: no build and no solve; 3: copies only.
// WPB (warps per outer path, 1, 2 or 4; the ring kernel 1 or 2), MINB (blocks per SM for the register budget) and
// SOLVE (1 or 2, below) select the variants measured. Not the engine's bits: the
// acceptance test is a plain relative residual, and there is no escalation.
// Build and run on the GPU machine (repository root):
//   nvcc -O3 -arch=sm_90 --fmad=false -std=c++17 -I kernels/cuda [-DMODE=..] \
//        benches/fused_stored.cu -o fs && ./fs S OUTER_PER_LAUNCH TOTAL_REGRESSIONS
// It prints the check of one outer path's beta against a host solve (S = 1 run first),
// then the time and the regressions per second. Figures: benches/RESULTS.md, "Forty-fourth
// session" (best: 0.0965-0.0974 s per 3.6 M regressions on an H200, 37.1 M/s, WPB 2,
// MINB 4, SOLVE 3; without the solve 0.071 s).
// WPB 4 (forty-fifth session, call 3) was slower: 0.116-0.117 s; so was STAGGER (call 5).
// -DAHEAD (with MINB=2, NBW, NEW; the kernel fused_ahead below) builds the next date's
// Gram while the current date is solved, from a second state buffer ("Forty-fifth
// session": 0.148 s at best, slower, since only two outer paths fit an SM).
// -DIMMA (kept-state kernel, WPB 1 or 2) builds the Gram exactly on the 8-bit integer
// tensor cores from byte slices of the states ("Forty-sixth session": 0.128 s, slower:
// the slicing costs more integer work per state than the FP64 DMMA it replaces).
// Forty-sixth session: -DNOSKIP drops the build's branch over groups of 8 paths of which
// none enters; -DBULK copies the chunks by TMA bulk copies on mbarriers; -DJOIN1 joins the
// two warps' Grams in one pass; SOLVE 4 is Gauss-Jordan with 2 x 2 pivot blocks (no back
// substitution); -DSOLVE_NOINLINE calls the solver as a separate function. The best variant:
// SOLVE 4, WPB 2, MINB 4, NOSKIP, BULK, JOIN1, SOLVE_NOINLINE at 0.0811-0.0826 s per 3.6 M
// regressions (43.6-44.4 M/s). -DPROF prints each warp's cycles per date by phase;
// -DSMEM_PAD=bytes holds fewer outer paths per SM. Variants measured and dropped: REGPAY,
// KLEAN, EXFIRST, another cash layout (commit 229a4dc); EXTREE, MAXREG (commit 82e56e4);
// CASH_OWN, YSHFL (commit 37d1b0c).
// Forty-seventh session: -DSWAPW puts the solving warp of each outer path on an SM
// sub-partition of its own (warp slot mod 4), -DLASTNG skips the empty groups of the last
// chunk, SOLVE 6 forms the multipliers from adj(P) u while 1 / det is formed (-DKAHAN6: by
// Kahan's difference of products; without it 0.03% of the systems miss the bound), RCP3
// drops the reciprocal's last correction, -DEXPAIR forms the continuations of 2 (-DEX3: 3,
// then 2; -DEX23: 2, then 3) chunks together; -DRESTOL sets the acceptance bound, -DPROF2
// splits the copies' issue out of the exercise phase. Best: SOLVE 6, KAHAN6, RCP3, EXPAIR,
// EX3, SWAPW, LASTNG (with NOSKIP BULK JOIN1 SOLVE_NOINLINE, WPB 2, MINB 4) at 0.0701-0.0702 s
// per 3.6 M regressions at S = 8 (51.3 M/s; S = 4 0.0718 s, S = 10 0.0699 s), no system
// flagged. Measured and dropped (code in commits 691be37, 71dc913, 8087997): SOLVE 5 (the
// next pivot's inverse one step ahead), QUAD (four walks per block, builds taking turns),
// DFSH, COPY2, NOFENCE, RESCH, BLK5 (5 DMMA blocks per 8 paths), RESDEFER (the residual
// checked by the other warp), CPAIR (two chunks per basic block), SPARE (6 chunk slots per
// warp), CASHSH (cash flows in shared memory).
#include "prelude.cu"
#include "rcp.cu"

#ifndef __CUDACC_RTC__
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

#ifndef MODE
#define MODE 0
#endif
#define D 29
#define M 300
#define N 30
#define NCH 10                // chunks of 32 inner paths
#define BLOCK_WORDS (2 * M * D)  // one (outer path, date) block: m x d doubles
#define NPK (31 * 32 / 2)     // packed lower triangle of the 31 x 31 augmented matrix
#define SMEM_BYTES (M * D * 4 + M * 8 + M * 8 + NPK * 8 + 32 * 8 + SCOL * 8 + 16 + (WPB == 4 ? 2 * NPK * 8 : 0) + IMMA_BYTES + BULK_BYTES)

#ifdef BULK
#define BULK_BYTES (NCH * 8)  // the chunks' mbarriers, last
#else
#define BULK_BYTES 0
#endif
#ifdef IMMA
#define IMMA_BYTES (32 * 8)  // warp 1's part of b
#else
#define IMMA_BYTES 0
#endif
// SOLVE 1: rows in registers, columns by shuffles, IEEE division; 2: rows in registers,
// the pivot column and z through shared memory (broadcast loads), correctly rounded
// reciprocals (rcp.cu), the forward substitution folded into the elimination (b as column
// N), the next column updated and published first (look-ahead), L in shared memory for the
// back substitution. 3: SOLVE 2 with 2 x 2 pivot blocks (solve3 below).
#ifndef SOLVE
#define SOLVE 2
#endif
// Doubles of the solver's scratch.
#define SCOL (SOLVE >= 3 ? 208 : 96)
// Warps per outer path (1 or 2): with 2, warp w owns the chunks c = w mod 2 (their copies,
// build and exercise); warp 1's partial sums join warp 0's in shared memory, warp 0 solves.
#ifndef WPB
#define WPB 1
#endif

__constant__ double C_DF[16];

__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }


// STAGGER (ns): the blocks of a launch's first wave (block i on SM i mod SMs, the
// scheduler's usual order) start (i / SMs) * STAGGER ns apart, so that the outer paths of
// an SM do not copy and build in step (every walk has the same S here, unlike the
// engine's). C_WAVE: {SMs, blocks per SM}.
__constant__ int C_WAVE[2];
__device__ __forceinline__ void stagger_start() {
#ifdef STAGGER
    if (blockIdx.x < (unsigned)(C_WAVE[0] * C_WAVE[1])) __nanosleep((blockIdx.x / C_WAVE[0]) * STAGGER);
#endif
}

// Deterministic value in [0, 1) from two integers (splitmix64).
__host__ __device__ inline double hash01(unsigned long long a, unsigned long long b) {
    unsigned long long z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

__host__ __device__ inline double initial_cash(long long l, int mm) { return 0.3 * hash01(l, 1000 + mm); }

// States of (l, s): prices exp(0.1 (u - 0.5) 3.4) (about 1 +- 17%), the high words and the
// payoff of the call on the maximum struck at 1 (from the high words).
__global__ void fill(unsigned* st, long long outer, int S) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * S * M) return;
    const long long blk = t / M;
    const int mm = (int)(t - blk * M);
    unsigned* b = st + blk * (long long)BLOCK_WORDS;
    double mx = 0.0;
    for (int i = 0; i < D; ++i) {
        const double s = exp(0.34 * (hash01(t, i) - 0.5));
        const unsigned hw = (unsigned)__double2hiint(s);
        b[mm * D + i] = hw;
        mx = fmax(mx, __hiloint2double((int)hw, 0));
    }
    ((double*)(b + M * D))[mm] = fmax(mx - 1.0, 0.0);
}

__device__ __forceinline__ void wait_pending(int n) {
    switch (n) {
        case 0: async_copy_wait<0>(); break;
        case 1: async_copy_wait<1>(); break;
        case 2: async_copy_wait<2>(); break;
        case 3: async_copy_wait<3>(); break;
        case 4: async_copy_wait<4>(); break;
        case 5: async_copy_wait<5>(); break;
        case 6: async_copy_wait<6>(); break;
        case 7: async_copy_wait<7>(); break;
        case 8: async_copy_wait<8>(); break;
        default: async_copy_wait<9>(); break;
    }
}

// Chunk c (32 inner paths) of the block at src into the warp's buffers, one commit group.
__device__ __forceinline__ void issue_chunk(unsigned* sh, double* sp, const unsigned* src, int c,
                                            int lane) {
    const int p0 = 32 * c, np = min(32, M - p0), nw = np * D;
    const unsigned* g = src + p0 * D;
    unsigned* s = sh + p0 * D;
    for (int r = 4 * lane; r < nw; r += 128) async_copy16(s + r, g + r);
    const double* gp = (const double*)(src + M * D) + p0;
    if (2 * lane < np) async_copy16(sp + p0 + 2 * lane, gp + 2 * lane);
    async_copy_commit();
}

// BULK (forty-sixth session): the chunk copies by the Tensor Memory Accelerator instead of
// 16-byte cp.async per lane: lane 0 issues two cp.async.bulk (the chunk's high words and
// its payoffs, both contiguous and 16-byte aligned) that complete on the chunk's mbarrier,
// whose phase flips once per date; every lane waits on the phase.
#ifdef BULK
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long* b) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\tfence.mbarrier_init.release.cluster;" ::"r"(smem_addr(b))
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred P1;\n\tWAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t@!P1 bra WAIT_%=;\n\t}" ::"r"(smem_addr(b)),
        "r"(parity)
        : "memory");
}
// Chunk c of the block at src into sh / sp on barrier mb[c] (lane 0 only; after the warp's
// last generic reads of the chunk, so the proxy fence first).
__device__ __forceinline__ void issue_chunk_bulk(unsigned* sh, double* sp, const unsigned* src, int c,
                                                 unsigned long long* mb) {
    const int p0 = 32 * c, np = min(32, M - p0);
    const unsigned bw = np * D * 4, bp = np * 8;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(mb + c)), "r"(bw + bp)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(sh + p0 * D)),
                 "l"(src + p0 * D), "r"(bw), "r"(smem_addr(mb + c))
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(sp + p0)),
                 "l"((const double*)(src + M * D) + p0), "r"(bp), "r"(smem_addr(mb + c))
                 : "memory");
}
#endif

// The 6 blocks of 16 x 8 that cover the lower [Psi y]^T [Psi y] (rows 16 R.., columns
// 8 J.., J <= 2 R + 1): f(R, J, k) for block k = 0..5 in that order.
template <typename F>
__device__ __forceinline__ void for_lower_blocks(F f) {
    int k = 0;
#pragma unroll
    for (int R = 0; R < 2; ++R)
#pragma unroll
        for (int J = 0; J < 4 && J <= 2 * R + 1; ++J, ++k) f(R, J, k);
}

// This lane's 4 entries of each of those blocks in the MMA accumulator layout:
// f(k, e, row, column) for accumulator acc[k][e].
template <typename F>
__device__ __forceinline__ void for_lane_entries(int lane, F f) {
    const int g = lane >> 2, q = lane & 3;
    for_lower_blocks([&](int R, int J, int k) {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(k, e, 16 * R + g + 8 * (e >> 1), 8 * J + 2 * q + (e & 1));
    });
}

// The build's work on one chunk of up to 32 inner paths: rows hb[p * D ..] (high words),
// the paths that enter in mask (bit p), y_p from yof(p) (a call every lane makes). The
// pipeline build's fragments and DMMA order (regression.cu, TC_K 8); acc: the 6 blocks of
// 16 x 8 of the lower [Psi y]^T [Psi y].
// NOSKIP (forty-sixth session): no branch over the groups of 8 paths of which none enters
// (their DMMAs add zeros), so that one basic block holds the chunk's 4 groups.
// NG: the groups of 8 paths formed (4; fewer for a last chunk of fewer paths, LASTNG).
template <int NG = 4, typename YOf>
__device__ __forceinline__ void build_chunk_mask(double (&acc)[6][4], const unsigned* hb, unsigned mask,
                                                 YOf yof, int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int k0 = 0; k0 < 8 * NG; k0 += 8) {
#ifndef NOSKIP
        if (((mask >> k0) & 0xffu) == 0) continue;
#endif
        double v[4][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int pl = k0 + q + 4 * h;
            const bool enters = (mask >> pl) & 1u;
            const int p = enters ? pl : 0;
            const unsigned* sph = hb + p * D;
            const double yv = yof(pl, p);
#pragma unroll
            for (int I = 0; I < 4; ++I) {
                const int col = 8 * I + g;
                double val;
                if (col >= 1 && col <= D)
                    val = 1.0 * (state_high(sph, col - 1) * 1.0);
                else
                    val = col == 0 ? 1.0 : (col == N ? yv : 0.0);
                v[I][h] = enters ? val : 0.0;
            }
        }
#ifdef __CUDA_ARCH__
        for_lower_blocks([&](int R, int J, int k) {
            mma_m16n8k8_f64(acc[k], v[2 * R][0], v[2 * R + 1][0], v[2 * R][1], v[2 * R + 1][1], v[J][0],
                            v[J][1]);
        });
#endif
    }
}

// build_chunk_mask with the payoffs pb[p] and cash flows yb[p] (p < np) in shared memory;
// total counts the paths that enter.
// LASTNG (forty-seventh session): the last chunk (M mod 32 paths) forms only its groups
// that hold paths, in a second copy of the build.
template <bool WithY = true>
__device__ __forceinline__ void build_chunk(double (&acc)[6][4], unsigned& total, const unsigned* hb,
                                            const double* pb, const double* yb, int np, int lane) {
    const bool f = lane < np && pb[lane] > 0.0;
    const unsigned mask = __ballot_sync(0xffffffffu, f);
    total += __popc(mask);
#ifdef LASTNG
    constexpr int ngl = (M % 32 + 7) / 8;
    if (ngl > 0 && np < 32) {
        build_chunk_mask<ngl>(acc, hb, mask, [&](int, int p) { return WithY ? yb[p] : 0.0; }, lane);
        return;
    }
#endif
    build_chunk_mask(acc, hb, mask, [&](int, int p) { return WithY ? yb[p] : 0.0; }, lane);
}


#ifdef IMMA
// IMMA (forty-sixth session): the Gram on the 8-bit integer tensor cores, exactly. A state
// s = 2^e (1 + m 2^-20) (its high word) with e in [IMMA_E0, IMMA_E0 + 4) is the integer
// X = s 2^(20 - IMMA_E0) < 2^24, so s_i s_j = X_i X_j 2^(2 IMMA_E0 - 40) with no rounding.
// X = x0 2^16 + x1 2^8 + x2 (bytes), and sum_p X_i X_j = sum_w 2^(8 (4 - w)) C_w with
// C_w = sum_{a + b = w} sum_p x_a(i) x_b(j): 9 byte products per pair of features, summed
// in s32 by mma.m16n8k32.u8 (C_2 <= 900 x 255^2 < 2^31), joined in s64 and rounded once to
// f64. The constant feature is X = 1 (scale 1). b = Psi^T y in FP64 on the CUDA cores. A
// state outside the window counts the walk in *flags (the engine would take the FP64 build).
// Ablations (timing only, wrong answers): IMMA_NOCHECK drops the window check, IMMA_NOB the
// FP64 b.
#ifndef IMMA_E0
#define IMMA_E0 (-2)
#endif
#include "mma_u8.cuh"

// One chunk of up to 32 inner paths (as build_chunk). Lane (g, q) forms features
// f = 8 o + g (o < 4; 0 the constant, 1..D the states, the rest 0) of paths
// 16 h + 4 q + t (h < 2, t < 4): sl[a][o][h] holds byte a (0 the highest) of the 4 paths'
// X, path t in byte t, which is both the A fragment (rows f) and the B fragment (columns f)
// of mma.m16n8k32. acc[w]: C_w on the 6 lower blocks of 16 x 8; bacc[o]: this lane's part
// of b_f; chk: the OR of the window offsets of the states that enter (> 3: outside).
__device__ __forceinline__ void build_chunk_imma(int (&acc)[5][6][4], double (&bacc)[4], unsigned& total,
                                                 unsigned& chk, const unsigned* hb, const double* pb,
                                                 const double* yb, int np, int lane) {
    const int g = lane >> 2, q = lane & 3;
    const bool f = lane < np && pb[lane] > 0.0;
    const unsigned mask = __ballot_sync(0xffffffffu, f);
    total += __popc(mask);
    if (mask == 0) return;
    unsigned sl[3][4][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        bool en[4];
        double yv[4];
        int pp[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int p = 16 * h + 4 * q + t;
            en[t] = (mask >> p) & 1u;
            pp[t] = en[t] ? p : 0;
            yv[t] = en[t] ? yb[pp[t]] : 0.0;
        }
#pragma unroll
        for (int o = 0; o < 4; ++o) {
            const int fe = 8 * o + g;
            const bool st = fe >= 1 && fe <= D;
            unsigned X[4];
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const unsigned wd = hb[pp[t] * D + (st ? fe - 1 : 0)];
                const unsigned shf = ((wd >> 20) & 0x7ffu) - (unsigned)(1023 + IMMA_E0);
#ifndef IMMA_NOCHECK
                chk |= st && en[t] ? shf : 0u;  // no branch: tested once after the chunk loop
#endif
                const unsigned x = st ? ((wd & 0xfffffu) | 0x100000u) << (shf & 3u) : (fe == 0 ? 1u : 0u);
                X[t] = en[t] ? x : 0u;
                const double sv = st ? __hiloint2double((int)wd, 0) : (fe == 0 ? 1.0 : 0.0);
#ifndef IMMA_NOB
                bacc[o] = fma(sv, yv[t], bacc[o]);
#endif
            }
            const unsigned l01 = __byte_perm(X[0], X[1], 0x5140), h01 = __byte_perm(X[0], X[1], 0x7362);
            const unsigned l23 = __byte_perm(X[2], X[3], 0x5140), h23 = __byte_perm(X[2], X[3], 0x7362);
            sl[0][o][h] = __byte_perm(h01, h23, 0x5410);
            sl[1][o][h] = __byte_perm(l01, l23, 0x7632);
            sl[2][o][h] = __byte_perm(l01, l23, 0x5410);
        }
    }
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b)
            for_lower_blocks([&](int R, int J, int k) {
                mma_u8(acc[a + b][k], sl[a][2 * R][0], sl[a][2 * R + 1][0], sl[a][2 * R][1], sl[a][2 * R + 1][1],
                       sl[b][J][0], sl[b][J][1]);
            });
}

// The integer sums of build_chunk_imma as the FP64 blocks of build_chunk (b not in them).
__device__ __forceinline__ void imma_to_f64(const int (&acc)[5][6][4], double (&d)[6][4], int lane) {
    for_lane_entries(lane, [&](int k, int e, int r, int c) {
        long long v = acc[0][k][e];
#pragma unroll
        for (int w = 1; w < 5; ++w) v = v * 256 + acc[w][k][e];
        const double sc = (r == 0 ? 1.0 : ldexp(1.0, IMMA_E0 - 20)) * (c == 0 ? 1.0 : ldexp(1.0, IMMA_E0 - 20));
        d[k][e] = __ll2double_rn(v) * sc;
    });
}
#endif

// RESTOL (forty-seventh session, a timing and diagnosis aid): the acceptance bound on
// |b - A x|^2 / |b|^2 (1e-20, a relative residual of 1e-10).
#ifndef RESTOL
#define RESTOL 1e-20
#endif
// The 2 x 2 pivot solvers' reciprocal of det (SOLVE 3, 4, 6): correctly rounded, or with
// RCP3 without its last correction (3 FMAs after the MUFU instead of 5; within about an
// ulp).
__device__ __forceinline__ double rcp_pivot(double d) {
#ifdef RCP3
    double y;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(d));
    y = __hiloint2double(__double2hiint(y), __double2hiint(d) + 0x300402);
    double e = fma(-d, y, 1.0);
    e = fma(e, e, e);
    return fma(y, e, y);
#else
    return rcp_rn_fast_f64(d);
#endif
}

// The solvers' start: lane i < N loads row i of A (full, from the packed lower triangle
// sg) into a[0..N-1] (and ra without Lean), b_i into a[N], and returns b_i.
template <bool Lean>
__device__ __forceinline__ double solve_rows(const double* sg, double (&a)[N + 1], double (&ra)[Lean ? 1 : N],
                                             int lane) {
    const int i = lane;
    const bool row = i < N;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const int r = max(i, k), cc = min(i, k);
        a[k] = row ? sg[r * (r + 1) / 2 + cc] : 0.0;
        if (!Lean) ra[k] = a[k];
    }
    const double bi0 = row ? sg[N * (N + 1) / 2 + i] : 0.0;
    a[N] = bi0;
    return bi0;
}

// The solvers' end: the relative residual |b - A x|^2 <= 1e-20 |b|^2 (A from ra, or from
// sg with Lean; x in sx), with every pivot positive (good) and total >= N, accepts x_i
// (lane i's xi) as beta; otherwise beta is the fallback mean (b_0, 0, ...) and the system
// is counted in *flags.
template <bool Lean>
__device__ __forceinline__ void solve_accept(const double* sg, const double (&ra)[Lean ? 1 : N], const double* sx,
                                             double bi0, double xi, bool good, unsigned total, int* flags,
                                             double* sb, int lane) {
    const int i = lane;
    const bool row = i < N;
    double r = bi0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const int rr_ = max(i, k), cc = min(i, k);
        r = fma(-(Lean ? (row ? sg[rr_ * (rr_ + 1) / 2 + cc] : 0.0) : ra[Lean ? 0 : k]), sx[k], r);
    }
    double rr = row ? r * r : 0.0, bb = row ? bi0 * bi0 : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        rr += __shfl_xor_sync(0xffffffffu, rr, o);
        bb += __shfl_xor_sync(0xffffffffu, bb, o);
    }
    const bool ok = good && total >= N && rr <= RESTOL * bb && rr == rr;
    if (!ok && lane == 0) atomicAdd(flags, 1);
    if (row) sb[i] = ok ? xi : (i == 0 ? bi0 : 0.0);
}

// SOLVE 2: the one-warp L D L^T of the packed augmented Gram sg (A and b in row N), beta
// into sb (the fallback mean b_0 where the system is not accepted). scol: 96 doubles (two
// pivot columns, x).
// Lean: L goes to sL (apart from A, which stays in sg for the residual) instead of over A,
// so that the rows of A need not stay in registers.
template <bool Lean>
__device__ __forceinline__ void solve2(double* sg, double* sL, double* sb, double* scol, unsigned total,
                                       int* flags, int lane) {
    const int i = lane;
    const bool row = i < N;
    double a[N + 1], ra[Lean ? 1 : N];
    const double bi0 = solve_rows<Lean>(sg, a, ra, lane);
    if (!Lean) sL = sg;
    __syncwarp();  // sg becomes L
    if (row) scol[i] = a[0];
    if (i == 0) scol[N] = a[N];
    __syncwarp();
    double di = 1.0;
    bool good = true;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const double* cj = scol + 32 * (j & 1);
        double* cn = scol + 32 * ((j + 1) & 1);
        const double dj = cj[j];
        if (i == j) di = dj;
        good = good && dj > 0.0;
        const double rd = rcp_rn_fast_f64(dj);
        const double li = i > j && row ? a[j] * rd : 0.0;
        if (i > j && row) sL[i * (i + 1) / 2 + j] = li;
        if (j + 1 < N) {
            a[j + 1] = fma(-li, cj[j + 1], a[j + 1]);
            a[N] = fma(-li, cj[N], a[N]);
            if (row && i >= j + 1) cn[i] = a[j + 1];
            if (i == j + 1) cn[N] = a[N];
        }
#pragma unroll
        for (int k = j + 2; k < N; ++k) a[k] = fma(-li, cj[k], a[k]);
        __syncwarp();
    }
    // a[N] = z_i; x = D^-1 z, then L^T x = that, from the last row up.
    double xi = row ? a[N] * rcp_rn_fast_f64(di) : 0.0;
    double* const sx = scol + 64;
#pragma unroll
    for (int j = N - 1; j >= 0; --j) {
        if (i == j) sx[j] = xi;
        __syncwarp();
        if (i < j) xi = fma(-sL[j * (j + 1) / 2 + i], sx[j], xi);
    }
    __syncwarp();
    solve_accept<Lean>(sg, ra, sx, bi0, xi, good, total, flags, sb, lane);
}

// The 2 x 2 pivot solvers' start (SOLVE 3, 4, 6): the rows of A into a (solve_rows), then
// the first pivot pair's columns into scol[0..31] and scol[32..63], their entry N the
// pair's z. Returns b_i.
template <bool Lean>
__device__ __forceinline__ double pair_start(const double* sg, double (&a)[N + 1], double (&ra)[Lean ? 1 : N],
                                             double* scol, int lane) {
    const int i = lane;
    const double bi0 = solve_rows<Lean>(sg, a, ra, lane);
    __syncwarp();
    if (i < N) {
        scol[i] = a[0];
        scol[32 + i] = a[1];
    }
    if (i == 0) scol[N] = a[N];
    if (i == 1) scol[32 + N] = a[N];
    __syncwarp();
    return bi0;
}

// w = D^-1 z by the 2 x 2 blocks' inverses (sD: 3 entries per block): lane i < N publishes
// z_i in sx and returns w_i.
__device__ __forceinline__ double pair_block_solve(double zi, double* sx, const double* sD, int lane) {
    const int i = lane;
    if (i < N) sx[i] = zi;
    __syncwarp();
    double xi = 0.0;
    if (i < N) {
        const int t = i >> 1, J = 2 * t;
        const double z0 = sx[J], z1 = sx[J + 1];
        xi = (i & 1) ? fma(sD[3 * t + 1], z0, sD[3 * t + 2] * z1) : fma(sD[3 * t], z0, sD[3 * t + 1] * z1);
    }
    __syncwarp();
    return xi;
}

// Step t of the 2 x 2 pivot solvers (SOLVE 3, 4, 6): this pair's two columns (c0, c1,
// published by the step before), the next pair's buffers (n0, n1), the pivot block
// (p00, p01 = A(J + 1, J), p11) and its determinant; good turns false on a non-positive
// p00 or det.
struct PivotPair {
    const double* c0;
    const double* c1;
    double* n0;
    double* n1;
    double p00, p01, p11, det;
};
__device__ __forceinline__ PivotPair pivot_pair(double* scol, int t, bool& good) {
    const int J = 2 * t;
    const double* c0 = scol + 64 * (t & 1);
    const double* c1 = c0 + 32;
    double* n0 = scol + 64 * ((t + 1) & 1);
    const double p00 = c0[J], p01 = c0[J + 1], p11 = c1[J + 1];
    const double det = fma(p00, p11, -(p01 * p01));
    good = good && p00 > 0.0 && det > 0.0;
    return {c0, c1, n0, n0 + 32, p00, p01, p11, det};
}

// SOLVE 3: as SOLVE 2 with 2 x 2 pivot blocks (A = L D L^T, D block diagonal): 15 steps
// of a 2 x 2 inverse instead of 30 reciprocals, and 15 steps in the back substitution.
// scol: 2 buffers of the two pivot columns (their entry N: the pivot rows' z), 32 of x,
// 48 of the blocks' inverses: 208 doubles.
// GJ (SOLVE 4, forty-sixth session): Gauss-Jordan with the same 2 x 2 pivot blocks. Every
// row other than the pivot pair is eliminated (rows above it too, with the same
// instructions the warp issues anyway), so that no L is stored and there is no back
// substitution: x of pair t is the block's inverse times the pair's final right-hand side.
// A stays in sg, so the residual reads it there (Lean) and needs no copy in registers.
template <bool Lean, bool GJ = false>
__device__ __forceinline__ void solve3(double* sg, double* sL, double* sb, double* scol, unsigned total,
                                       int* flags, int lane) {
    static_assert(!GJ || Lean, "Gauss-Jordan keeps A in sg: Lean");
    const int i = lane;
    const bool row = i < N;
    double a[N + 1], ra[Lean ? 1 : N];
    const double bi0 = pair_start<Lean>(sg, a, ra, scol, lane);
    if (!Lean) sL = sg;
    double* const sx = scol + 128;
    double* const sD = scol + 160;
    bool good = true;
#pragma unroll
    for (int t = 0; t < N / 2; ++t) {
        const int J = 2 * t;
        const auto [c0, c1, n0, n1, p00, p01, p11, det] = pivot_pair(scol, t, good);
        const double rdet = rcp_pivot(det);
        const double i00 = p11 * rdet, i01 = -p01 * rdet, i11 = p00 * rdet;
        if (i == 0) {
            sD[3 * t] = i00;
            sD[3 * t + 1] = i01;
            sD[3 * t + 2] = i11;
        }
        const bool below = row && (GJ ? (i < J || i > J + 1) : i > J + 1);
        const double u0 = a[J], u1 = a[J + 1];
        const double l0 = below ? fma(u0, i00, u1 * i01) : 0.0;
        const double l1 = below ? fma(u0, i01, u1 * i11) : 0.0;
        if (below && !GJ) {
            sL[i * (i + 1) / 2 + J] = l0;
            sL[i * (i + 1) / 2 + J + 1] = l1;
        }
        if (J + 2 < N) {
            a[J + 2] = fma(-l1, c1[J + 2], fma(-l0, c0[J + 2], a[J + 2]));
            a[J + 3] = fma(-l1, c1[J + 3], fma(-l0, c0[J + 3], a[J + 3]));
            a[N] = fma(-l1, c1[N], fma(-l0, c0[N], a[N]));
            if (row && i >= J + 2) {
                n0[i] = a[J + 2];
                n1[i] = a[J + 3];
            }
            if (i == J + 2) n0[N] = a[N];
            if (i == J + 3) n1[N] = a[N];
        } else if (GJ) {
            a[N] = fma(-l1, c1[N], fma(-l0, c0[N], a[N]));  // the last pair: rows above it
        }
#pragma unroll
        for (int k = J + 4; k < N; ++k) a[k] = fma(-l1, c1[k], fma(-l0, c0[k], a[k]));
        __syncwarp();
    }
    // z = a[N]; w = D^-1 z by blocks; then L^T x = w, a block of two rows at a time.
    double xi = pair_block_solve(a[N], sx, sD, lane);
    if (!GJ)
#pragma unroll
        for (int t = N / 2 - 1; t >= 0; --t) {
            const int J = 2 * t;
            if (i == J || i == J + 1) sx[i] = xi;
            __syncwarp();
            if (i < J)
                xi = fma(-sL[(J + 1) * (J + 2) / 2 + i], sx[J + 1], fma(-sL[J * (J + 1) / 2 + i], sx[J], xi));
        }
    if (GJ && row) sx[i] = xi;
    __syncwarp();
    solve_accept<Lean>(sg, ra, sx, bi0, xi, good, total, flags, sb, lane);
}

// SOLVE 6 (forty-seventh session): SOLVE 4's Gauss-Jordan with a shorter chain per step.
// The multipliers' numerators m = adj(P) u (l = m / det) are formed while the reciprocal
// of det is, and the look-ahead columns (the next pivot pair's and z) subtract
// rdet (m0 c0 + m1 c1) with one FMA after rdet instead of forming the inverse's entries,
// then l, then two FMAs. The trailing columns, off the chain, use l = m rdet.
// KAHAN6 forms m by Kahan's difference of products (the subtracted product's rounding error
// added back).
__device__ __forceinline__ void solve6(double* sg, double* sb, double* scol, unsigned total, int* flags,
                                       int lane) {
    const int i = lane;
    const bool row = i < N;
    double a[N + 1], ra[1];
    const double bi0 = pair_start<true>(sg, a, ra, scol, lane);
    double* const sx = scol + 128;
    double* const sD = scol + 160;
    bool good = true;
#pragma unroll
    for (int t = 0; t < N / 2; ++t) {
        const int J = 2 * t;
        const auto [c0, c1, n0, n1, p00, p01, p11, det] = pivot_pair(scol, t, good);
        const bool below = row && (i < J || i > J + 1);
        const double u0 = a[J], u1 = a[J + 1];
#ifdef KAHAN6
        // Kahan's u0 p11 - u1 p01 (the rounding error of the subtracted product added back).
        const double t0 = u1 * p01, t1 = u0 * p01;
        const double m0 = below ? fma(u0, p11, -t0) - fma(u1, p01, -t0) : 0.0;
        const double m1 = below ? fma(u1, p00, -t1) - fma(u0, p01, -t1) : 0.0;
#else
        const double m0 = below ? fma(u0, p11, -(u1 * p01)) : 0.0;
        const double m1 = below ? fma(u1, p00, -(u0 * p01)) : 0.0;
#endif
        const double rdet = rcp_pivot(det);
        const double l0 = m0 * rdet, l1 = m1 * rdet;
        if (J + 2 < N) {
            const double t2 = fma(m1, c1[J + 2], m0 * c0[J + 2]);
            const double t3 = fma(m1, c1[J + 3], m0 * c0[J + 3]);
            const double tn = fma(m1, c1[N], m0 * c0[N]);
            a[J + 2] = fma(-rdet, t2, a[J + 2]);
            a[J + 3] = fma(-rdet, t3, a[J + 3]);
            a[N] = fma(-rdet, tn, a[N]);
            if (row && i >= J + 2) {
                n0[i] = a[J + 2];
                n1[i] = a[J + 3];
            }
            if (i == J + 2) n0[N] = a[N];
            if (i == J + 3) n1[N] = a[N];
        } else {
            a[N] = fma(-l1, c1[N], fma(-l0, c0[N], a[N]));  // the last pair: rows above it
        }
#pragma unroll
        for (int k = J + 4; k < N; ++k) a[k] = fma(-l1, c1[k], fma(-l0, c0[k], a[k]));
        if (i == 0) {
            sD[3 * t] = p11 * rdet;
            sD[3 * t + 1] = -p01 * rdet;
            sD[3 * t + 2] = p00 * rdet;
        }
        __syncwarp();
    }
    const double xi = pair_block_solve(a[N], sx, sD, lane);
    if (row) sx[i] = xi;
    __syncwarp();
    solve_accept<true>(sg, ra, sx, bi0, xi, good, total, flags, sb, lane);
}

// One pass over this lane's entries of the 6 blocks of 16 x 8 (the packed lower triangle
// of the 31 x 31 augmented matrix in sg, b in row N): op 0 stores acc, 1 adds sg to acc,
// 2 stores acc * inv, 3 stores (acc + sg) * inv (1 and 2 in one pass, the same bits).
__device__ __forceinline__ void gram_pass(double (&acc)[6][4], double* sg, int lane, int op, double inv) {
    for_lane_entries(lane, [&](int k, int e, int r, int cc) {
        if (r <= N && cc <= r && cc < N) {
            double* t = sg + r * (r + 1) / 2 + cc;
            if (op == 0)
                *t = acc[k][e];
            else if (op == 1)
                acc[k][e] += *t;
            else if (op == 2)
                *t = acc[k][e] * inv;
            else
                *t = (acc[k][e] + *t) * inv;
        }
    });
}

// The Gram of NW warps into sg: with NW 2, warp 1's partial sums (acc, total) join warp 0's
// through sg and stot[0]; with NW 4 (the kept-state kernel only), warps 1-3 store theirs in
// sg, sgx and sgx + NPK (counts in stot[0..2]) and warp 0 adds the three after one
// barrier() (among the NW warps). Every one of the NW warps (w < NW) calls this; warp 0
// then stores the sum scaled by 1 / total and keeps the combined count in total (JOIN1,
// forty-sixth session: with NW 2 in the same pass as the addition).
template <int NW, typename Barrier>
__device__ __forceinline__ void gram_join(double (&acc)[6][4], unsigned& total, double* sg, double* sgx,
                                          unsigned* stot, int w, int lane, Barrier barrier) {
    if constexpr (NW == 2) {
        if (w == 1) {
            gram_pass(acc, sg, lane, 0, 0.0);
            if (lane == 0) *stot = total;
        }
        barrier();
        if (w == 0) {
            total += *stot;
#ifdef JOIN1
            gram_pass(acc, sg, lane, 3, total > 0 ? 1.0 / (double)total : 0.0);
            __syncwarp();
            return;
#else
            gram_pass(acc, sg, lane, 1, 0.0);
#endif
        }
        __syncwarp();
    } else if constexpr (NW == 4) {
        if (w >= 1) {
            gram_pass(acc, w == 1 ? sg : sgx + (w - 2) * NPK, lane, 0, 0.0);
            if (lane == 0) stot[w - 1] = total;
        }
        barrier();
        if (w == 0) {
#pragma unroll
            for (int k = 1; k < 4; ++k) {
                total += stot[k - 1];
                gram_pass(acc, k == 1 ? sg : sgx + (k - 2) * NPK, lane, 1, 0.0);
            }
        }
        __syncwarp();
    }
    if (w == 0) gram_pass(acc, sg, lane, 2, total > 0 ? 1.0 / (double)total : 0.0);
    __syncwarp();
}

// The kernels' block of WPB warps: gram_join over the whole block.
__device__ __forceinline__ void gram_to_shared(double (&acc)[6][4], unsigned& total, double* sg,
                                               double* sgx, unsigned* stot, int w, int lane) {
    gram_join<WPB>(acc, total, sg, sgx, stot, w, lane, [] { __syncthreads(); });
}

// The exercise decision of one inner path (row: its D high words; pv: its payoff): where
// the payoff is positive and at least the continuation psi . beta (separate products and
// sums from 0, as engine.cu forms it), the cash flow becomes the payoff, paid at s.
__device__ __forceinline__ void exercise_path(const unsigned* row, double pv, const double* bt,
                                              double& cash, int& cdate, int s) {
    if (pv > 0.0) {
        double cont = 0.0 + 1.0 * bt[0];
#pragma unroll
        for (int k = 0; k < D; ++k) cont = cont + (state_high(row, k) * 1.0) * bt[k + 1];
        if (pv >= cont) {
            cash = pv;
            cdate = s;
        }
    }
}

// A walk's value: the warp's sum of v (its lanes' discounted cash flows) / M, added to *dst.
__device__ __forceinline__ void add_walk_value(double v, double* dst, int lane) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) atomicAdd(dst, v / M);
}

// The solver that SOLVE selects (2 or 3) for the kernels' MODE 0.
template <bool Lean>
__device__ __forceinline__ void solve_sel(double* sg, double* sL, double* sb, double* scol, unsigned total,
                                          int* flags, int lane) {
#if SOLVE == 6
    solve6(sg, sb, scol, total, flags, lane);
#elif SOLVE == 4
    solve3<true, true>(sg, sL, sb, scol, total, flags, lane);
#elif SOLVE == 3
    solve3<Lean>(sg, sL, sb, scol, total, flags, lane);
#else
    solve2<Lean>(sg, sL, sb, scol, total, flags, lane);
#endif
}

// PROF (timing aid): each warp of the kept-state kernel sums clock() spans per phase into
// g_prof[w][phase] (lane 0): 0 the build's waits for its copies, 1 the build's work on its
// chunks, 2 the Gram's join, 3 the solve and the barrier after it, 4 the exercise with the
// next date's copies, 5 the last barrier. g_prof[w][6] counts the warp's dates. PROF2 (forty-seventh
// session) moves the copies' issue out of phase 4 into g_prof[w][7].
#ifdef PROF
__device__ unsigned long long g_prof[4][8];
#define PROF_NOW() (unsigned)clock()
#define PROF_ADD(i, t0)                  \
    do {                                 \
        const unsigned t1_ = clock();    \
        prof[i] += t1_ - (t0);           \
        t0 = t1_;                        \
    } while (0)
#else
#define PROF_NOW() 0u
#define PROF_ADD(i, t0) (void)(t0)
#endif

// SOLVE_NOINLINE (forty-sixth session): the kept-state kernel calls the solver as a separate
// function, so that ptxas allocates its registers apart from the build's.
__device__ __noinline__ void solve_call(double* sg, double* sb, double* scol, unsigned total, int* flags,
                                        int lane) {
    solve_sel<false>(sg, sg, sb, scol, total, flags, lane);
}

#ifndef MINB
#define MINB 5
#endif
#define CW (WPB == 4 ? (NCH + 3) / 4 : NCH)
#define CI(c) (WPB == 4 ? (c) / 4 : (c))
extern "C" __global__ void __launch_bounds__(32 * WPB, MINB)
fused_walk(const unsigned* __restrict__ st, int S, long long outer, double* __restrict__ value,
           double* __restrict__ beta_out, int* __restrict__ flags) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned* const sh = (unsigned*)smem;           // M * D high words
    double* const sp = (double*)(sh + M * D);       // M payoffs
    double* const sy = sp + M;                      // M discounted cash flows
    double* const sg = sy + M;                      // packed [Psi y]^T [Psi y]
    double* const sb = sg + NPK;                    // beta
    double* const scol = sb + 32;                   // the solver's SCOL doubles
    unsigned* const stot = (unsigned*)(scol + SCOL);  // warps 1.. counts of entering paths (WPB 2, 4)
    double* const sgx = (double*)(stot + 4);          // warps 2, 3's partial Grams (WPB 4)
#ifdef SWAPW
    // SWAPW (forty-seventh session, WPB 2): the solver is the warp whose SM sub-partition
    // (warp slot mod 4) balances the solvers: slots (4k + 0, 1) solve on the first, (4k +
    // 4, 5) on the second... (slot s solves where bit 2 of s equals bit 0), if the block's
    // two warps sit on such a pair; otherwise warp 0.
    const int lane = threadIdx.x & 31;
    int w = threadIdx.x >> 5;
    {
        unsigned wid;
        asm volatile("mov.u32 %0, %%warpid;" : "=r"(wid));
        const bool f = ((wid >> 2) & 1) == (wid & 1);
        const int f1 = __syncthreads_count(w == 1 && f), f0 = __syncthreads_count(w == 0 && f);
        w ^= (f1 > 0 && f0 == 0) ? 1 : 0;
    }
#else
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#endif
    const long long l = blockIdx.x;
    if (l >= outer) return;
    stagger_start();
    const unsigned* const base = st + l * S * (long long)BLOCK_WORDS;

    // The cash flows of chunk c in cash[CI(c)] (with WPB 4 only this warp's chunks, c = w mod 4).
    double cash[CW];
    int cdate[CW];
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
        if (WPB == 4 && c % 4 != w) continue;
        const int p = 32 * c + lane;
        cash[CI(c)] = p < M ? initial_cash(l, p) : 0.0;
        cdate[CI(c)] = S;
        if (p < M) sy[p] = cash[CI(c)] * C_DF[1];
    }
#ifdef BULK
#if MODE > 1 || defined(IMMA)
#error "BULK takes MODE 0 or 1 and the FP64 build"
#endif
    static_assert(WPB <= 4, "BULK takes WPB 1, 2 or 4");
    unsigned long long* const mb = (unsigned long long*)(smem + SMEM_BYTES - BULK_BYTES);
    if (lane == 0)
        for (int c = w; c < NCH; c += WPB) mbar_init(mb + c);
    __syncwarp();
    if (lane == 0)
        for (int c = w; c < NCH; c += WPB) issue_chunk_bulk(sh, sp, base + (long long)(S - 1) * BLOCK_WORDS, c, mb);
#else
    for (int c = w; c < NCH; c += WPB) issue_chunk(sh, sp, base + (long long)(S - 1) * BLOCK_WORDS, c, lane);
#endif
    const int mine = (NCH - w + WPB - 1) / WPB;  // chunks of this warp
#ifdef PROF
    unsigned prof[7] = {0, 0, 0, 0, 0, 0, 0};  // one walk's spans fit 32 bits (6: PROF2's copy issue)
#endif

    for (int s = S - 1; s >= 0; --s) {
        unsigned total = 0;
        unsigned pt = PROF_NOW();
#if MODE <= 1 && defined(IMMA)
        {
            static_assert(WPB <= 2, "IMMA takes WPB 1 or 2");
            int iacc[5][6][4];
            double bacc[4] = {0.0, 0.0, 0.0, 0.0};
            unsigned chk = 0;
#pragma unroll
            for (int w5 = 0; w5 < 5; ++w5)
#pragma unroll
                for (int k = 0; k < 6; ++k) iacc[w5][k][0] = iacc[w5][k][1] = iacc[w5][k][2] = iacc[w5][k][3] = 0;
#pragma unroll 1
            for (int c = w; c < NCH; c += WPB) {
                wait_pending(mine - 1 - (c - w) / WPB);
                __syncwarp();
                const int p0 = 32 * c;
                build_chunk_imma(iacc, bacc, total, chk, sh + p0 * D, sp + p0, sy + p0, min(32, M - p0), lane);
            }
            if (__any_sync(0xffffffffu, chk > 3u) && lane == 0) atomicAdd(flags, 1);
#pragma unroll
            for (int o = 0; o < 4; ++o) {
                bacc[o] += __shfl_xor_sync(0xffffffffu, bacc[o], 1);
                bacc[o] += __shfl_xor_sync(0xffffffffu, bacc[o], 2);
            }
            double* const sbx = sgx;  // WPB <= 2: the slot after stot
            if (w == 1 && (lane & 3) == 0)
#pragma unroll
                for (int o = 0; o < 4; ++o) sbx[8 * o + (lane >> 2)] = bacc[o];
            double acc[6][4];
            imma_to_f64(iacc, acc, lane);
            gram_to_shared(acc, total, sg, sgx, stot, w, lane);  // its barrier orders sbx too
            if (w == 0 && (lane & 3) == 0) {
                const double inv = total > 0 ? 1.0 / (double)total : 0.0;
#pragma unroll
                for (int o = 0; o < 4; ++o) {
                    const int fe = 8 * o + (lane >> 2);
                    if (fe < N) sg[N * (N + 1) / 2 + fe] = (bacc[o] + (WPB > 1 ? sbx[fe] : 0.0)) * inv;
                }
            }
            __syncwarp();
        }
#elif MODE <= 1
        double acc[6][4];
#pragma unroll
        for (int k = 0; k < 6; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
#pragma unroll 1
        for (int c = w; c < NCH; c += WPB) {
#ifdef BULK
            mbar_wait(mb + c, (S - 1 - s) & 1);
#else
            wait_pending(mine - 1 - (c - w) / WPB);
#endif
            __syncwarp();
            PROF_ADD(0, pt);
            const int p0 = 32 * c;
            build_chunk(acc, total, sh + p0 * D, sp + p0, sy + p0, min(32, M - p0), lane);
            PROF_ADD(1, pt);
        }
        gram_to_shared(acc, total, sg, sgx, stot, w, lane);
        PROF_ADD(2, pt);
#else
        wait_pending(0);
        __syncthreads();
#pragma unroll
        for (int c = 0; c < NCH; ++c) {
            const int p = 32 * c + lane;
            total += __popc(__ballot_sync(0xffffffffu, p < M && sp[p] > 0.0));
        }
#endif

#if MODE == 0 && SOLVE == 1
        // One-warp L D L^T: lane i holds row i of A (full), then of L.
        if (w == 0) {
            const int i = lane;
            double a[N], ra[N];
#pragma unroll
            for (int k = 0; k < N; ++k) {
                const int r = max(i, k), cc = min(i, k);
                a[k] = i < N ? sg[r * (r + 1) / 2 + cc] : (k == 0 ? 1.0 : 0.0);
                ra[k] = a[k];
            }
            const double bi0 = i < N ? sg[N * (N + 1) / 2 + i] : 0.0;
            double di = 1.0;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const double dj = __shfl_sync(0xffffffffu, a[j], j);
                if (i == j) di = dj;
                const double li = a[j] * (1.0 / dj);
#pragma unroll
                for (int k = j + 1; k < N; ++k) {
                    const double ck = __shfl_sync(0xffffffffu, a[j], k);
                    a[k] = fma(-li, ck, a[k]);
                }
                if (i > j) a[j] = li;
            }
            double bi = bi0;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const double zj = __shfl_sync(0xffffffffu, bi, j);
                if (i > j) bi = fma(-a[j], zj, bi);
            }
            __syncwarp();
            if (i < N)
#pragma unroll
                for (int k = 0; k < N; ++k)
                    if (k < i) sg[i * (i + 1) / 2 + k] = a[k];
            __syncwarp();
            double xi = bi / di;
#pragma unroll
            for (int j = N - 1; j >= 0; --j) {
                const double xj = __shfl_sync(0xffffffffu, xi, j);
                if (i < j) xi = fma(-sg[j * (j + 1) / 2 + i], xj, xi);
            }
            double r = bi0;
#pragma unroll
            for (int k = 0; k < N; ++k) r = fma(-ra[k], __shfl_sync(0xffffffffu, xi, k), r);
            double rr = i < N ? r * r : 0.0, bb = i < N ? bi0 * bi0 : 0.0;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                rr += __shfl_xor_sync(0xffffffffu, rr, o);
                bb += __shfl_xor_sync(0xffffffffu, bb, o);
            }
            const bool ok = total >= N && rr <= 1e-20 * bb && rr == rr;
            if (!ok && lane == 0) atomicAdd(flags, 1);
            if (i < N) sb[i] = ok ? xi : (i == 0 ? sg[N * (N + 1) / 2] : 0.0);
        }
#elif MODE == 0
#ifdef SOLVE_NOINLINE
        if (w == 0) solve_call(sg, sb, scol, total, flags, lane);
#else
        if (w == 0) solve_sel<false>(sg, sg, sb, scol, total, flags, lane);
#endif
#else
        if (w == 0 && lane < N) sb[lane] = lane == 0 ? 0.05 : 0.001;
#endif
        __syncthreads();
        PROF_ADD(3, pt);
        if (l == 0 && s == 0 && lane < N) beta_out[lane] = sb[lane];

#if MODE <= 2
        // Exercise from the shared states; y of the next date; the next date's copies.
        double bt[N];
#pragma unroll
        for (int k = 0; k < N; ++k) bt[k] = sb[k];
#endif
        const unsigned* nxt = base + (long long)(s - 1) * BLOCK_WORDS;
#ifdef EXPAIR
        // EXPAIR (forty-seventh session; WPB 2, BULK, MODE 0 or 1): the warp's chunks in pairs,
        // the two paths' continuations formed together (each in the engine's order, for every
        // path, the decision after), then both chunks' copies.
        static_assert(WPB == 2 && NCH == 10 && MODE <= 1, "EXPAIR takes WPB 2, 10 chunks, MODE 0 or 1");
// EX3 (with EXPAIR): three chunks at a time, (0 2 4) (6 8) / (1 3 5) (7 9); EX23: (0 2)
// (4 6 8) / (1 3) (5 7 9).
#define EX_ONE(CX, P, CONT)                                                          \
    if (P < M) {                                                                     \
        const double pv = sp[P];                                                     \
        if (pv > 0.0 && pv >= CONT) {                                                \
            cash[CI(CX)] = pv;                                                           \
            cdate[CI(CX)] = s;                                                           \
        }                                                                            \
        if (s > 0) sy[P] = cash[CI(CX)] * C_DF[cdate[CI(CX)] - (s - 1)];                     \
    }
#define EXN(CA, CB, CC)                                                              \
    {                                                                                \
        constexpr int CBI = (CB) < 0 ? (CA) : (CB), CCI = (CC) < 0 ? (CA) : (CC);     \
        const int pa = 32 * (CA) + lane, pb = 32 * CBI + lane, pc = 32 * CCI + lane; \
        const unsigned* ra = sh + pa * D;                                            \
        const unsigned* rb = sh + pb * D;                                            \
        const unsigned* rc = sh + pc * D;                                            \
        double conta = 0.0 + 1.0 * bt[0], contb = conta, contc = conta;              \
        _Pragma("unroll") for (int k = 0; k < D; ++k) {                              \
            conta = conta + (state_high(ra, k) * 1.0) * bt[k + 1];                   \
            if ((CB) >= 0) contb = contb + (state_high(rb, k) * 1.0) * bt[k + 1];    \
            if ((CC) >= 0) contc = contc + (state_high(rc, k) * 1.0) * bt[k + 1];    \
        }                                                                            \
        EX_ONE(CA, pa, conta)                                                        \
        if ((CB) >= 0) EX_ONE(CBI, pb, contb)                                        \
        if ((CC) >= 0) EX_ONE(CCI, pc, contc)                                        \
        __syncwarp();                                                                \
        if (s > 0 && lane == 0) {                                                    \
            issue_chunk_bulk(sh, sp, nxt, (CA), mb);                                 \
            if ((CB) >= 0) issue_chunk_bulk(sh, sp, nxt, CBI, mb);                   \
            if ((CC) >= 0) issue_chunk_bulk(sh, sp, nxt, CCI, mb);                   \
        }                                                                            \
    }
#if defined(EX3)
        if (w == 0) {
            EXN(0, 2, 4) EXN(6, 8, -1)
        } else {
            EXN(1, 3, 5) EXN(7, 9, -1)
        }
#elif defined(EX23)
        if (w == 0) {
            EXN(0, 2, -1) EXN(4, 6, 8)
        } else {
            EXN(1, 3, -1) EXN(5, 7, 9)
        }
#else
        if (w == 0) {
            EXN(0, 2, -1) EXN(4, 6, -1) EXN(8, -1, -1)
        } else {
            EXN(1, 3, -1) EXN(5, 7, -1) EXN(9, -1, -1)
        }
#endif
#undef EXN
#undef EX_ONE
#else
#pragma unroll
        for (int c = 0; c < NCH; ++c) {
            if (c % WPB != w) continue;
            const int p = 32 * c + lane;
#if MODE <= 2
            if (p < M) {
                exercise_path(sh + p * D, sp[p], bt, cash[CI(c)], cdate[CI(c)], s);
                if (s > 0) sy[p] = cash[CI(c)] * C_DF[cdate[CI(c)] - (s - 1)];
            }
#else
            if (p < M) cash[CI(c)] += sp[p] * 1e-3 + (double)sh[p * D + (s % D)] * 1e-12;
#endif
            __syncwarp();
#ifdef PROF2
            PROF_ADD(4, pt);
#endif
#ifdef BULK
            if (s > 0 && lane == 0) issue_chunk_bulk(sh, sp, nxt, c, mb);
#else
            if (s > 0) issue_chunk(sh, sp, nxt, c, lane);
#endif
#ifdef PROF2
            __syncwarp();
            PROF_ADD(6, pt);
#endif
        }
#endif
        PROF_ADD(4, pt);
#if WPB > 1
        __syncthreads();  // warp 0's next solve buffer (sg) is free of the other warps' partials
#endif
        PROF_ADD(5, pt);
    }
#ifdef PROF
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < 6; ++i) atomicAdd(&g_prof[w][i], (unsigned long long)prof[i]);
        atomicAdd(&g_prof[w][7], (unsigned long long)prof[6]);
        atomicAdd(&g_prof[w][6], (unsigned long long)S);
    }
#endif
    double v = 0.0;
#pragma unroll
    for (int c = 0; c < NCH; ++c)
        if (c % WPB == w) v += cash[CI(c)] * C_DF[cdate[CI(c)]];
    add_walk_value(v, value + l, lane);
}

#ifdef RING
#if WPB == 4
#error "the ring kernel takes WPB 1 or 2"
#endif
// RING (stages, >= 2): the same step without keeping the date's states. Each warp streams
// its chunks through a ring of RING stages, RING - 1 ahead: the build's chunks, then the
// exercise's (the same chunks again, found in L2 if the GPU has read less than its L2 in
// between), then the next date's build... The ring keeps loading through the solve.
// Shared memory: ring[WPB][RING] stages of 32 D words and 32 payoffs | y[M] | the packed
// Gram | beta | SCOL doubles for the solver | (LEAN) L | warp 1's count.
#define CH_WORDS (32 * D)
#define STAGE_BYTES (CH_WORDS * 4 + 32 * 8)
// LEAN 1: the solver's L apart from A (NPK more doubles), beta read from shared memory in
// the exercise: fewer registers, so that more warps fit (MINB).
#ifndef LEAN
#define LEAN 0
#endif
#define SMEM_RING (WPB * RING * STAGE_BYTES + M * 8 + (1 + LEAN) * NPK * 8 + 32 * 8 + SCOL * 8 + 16)
#define MAXC ((NCH + WPB - 1) / WPB)
extern "C" __global__ void __launch_bounds__(32 * WPB, MINB)
fused_walk_ring(const unsigned* __restrict__ st, int S, long long outer, double* __restrict__ value,
                double* __restrict__ beta_out, int* __restrict__ flags) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    unsigned char* const ring = smem + w * RING * STAGE_BYTES;
    double* const sy = (double*)(smem + WPB * RING * STAGE_BYTES);
    double* const sg = sy + M;
    double* const sb = sg + NPK;
    double* const scol = sb + 32;
    double* const sL = scol + SCOL;  // LEAN only
    unsigned* const stot = (unsigned*)(sL + LEAN * NPK);  // WPB 2
    const long long l = blockIdx.x;
    if (l >= outer) return;
    stagger_start();
    const unsigned* const base = st + l * S * (long long)BLOCK_WORDS;
    const int mine = (NCH - w + WPB - 1) / WPB;
    const int per_step = 2 * mine, total_t = S * per_step;

    double cash[MAXC];
    int cdate[MAXC];
#pragma unroll
    for (int i = 0; i < MAXC; ++i) {
        const int p = 32 * (w + WPB * i) + lane;
        cash[i] = p < M ? initial_cash(l, p) : 0.0;
        cdate[i] = S;
        if (p < M) sy[p] = cash[i] * C_DF[1];
    }
    auto issue = [&](int t) {
        if (t < total_t) {
            const int s = S - 1 - t / per_step, c = w + WPB * ((t % per_step) % mine);
            const int p0 = 32 * c, np = min(32, M - p0), nw = np * D;
            const unsigned* src = base + (long long)s * BLOCK_WORDS;
            unsigned* dh = (unsigned*)(ring + (t % RING) * STAGE_BYTES);
            const unsigned* gh = src + p0 * D;
            for (int r = 4 * lane; r < nw; r += 128) async_copy16(dh + r, gh + r);
            const double* gp = (const double*)(src + M * D) + p0;
            if (2 * lane < np) async_copy16((double*)(dh + CH_WORDS) + 2 * lane, gp + 2 * lane);
        }
        async_copy_commit();
    };
    for (int t = 0; t < RING - 1; ++t) issue(t);
    int t = 0;
    auto next = [&]() -> const unsigned* {
        __syncwarp();  // every lane is done with the stage chunk t + RING - 1 reuses
        issue(t + RING - 1);
        async_copy_wait<RING - 1>();
        __syncwarp();
        return (const unsigned*)(ring + (t++ % RING) * STAGE_BYTES);
    };

    for (int s = S - 1; s >= 0; --s) {
        unsigned total = 0;
        double acc[6][4];
#pragma unroll
        for (int k = 0; k < 6; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
#pragma unroll 1
        for (int i = 0; i < mine; ++i) {
            const int p0 = 32 * (w + WPB * i);
            const unsigned* hb = next();
            build_chunk(acc, total, hb, (const double*)(hb + CH_WORDS), sy + p0, min(32, M - p0), lane);
        }
        gram_to_shared(acc, total, sg, nullptr, stot, w, lane);
        if (w == 0) solve_sel<LEAN>(sg, sL, sb, scol, total, flags, lane);
        __syncthreads();
        if (l == 0 && s == 0 && lane < N) beta_out[lane] = sb[lane];
#if LEAN
        const double* bt = sb;
#else
        double bt[N];
#pragma unroll
        for (int k = 0; k < N; ++k) bt[k] = sb[k];
#endif
#pragma unroll
        for (int i = 0; i < MAXC; ++i) {
            if (i >= mine) break;
            const int p = 32 * (w + WPB * i) + lane;
            const unsigned* hb = next();
            if (p < M) {
                exercise_path(hb + lane * D, ((const double*)(hb + CH_WORDS))[lane], bt, cash[i], cdate[i], s);
                if (s > 0) sy[p] = cash[i] * C_DF[cdate[i] - (s - 1)];
            }
        }
#if WPB == 2
        __syncthreads();
#endif
    }
    double v = 0.0;
#pragma unroll
    for (int i = 0; i < MAXC; ++i)
        if (i < mine) v += cash[i] * C_DF[cdate[i]];
    add_walk_value(v, value + l, lane);
}
#define KERNEL fused_walk_ring
#define KERNEL_SMEM SMEM_RING
#elif defined(AHEAD)
// AHEAD: the Gram ahead of the solve. A_t = Psi_t^T Psi_t (over the paths in the money)
// does not depend on the cash flows; only b_t = Psi_t^T y does. So NBW builder warps build
// the next date's Gram on the tensor cores, from the next of two state buffers, while the
// solver warp solves the current date; the per-date chain is b (FP64 dot products by the
// NEW non-builder warps) -> solve (warp 0) -> exercise (non-builders). Persistent blocks
// (MINB per SM) walk their walks (outer paths l = blockIdx.x + k gridDim.x, S dates each)
// back to back as one sequence of items q: the builders work one item ahead.
// Named barriers (ids 1-5): EXD (item q's exercise done, its buffer free: non-builders
// arrive, builders wait), SGF (the solve of q is done with sg: solver arrives, builders
// wait), GR (the Gram of q and its states are in shared memory: builders arrive, the
// solver waits), NB (non-builders), BB (builders).
// Shared memory: X[2] (M D high words, M payoffs) | y[M] | packed Gram | beta | solver
// scratch | b partials [NEW][32] | counts.
#ifndef NBW
#define NBW 2
#endif
#ifndef NEW
#define NEW 3
#endif
#define XBYTES (M * D * 4 + M * 8)
#define SMEM_AHEAD (2 * XBYTES + M * 8 + NPK * 8 + 32 * 8 + SCOL * 8 + NEW * 32 * 8 + 16)
#define MAXE ((NCH + NEW - 1) / NEW)
#define T_ALL (32 * (NEW + NBW))
enum { B_EXD = 1, B_SGF = 2, B_GR = 3, B_NB = 4, B_BB = 5 };

extern "C" __global__ void __launch_bounds__(T_ALL, MINB)
fused_ahead(const unsigned* __restrict__ st, int S, long long outer, double* __restrict__ value,
            double* __restrict__ beta_out, int* __restrict__ flags) {
    extern __shared__ __align__(16) unsigned char smem[];
    double* const sy = (double*)(smem + 2 * XBYTES);
    double* const sg = sy + M;
    double* const sb = sg + NPK;
    double* const scol = sb + 32;
    double* const sbp = scol + SCOL;
    unsigned* const scnt = (unsigned*)(sbp + NEW * 32);  // [0] the count of the Gram in sg, [1] gram_join's
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const long long walks = outer > blockIdx.x ? (outer - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const long long Q = walks * S;
    if (Q == 0) return;
    auto xh = [&](long long q) { return (unsigned*)(smem + (q & 1) * XBYTES); };
    auto xp = [&](long long q) { return (double*)(smem + (q & 1) * XBYTES + M * D * 4); };
    auto src = [&](long long q) {
        const long long l = blockIdx.x + (q / S) * gridDim.x;
        const int s = S - 1 - (int)(q % S);
        return st + (l * S + s) * (long long)BLOCK_WORDS;
    };

    if (w >= NEW) {
        // Builders: warp wb owns the chunks c = wb mod NBW of every item.
        const int wb = w - NEW;
        const int mine = (NCH - wb + NBW - 1) / NBW;
        double acc[6][4];
        unsigned total = 0;
        auto issue = [&](long long q) {
            for (int c = wb; c < NCH; c += NBW) issue_chunk(xh(q), xp(q), src(q), c, lane);
        };
        auto build = [&](long long q) {
#pragma unroll
            for (int k = 0; k < 6; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
            total = 0;
#ifdef AHEAD_NOGRAM
            // Timing ablation: the copies complete, nothing is built.
            async_copy_wait<0>();
            __syncwarp();
            return;
#endif
#pragma unroll 1
            for (int c = wb; c < NCH; c += NBW) {
                wait_pending(mine - 1 - (c - wb) / NBW);
                __syncwarp();
                const int p0 = 32 * c;
                build_chunk<false>(acc, total, xh(q) + p0 * D, xp(q) + p0, nullptr, min(32, M - p0), lane);
            }
        };
        // Store the built Gram (scaled) into sg and its count into scnt[0].
        auto store = [&]() {
            gram_join<NBW>(acc, total, sg, nullptr, scnt + 1, wb, lane, [] { bar_sync(B_BB, 32 * NBW); });
            if (wb == 0 && lane == 0) scnt[0] = total;
            __syncwarp();
        };
        issue(0);
        build(0);
        store();
        bar_arrive(B_GR, 32 * (NBW + 1));
        if (Q > 1) {
            issue(1);
            build(1);
        }
        for (long long q = 0; q < Q; ++q) {
            bar_sync(B_SGF, 32 * (NBW + 1));
            if (q + 1 < Q) store();
            bar_sync(B_EXD, T_ALL);
            if (q + 1 < Q) bar_arrive(B_GR, 32 * (NBW + 1));
            if (q + 2 < Q) {
                issue(q + 2);
                build(q + 2);
            }
        }
        return;
    }

    // Non-builders: warp e < NEW owns the chunks c = e mod NEW for b and the exercise; warp 0
    // also solves.
    double cash[MAXE];
    int cdate[MAXE];
    for (long long q = 0; q < Q; ++q) {
        const long long l = blockIdx.x + (q / S) * gridDim.x;
        const int s = S - 1 - (int)(q % S);
        if (s == S - 1) {
#pragma unroll
            for (int i = 0; i < MAXE; ++i) {
                const int p = 32 * (w + NEW * i) + lane;
                const bool own = w + NEW * i < NCH && p < M;
                cash[i] = own ? initial_cash(l, p) : 0.0;
                cdate[i] = S;
                if (own) sy[p] = cash[i] * C_DF[1];
            }
        }
        if (w == 0) bar_sync(B_GR, 32 * (NBW + 1));
        bar_sync(B_NB, 32 * NEW);
        const unsigned* const sh = xh(q);
        const double* const sp = xp(q);
        // b partials: lane k < N sums psi_k(p) y_p over this warp's paths in the money.
        {
            // Branch-free: y_p counts only where the payoff is positive; four partial sums
            // (path p into bs[p & 3]); full chunks unrolled by 8, the last one path by path.
            double bs[4] = {0.0, 0.0, 0.0, 0.0};
            const int col = max(lane - 1, 0);
            auto add_path = [&](int p) {
                const double yv = sp[p] > 0.0 ? sy[p] : 0.0;
                const double x = lane == 0 ? 1.0 : state_high(sh + p * D, col) * 1.0;
                bs[p & 3] = fma(x, yv, bs[p & 3]);
            };
            for (int c = w; c < NCH; c += NEW) {
                const int p0 = 32 * c;
                if (p0 + 32 <= M) {
#pragma unroll 8
                    for (int j = 0; j < 32; ++j) add_path(p0 + j);
                } else {
                    for (int p = p0; p < M; ++p) add_path(p);
                }
            }
            const double b0 = bs[0] + bs[2], b1 = bs[1] + bs[3];
            sbp[w * 32 + lane] = b0 + b1;
        }
        bar_sync(B_NB, 32 * NEW);
        if (w == 0) {
            const unsigned total = scnt[0];
            const double inv = total > 0 ? 1.0 / (double)total : 0.0;
            double bk = 0.0;
#pragma unroll
            for (int e = 0; e < NEW; ++e) bk += sbp[e * 32 + lane];
            if (lane < N) sg[N * (N + 1) / 2 + lane] = bk * inv;
            __syncwarp();
#ifdef AHEAD_NOSOLVE
            if (lane < N) sb[lane] = lane == 0 ? 0.05 : 0.001;
#else
            solve_sel<false>(sg, sg, sb, scol, total, flags, lane);
#endif
            __syncwarp();
            bar_arrive(B_SGF, 32 * (NBW + 1));
        }
        bar_sync(B_NB, 32 * NEW);
        if (l == 0 && s == 0 && w == 0 && lane < N) beta_out[lane] = sb[lane];
        double bt[N];
#pragma unroll
        for (int k = 0; k < N; ++k) bt[k] = sb[k];
#pragma unroll
        for (int i = 0; i < MAXE; ++i) {
            const int c = w + NEW * i, p = 32 * c + lane;
            if (c < NCH && p < M) {
                exercise_path(sh + p * D, sp[p], bt, cash[i], cdate[i], s);
                if (s > 0) sy[p] = cash[i] * C_DF[cdate[i] - (s - 1)];
            }
        }
        if (s == 0) {
            double v = 0.0;
#pragma unroll
            for (int i = 0; i < MAXE; ++i)
                if (w + NEW * i < NCH) v += cash[i] * C_DF[cdate[i]];
            add_walk_value(v, value + l, lane);
        }
        bar_arrive(B_EXD, T_ALL);
    }
}
#define KERNEL fused_ahead
#define KERNEL_SMEM SMEM_AHEAD
#define KERNEL_THREADS T_ALL
#else
#define KERNEL fused_walk
// SMEM_PAD (bytes, timing aid): more shared memory per block, so that fewer fit an SM.
#ifndef SMEM_PAD
#define SMEM_PAD 0
#endif
#define KERNEL_SMEM (SMEM_BYTES + SMEM_PAD)
#endif
#ifndef KERNEL_THREADS
#define KERNEL_THREADS (32 * WPB)
#endif

#ifndef __CUDACC_RTC__
#include "cuda_check.h"

// Host check of one outer path at S = 1: the Gram in long double from the same basis
// values, the normal equations by Gaussian elimination, against the kernel's beta.
static double check(const std::vector<unsigned>& blk, const std::vector<double>& beta, double df1) {
    long double A[N][N + 1] = {};
    int cnt = 0;
    const double* pay = (const double*)(blk.data() + M * D);
    for (int mm = 0; mm < M; ++mm) {
        if (!(pay[mm] > 0.0)) continue;
        ++cnt;
        long double psi[N + 1];
        psi[0] = 1.0L;
        for (int i = 0; i < D; ++i) {
            unsigned long long bits = (unsigned long long)blk[mm * D + i] << 32;
            double x;
            memcpy(&x, &bits, 8);
            psi[i + 1] = x;
        }
        psi[N] = initial_cash(0, mm) * df1;
        for (int r = 0; r < N; ++r)
            for (int c = 0; c <= N; ++c) A[r][c] += psi[r] * psi[c];
    }
    for (int r = 0; r < N; ++r)
        for (int c = 0; c <= N; ++c) A[r][c] /= cnt;
    for (int j = 0; j < N; ++j)
        for (int r = j + 1; r < N; ++r) {
            const long double f = A[r][j] / A[j][j];
            for (int c = j; c <= N; ++c) A[r][c] -= f * A[j][c];
        }
    long double x[N];
    for (int r = N - 1; r >= 0; --r) {
        long double t = A[r][N];
        for (int c = r + 1; c < N; ++c) t -= A[r][c] * x[c];
        x[r] = t / A[r][r];
    }
    double worst = 0.0, scale = 0.0;
    for (int r = 0; r < N; ++r) scale = fmax(scale, fabs((double)x[r]));
    for (int r = 0; r < N; ++r) worst = fmax(worst, fabs(beta[r] - (double)x[r]));
    printf("check S=1 outer 0: %d paths enter, max |beta - host| = %.3e (max |beta| %.3e)\n", cnt, worst,
           scale);
    return worst / scale;
}

int main(int argc, char** argv) {
    const int S = argc > 1 ? atoi(argv[1]) : 4;
    const long long outer = argc > 2 ? atoll(argv[2]) : 20000;
    const long long total = argc > 3 ? atoll(argv[3]) : 3600000;
    double df[16];
    for (int j = 0; j < 16; ++j) df[j] = std::exp(-0.1 * 0.1 * j);
    CK(cudaMemcpyToSymbol(C_DF, df, sizeof(df)));
    CK(cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, KERNEL_SMEM));
    unsigned* st;
    double *value, *beta;
    int* flags;
    CK(cudaMalloc(&st, (size_t)outer * S * BLOCK_WORDS * 4));
    CK(cudaMalloc(&value, outer * 8));
    CK(cudaMalloc(&beta, 32 * 8));
    CK(cudaMalloc(&flags, 4));
    CK(cudaMemset(flags, 0, 4));
    {
        const long long t = outer * S * M;
        fill<<<(unsigned)((t + 255) / 256), 256>>>(st, outer, S);
        CK(cudaGetLastError());
    }
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, KERNEL, KERNEL_THREADS, KERNEL_SMEM));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    {
        const int wave[2] = {sms, nb};
        CK(cudaMemcpyToSymbol(C_WAVE, wave, sizeof(wave)));
    }
#ifdef AHEAD
    const unsigned grid = (unsigned)std::min<long long>(outer, (long long)nb * sms);
    printf("AHEAD NBW %d NEW %d, grid %u: ", NBW, NEW, grid);
#else
    const unsigned grid = (unsigned)outer;
#endif
#ifdef RING
    printf("RING %d: ", RING);
#endif
    printf("MODE %d, WPB %d, S %d, outer per launch %lld, %d bytes of shared memory, %d outer paths per SM\n",
           MODE, WPB, S, outer, KERNEL_SMEM, nb);
    if (MODE == 0) {
        // S = 1 on the first outer path's last date block (its states as the S = 1 layout).
        std::vector<unsigned> blk(BLOCK_WORDS);
        KERNEL<<<1, KERNEL_THREADS, KERNEL_SMEM>>>(st + (size_t)(S - 1) * BLOCK_WORDS, 1, 1, value, beta, flags);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(blk.data(), st + (size_t)(S - 1) * BLOCK_WORDS, BLOCK_WORDS * 4,
                      cudaMemcpyDeviceToHost));
        std::vector<double> b(32);
        CK(cudaMemcpy(b.data(), beta, 32 * 8, cudaMemcpyDeviceToHost));
        const double rel = check(blk, b, df[1]);
        printf("check: %s (relative %.2e)\n", rel < 1e-6 ? "ok" : "FAILED", rel);
    }
    const long long per_launch = outer * S;
    const long long launches = (total + per_launch - 1) / per_launch;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int rep = 0; rep < 3; ++rep) {
#ifdef PROF
        if (rep == 2) {
            static const unsigned long long zero[4][8] = {};
            CK(cudaMemcpyToSymbol(g_prof, zero, sizeof(zero)));
        }
#endif
        CK(cudaMemset(flags, 0, 4));
        CK(cudaMemset(value, 0, outer * 8));
        CK(cudaEventRecord(e0));
        for (long long k = 0; k < launches; ++k)
            KERNEL<<<grid, KERNEL_THREADS, KERNEL_SMEM>>>(st, S, outer, value, beta, flags);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        int fl = 0;
        CK(cudaMemcpy(&fl, flags, 4, cudaMemcpyDeviceToHost));
        std::vector<double> v(4);
        CK(cudaMemcpy(v.data(), value, 32, cudaMemcpyDeviceToHost));
        const double regs = (double)launches * per_launch;
        printf("rep %d: %lld launches, %.0f regressions in %.4f s = %.1f M/s; per 3.6 M %.4f s; flagged %d; "
               "value[0] %.6f\n",
               rep, launches, regs, ms / 1e3, regs / (ms / 1e3) / 1e6, ms / 1e3 * 3.6e6 / regs, fl, v[0]);
    }
#ifdef PROF
    unsigned long long pr[4][8];
    CK(cudaMemcpyFromSymbol(pr, g_prof, sizeof(pr)));
    for (int w = 0; w < 4; ++w)
        if (pr[w][6] > 0) {
            const double n = (double)pr[w][6];
            printf("PROF warp %d, cycles per date: copy wait %.0f, build %.0f, join %.0f, solve + barrier %.0f, "
                   "exercise + copies %.0f, barrier %.0f; sum %.0f\n",
                   w, pr[w][0] / n, pr[w][1] / n, pr[w][2] / n, pr[w][3] / n, pr[w][4] / n, pr[w][5] / n,
                   (double)(pr[w][0] + pr[w][1] + pr[w][2] + pr[w][3] + pr[w][4] + pr[w][5] + pr[w][7]) / n);
            if (pr[w][7] > 0) printf("PROF2 warp %d: of the exercise phase, the copies' issue %.0f\n", w, pr[w][7] / n);
        }
#endif
    return 0;
}
#endif
