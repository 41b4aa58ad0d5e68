// The fused Longstaff-Schwartz walk (issue 5; benches/RESULTS.md, forty-fourth to
// fifty-first sessions): one block of two warps per outer path runs every regression
// step of one American position at one exposure date, from the last exercise date before
// maturity back to the first after the exposure date, with the date's states in shared
// memory, the cash flows in registers and the discounted cash flows y in shared memory.
// Per step: the Gram [Psi y]^T [Psi y] of the entering inner paths on the FP64 tensor
// cores (the pipeline build's fragments, regression.cu with TC_K 8, but 5 blocks of 16 x 8
// per 8 paths that cover the Gram up to symmetry instead of the 6 of its lower triangle:
// walk_gram_blocks; the two warps' partial sums joined, so A and b are not the
// pipeline's bits), scaled by 1 / count; the solve by
// walk_solve (below); the exercise update; the copies of the next date's states, issued
// as the exercise frees each chunk (TMA bulk copies on one mbarrier per chunk).
//
// The solve is level 0 of the escalating strategy (kernels/src/batch/escalate.rs) in
// another form: the L D L^T of A with its pivots taken two at a time, as a Gauss-Jordan
// elimination with 2 x 2 pivot blocks (every row other than the pair's is eliminated, so
// there is no back substitution), and the same acceptance in product form: every L D L^T
// pivot positive (D_J = p00, D_{J+1} = det / p00 of each pivot block), the pivot ratio
// min D_jj / A_jj at least 1 / threshold, the relative residual at most the tolerance and
// the solution growth at most the threshold (the quantities of residual_check in
// kernels/src/batch/residual.rs, with the divisions multiplied out and (A x)_i summed in
// two halves: walk_check). The elimination is not backward stable as L D L^T's
// substitutions are, so a system that fails the test with positive pivots gets one step of
// iterative refinement in the working precision and the test again; the refinement's
// solve reuses the elimination's numerators (walk_resolve). Its CPU mirror is
// kernels/src/gj2.rs (bitwise, with the correctly rounded reciprocal rcp_rn_fast_f64).
// A system that still fails the test flags its
// outer path: the walk then writes no cash flows for it, and the engine runs the outer
// path's steps again through the pipeline (build, escalating solve, exercise).
//
// Everything else follows engine.cu: the entering paths (payoff > 0 when WALK_ITM, else
// all), the too-few rule (0 < count < n: the fallback mean, the ordered sum of y over
// the entering paths / count; count == 0: no exercise), the continuation psi . beta as
// engine_continuation forms it (separate products and sums from 0), the exercise rule of
// engine_exercises and the discounted cash flows of engine_exercise_store.
//
// Defines (from the host, kernels/src/cuda/walk.rs): WALK_D (assets, words per path of a
// state row), WALK_M (inner paths, 32 < m <= 320), WALK_N (basis size, even, <= 30),
// WALK_ITM (0 or 1), WALK_IDENTITY (basis function k reads asset k - 1) or the table
// walk_asset(k), WALK_UNIT_INV (every 1 / S_0 is 1: no multiply) or walk_inv(k).
//
// States (paths.cu's payoff plane): the block of (outer path l, date date0 + s) is the
// m x d doubles at states + l * stride + s * m * d: the m d high words, then the m
// payoffs (doubles) at word m d.
//
// Block: 2 warps (64 threads), one outer path. Warp w owns the chunks of 32 inner paths
// c = w mod 2 (their copies, their part of the Gram, their exercise); the solving warp is
// chosen by its SM sub-partition (SWAPW, forty-seventh session). Shared memory: see
// WALK_SMEM_BYTES (the host's WalkShape::shared_bytes).

#define D WALK_D
#define M WALK_M
#define N WALK_N
#define NCH ((M + 31) / 32)           // chunks of 32 inner paths
#define NPK (31 * 32 / 2)             // packed lower triangle of the 31 x 31 augmented matrix
#define SH_WORDS ((M * D + 3) / 4 * 4)  // the high words, padded to 16 bytes
// The solver's scratch (doubles from scol): three buffers of a pivot pair's columns
// (walk_gj), x (z in walk_gj), the pivot blocks' p01, p11 and 1 / det, their p00 and det
// (walk_gj), t_i = sqrt(|a_ii|) and the four maxima of walk_matrix_norms.
#define WALK_SC 0
#define WALK_SX 192
#define WALK_SD 224
#define WALK_SP 272
#define WALK_ST 304
#define WALK_SMAX 334
#define SCOL 338
#define WALK_DISC 64                  // discount factors held in shared memory
#define WALK_SMUL (N / 2 * 64)           // walk_gj's numerators m0, m1 per pivot pair and lane (walk_resolve)
#define WALK_SMEM_BYTES (SH_WORDS * 4 + M * 8 + M * 8 + NPK * 8 + 32 * 8 + SCOL * 8 + 16 + NCH * 8 + WALK_DISC * 8 + WALK_SMUL * 8)

#if N % 2 != 0 || N > 30 || N < 2
#error "the walk takes an even basis size 2 <= n <= 30"
#endif
#if M <= 32 || M > 320
#error "the walk takes 32 < m <= 320 inner paths"
#endif

// 1 / n for the entering-path counts n = 0 .. M (0 for n = 0), the quotients the
// compiler forms (correctly rounded), so the same bits as 1.0 / (double)n at run time.
struct WalkInvCounts {
    double v[M + 1];
    __host__ __device__ constexpr WalkInvCounts() : v() {
        for (int n = 1; n <= M; ++n) v[n] = 1.0 / (double)n;
    }
};
__constant__ WalkInvCounts walk_inv_counts = WalkInvCounts();

// The engine's per-system report (engine.cu's EngineReport).
struct WalkReport {
    double residual;
    unsigned method;
    unsigned status;
};

__device__ __forceinline__ void walk_bar_sync() { __syncthreads(); }

// ---- TMA bulk copies of one chunk (high words and payoffs) onto its mbarrier ----

__device__ __forceinline__ unsigned walk_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void walk_mbar_init(unsigned long long* b) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\tfence.mbarrier_init.release.cluster;" ::"r"(
                     walk_smem_addr(b))
                 : "memory");
}
__device__ __forceinline__ void walk_mbar_wait(unsigned long long* b, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred P1;\n\tWAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t@!P1 bra WAIT_%=;\n\t}" ::"r"(walk_smem_addr(b)),
        "r"(parity)
        : "memory");
}
// Chunk c of the block at src into sh / sp on barrier mb[c] (lane 0 only, after the warp's
// last generic reads of the chunk: the proxy fence first). Sizes and addresses are
// multiples of 16 bytes (the host checks m d and the last chunk).
__device__ __forceinline__ void walk_issue_chunk(unsigned* sh, double* sp, const unsigned* src, int c,
                                                 unsigned long long* mb) {
    const int p0 = 32 * c, np = min(32, M - p0);
    const unsigned bw = np * D * 4, bp = np * 8;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(walk_smem_addr(mb + c)),
                 "r"(bw + bp)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            walk_smem_addr(sh + p0 * D)),
        "l"(src + p0 * D), "r"(bw), "r"(walk_smem_addr(mb + c))
        : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            walk_smem_addr(sp + p0)),
        "l"((const double*)(src + M * D) + p0), "r"(bp), "r"(walk_smem_addr(mb + c))
        : "memory");
}

// An L2 prefetch of n bytes at p (global; p 16-byte aligned, n a multiple of 16).
__device__ __forceinline__ void walk_prefetch_l2(const void* p, unsigned n) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
}

// ---- The Gram on the FP64 tensor cores ----

// The 5 blocks of 16 x 8 that cover [Psi y]^T [Psi y] up to symmetry: block k takes the
// rows of the 8-row groups ra and rb against the columns of group J, (ra rb J) = (0 2 0),
// (1 3 1), (2 1 2), (3 2 3), (1 3 0), so every pair of groups appears once (the diagonal
// groups' 8 x 8 blocks whole, of which the lower triangle is kept). f(ra, rb, J, k).
#define WALK_NT 5
template <typename F>
__device__ __forceinline__ void walk_gram_blocks(F f) {
    f(0, 2, 0, 0);
    f(1, 3, 1, 1);
    f(2, 1, 2, 2);
    f(3, 2, 3, 3);
    f(1, 3, 0, 4);
}

// This lane's 4 entries of each block in the MMA accumulator layout: f(k, e, row, col)
// (row and column of the block, which may lie above the diagonal).
template <typename F>
__device__ __forceinline__ void walk_lane_entries(int lane, F f) {
    const int g = lane >> 2, q = lane & 3;
    walk_gram_blocks([&](int ra, int rb, int J, int k) {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(k, e, 8 * (e < 2 ? ra : rb) + g, 8 * J + 2 * q + (e & 1));
    });
}

// Basis function col (1 <= col < N) of a state row: S_h[asset] (* 1 / S_0), the pipeline
// build's 1 * (S_h * inv) (no multiply where 1 / S_0 is 1: the same value).
__device__ __forceinline__ double walk_feature(const unsigned* row, int col) {
#ifdef WALK_IDENTITY
    const double s = state_high(row, col - 1);
#else
    const double s = state_high(row, walk_asset(col));
#endif
#ifdef WALK_UNIT_INV
    return s;
#else
    return 1.0 * (s * walk_inv(col));
#endif
}

// One chunk's groups of 8 paths (NG of them) into acc: the paths of mask, rows hb[p * D ..],
// y_p = yb[p]. Groups with no entering path add zeros (no branch: one basic block).
//
// Only the B operands are masked (fifty-second session): the A fragments take every path's
// values (in a full chunk every row is a state; in the last, partial chunk the paths that
// do not enter, those past the last path among them, read row 0), and each product with a
// path that does not enter is A x (+0) = +0, which leaves every sum's bits as they were
// with both operands masked. (A state that is not finite on a path that does not enter
// would make the sums NaN: the acceptance test then flags the outer path, and the pipeline
// solves its steps.) ptxas copies every MMA operand into its register tuple anyway; the B
// copies become the selects, and the selects of the A values go (the build's code 19%
// shorter in the SASS; walk_bench 0.0727 -> 0.0710 s).
template <int NG>
__device__ __forceinline__ void walk_build_groups(double (&acc)[WALK_NT][4], const unsigned* hb, unsigned mask,
                                                  const double* yb, int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int k0 = 0; k0 < 8 * NG; k0 += 8) {
        double v[4][2], vb[4][2];  // v: every path's values (A); vb: the entering paths' (B)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int pl = k0 + q + 4 * h;
            const bool enters = (mask >> pl) & 1u;
            const int p = NG == 4 ? pl : (enters ? pl : 0);
            const unsigned* sph = hb + p * D;
            const double yv = yb[p];
#pragma unroll
            for (int I = 0; I < 4; ++I) {
                const int col = 8 * I + g;
                double val;
                if (col >= 1 && col < N)
                    val = walk_feature(sph, col);
                else
                    val = col == 0 ? 1.0 : (col == N ? yv : 0.0);
                v[I][h] = val;
                vb[I][h] = enters ? val : 0.0;
            }
        }
#ifdef __CUDA_ARCH__  // (nvcc's host pass of benches/walk_bench.cu has no mma)
        walk_gram_blocks([&](int ra, int rb, int J, int k) {
            mma_m16n8k8_f64(acc[k], v[ra][0], v[rb][0], v[ra][1], v[rb][1], vb[J][0], vb[J][1]);
        });
#endif
    }
}

// One chunk (np paths): its entering paths counted into total, their products into acc.
__device__ __forceinline__ void walk_build_chunk(double (&acc)[WALK_NT][4], unsigned& total, const unsigned* hb,
                                                 const double* pb, const double* yb, int np, int lane) {
    const bool f = lane < np && (!WALK_ITM || pb[lane] > 0.0);
    const unsigned mask = __ballot_sync(0xffffffffu, f);
    total += __popc(mask);
    constexpr int ngl = (M % 32 + 7) / 8;
    if (ngl > 0 && np < 32) {
        walk_build_groups<ngl>(acc, hb, mask, yb, lane);
        return;
    }
    walk_build_groups<4>(acc, hb, mask, yb, lane);
}

// Where entry (r0, c0) of this lane's block k goes in the packed lower triangle of the
// augmented matrix (b in row N), or -1 for none: an entry of a block in a diagonal group is
// kept below the diagonal, one in an off-diagonal group is stored at (max, min). (The
// offset is walk_entry's; a shared helper for the two moved ptxas's allocation of the whole
// kernel under NVRTC 13, so they stay apart until that is timed on the GPU.)
__device__ __forceinline__ int walk_packed_index(int r0, int c0) {
    const bool same = (r0 >> 3) == (c0 >> 3);
    const int r = max(r0, c0), cc = min(r0, c0);
    return r <= N && cc < N && (!same || r0 >= c0) ? r * (r + 1) / 2 + cc : -1;
}

// One pass over this lane's entries of the packed Gram sg: op 0 stores acc, 3 stores
// (acc + sg) * inv. Op 3 reads all of its entries before it stores any: as far as the
// compiler knows a store may alias a later load, so a pass of load-add-store per entry
// runs as 20 round trips in sequence (1.6k cycles per step on the solving warp's chain
// in the fifty-first session's profile; 0.9k this way).
__device__ __forceinline__ void walk_gram_pass(double (&acc)[WALK_NT][4], double* sg, int lane, int op, double inv) {
    double old[WALK_NT][4];
    if (op == 3) {
        walk_lane_entries(lane, [&](int k, int e, int r0, int c0) {
            const int t = walk_packed_index(r0, c0);
            old[k][e] = t >= 0 ? sg[t] : 0.0;
        });
    }
    walk_lane_entries(lane, [&](int k, int e, int r0, int c0) {
        const int t = walk_packed_index(r0, c0);
        if (t >= 0) sg[t] = op == 0 ? acc[k][e] : (acc[k][e] + old[k][e]) * inv;
    });
}

// ---- The solver: L D L^T by 2 x 2 pivot blocks in Gauss-Jordan form ----

// The solver's reciprocal of a pivot block's determinant: correctly rounded for det in
// [2^-1000, 2^1001) (rcp.cu); outside it the pivot ratio rejects the system anyway.
__device__ __forceinline__ double walk_rcp(double d) { return rcp_rn_fast_f64(d); }

// Entry (i, k) of A from the packed lower triangle sg (0 for lanes i >= N).
__device__ __forceinline__ double walk_entry(const double* sg, int i, int k) {
    const int r = max(i, k), cc = min(i, k);
    return i < N ? sg[r * (r + 1) / 2 + cc] : 0.0;
}

// The maximum over the warp of v, where every lane's v is a non-negative number (+0 to
// +inf, no NaN): the largest high word, then the largest low word among the lanes that
// hold it (for such doubles the order of the bits is the order of the values), by two
// warp reductions instead of five shuffle-and-fmax steps. It equals the fmax of all the
// lanes' values.
__device__ __forceinline__ double walk_max_nonneg(double v) {
    const unsigned hi = (unsigned)__double2hiint(v), lo = (unsigned)__double2loint(v);
    const unsigned hmax = __reduce_max_sync(0xffffffffu, hi);
    const unsigned lmax = __reduce_max_sync(0xffffffffu, hi == hmax ? lo : 0u);
    return __hiloint2double((int)hmax, (int)lmax);
}

// The outcome of one solve.
struct WalkSolve {
    bool accepted;
    double residual;
    double ri;  // walk_check: lane i's residual r_i (the refinement's right-hand side)
};

// The elimination of the system in sg (packed lower triangle of the n x n A; not changed)
// with right-hand side rhs (lane i's entry) on one warp: L D L^T by 2 x 2 pivot blocks in
// Gauss-Jordan form. Lane i holds row i of [A rhs] (a[0..N]); returns x_i (0 for lanes
// i >= N) and whether every pivot (p00 and det) was positive. Scratch (WALK_S* offsets in
// scol): three buffers of a pivot pair's two columns (entry N the pair's right-hand sides),
// the blocks' p01, p11 and 1 / det, their p00 and det, and z. Each pair's numerators m0,
// m1 (lane i's, 0 for the pair's own rows and lanes >= N) go to smul[64 t + i] and
// smul[64 t + 32 + i] for walk_resolve.
//
// The steps are software-pipelined: once pair t's look-ahead columns (the next pair's)
// are stored, the next pair's pivot block, determinant and reciprocal are formed before
// pair t's trailing update, so that update's multiply-adds fill the reciprocal's latency
// instead of lengthening the chain from one pivot to the next. Pair t's trailing update
// still reads pair t's columns while pair t + 1's look-ahead writes pair t + 2's: hence
// three buffers (pair t's in buffer t mod 3). Every entry gets the same operations in the
// same order as before (the mirror kernels/src/gj2.rs is unchanged).
struct WalkGj {
    double xi;
    bool good;
};
// Pair J / 2's pivot block from its column buffer c0 (c1 = c0 + 32): p00, p01, p11, det
// and rdet = 1 / det.
struct WalkPivot {
    double p00, p01, p11, det, rdet;
};
__device__ __forceinline__ WalkPivot walk_pivot(const double* c0, int J) {
    WalkPivot p;
    p.p00 = c0[J];
    p.p01 = c0[J + 1];
    p.p11 = c0[32 + J + 1];
    p.det = fma(p.p00, p.p11, -(p.p01 * p.p01));
    p.rdet = walk_rcp(p.det);
    return p;
}
// Row i of x = D^-1 z for the pivot blocks walk_gj left in sD / sP (z0, z1: z of row i's
// pair): lane i forms the two entries of its block's row, p11 / det and -p01 / det or
// -p01 / det and p00 / det (as products with rdet).
__device__ __forceinline__ double walk_block_solve(int i, double z0, double z1, const double* sD, const double* sP) {
    const int t = i >> 1;
    const double p01 = sD[3 * t], p11 = sD[3 * t + 1], rdet = sD[3 * t + 2], p00 = sP[2 * t];
    const double m01 = -p01 * rdet;
    return (i & 1) ? fma(m01, z0, (p00 * rdet) * z1) : fma(p11 * rdet, z0, m01 * z1);
}
__device__ __noinline__ WalkGj walk_gj(const double* sg, double rhs, double* scol, double* smul, int lane) {
    const int i = lane;
    const bool row = i < N;
    double a[N + 1];
#pragma unroll
    for (int k = 0; k < N; ++k) {
        a[k] = walk_entry(sg, i, k);
    }
    a[N] = row ? rhs : 0.0;
    __syncwarp();
    // The first pivot pair's columns, their entry N the pair's right-hand sides.
    if (row) {
        scol[WALK_SC + i] = a[0];
        scol[WALK_SC + 32 + i] = a[1];
    }
    if (i == 0) scol[WALK_SC + N] = a[N];
    if (i == 1) scol[WALK_SC + 32 + N] = a[N];
    __syncwarp();
    double* const sx = scol + WALK_SX;
    double* const sD = scol + WALK_SD;
    double* const sP = scol + WALK_SP;
    WalkPivot pv = walk_pivot(scol + WALK_SC, 0);
#pragma unroll
    for (int t = 0; t < N / 2; ++t) {
        const int J = 2 * t;
        const double* c0 = scol + WALK_SC + 64 * (t % 3);
        const double* c1 = c0 + 32;
        double* n0 = scol + WALK_SC + 64 * ((t + 1) % 3);
        double* n1 = n0 + 32;
        const double p00 = pv.p00, p01 = pv.p01, p11 = pv.p11, det = pv.det, rdet = pv.rdet;
        const bool below = row && (i < J || i > J + 1);
        const double u0 = a[J], u1 = a[J + 1];
        // m = adj(P) u by Kahan's difference of products; l = m / det.
        const double t0 = u1 * p01, t1 = u0 * p01;
        const double m0 = below ? fma(u0, p11, -t0) - fma(u1, p01, -t0) : 0.0;
        const double m1 = below ? fma(u1, p00, -t1) - fma(u0, p01, -t1) : 0.0;
        const double l0 = m0 * rdet, l1 = m1 * rdet;
        if (J + 2 < N) {
            // The look-ahead columns (the next pair's and the right-hand side) first.
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
            smul[64 * t + i] = m0;
            smul[64 * t + 32 + i] = m1;
            __syncwarp();
            // The next pair's pivot block and reciprocal, ahead of this pair's trailing update.
            pv = walk_pivot(n0, J + 2);
        } else {
            a[N] = fma(-l1, c1[N], fma(-l0, c0[N], a[N]));  // the last pair: the rows above it
            smul[64 * t + i] = m0;
            smul[64 * t + 32 + i] = m1;
        }
#pragma unroll
        for (int k = J + 4; k < N; ++k) a[k] = fma(-l1, c1[k], fma(-l0, c0[k], a[k]));
        // The pair's pivot block for the end (no arithmetic here: off the pivot chain).
        if (i == 0) {
            sD[3 * t] = p01;
            sD[3 * t + 1] = p11;
            sD[3 * t + 2] = rdet;
            sP[2 * t] = p00;
            sP[2 * t + 1] = det;
        }
    }
    // x = D^-1 z by the pivot blocks' inverses (z = a[N]); every pivot (p00 and det)
    // positive: good.
    if (row) sx[i] = a[N];
    __syncwarp();
    double xi = 0.0;
    bool bad_pivot = false;
    if (row) {
        const int J = 2 * (i >> 1);
        xi = walk_block_solve(i, sx[J], sx[J + 1], sD, sP);
        bad_pivot = !(sP[i] > 0.0);
    }
    const bool good = __ballot_sync(0xffffffffu, bad_pivot) == 0u;
    __syncwarp();
    return {xi, good};
}

// walk_gj's elimination again for another right-hand side z (lane i's entry), from the
// numerators m0, m1 that walk_gj stored per pivot pair and lane (smul) and the pivot blocks
// it left in sD / sP: the same operations on the right-hand side column as walk_gj (the
// pivot rows' entries by shuffles instead of shared memory), so the same bits, without
// the elimination of A. Returns x_i = (D^-1 z)_i (0 for lanes i >= N). The refinement's
// solve: about 1k cycles instead of walk_gj's 4-7k.
__device__ __noinline__ double walk_resolve(double z, const double* scol, const double* smul, int lane) {
    const int i = lane;
    const bool row = i < N;
    const double* const sD = scol + WALK_SD;
    const double* const sP = scol + WALK_SP;
    z = row ? z : 0.0;
#pragma unroll
    for (int t = 0; t < N / 2; ++t) {
        const int J = 2 * t;
        const double rdet = sD[3 * t + 2];
        const double m0 = smul[64 * t + i], m1 = smul[64 * t + 32 + i];
        const double z0 = __shfl_sync(0xffffffffu, z, J), z1 = __shfl_sync(0xffffffffu, z, J + 1);
        if (J + 2 < N) {
            z = fma(-rdet, fma(m1, z1, m0 * z0), z);
        } else {
            const double l0 = m0 * rdet, l1 = m1 * rdet;
            z = fma(-l1, z1, fma(-l0, z0, z));
        }
    }
    const int J = 2 * (i >> 1) & 31;
    const double z0 = __shfl_sync(0xffffffffu, z, J), z1 = __shfl_sync(0xffffffffu, z, J + 1);
    return row ? walk_block_solve(i, z0, z1, sD, sP) : 0.0;
}

// The parts of the acceptance test that depend on A and b alone, for the system in sg, on
// one warp: with s_i = 1 / sqrt(|a_ii|) (1 where a_ii = 0), the maxima over rows of
// sum_k |a_ik| and of sum_k |s_i a_ik s_k| (row sums in column order, as residual_check in
// kernels/src/batch/residual.rs sums them), of |b_i| and of |s_i b_i| into
// scol[WALK_SMAX .. WALK_SMAX + 4), and t_i = sqrt(|a_ii|) (1 where a_ii = 0) into
// scol[WALK_ST + i]. The walk runs it on the warp that does not solve, while the other
// eliminates.
__device__ __noinline__ void walk_matrix_norms(const double* sg, double* scol, int lane) {
    const int i = lane;
    const bool row = i < N;
    double si = 1.0;
    if (row) {
        const double dii = fabs(sg[i * (i + 1) / 2 + i]);
        si = dii > 0.0 ? 1.0 / sqrt(dii) : 1.0;
        scol[WALK_ST + i] = dii > 0.0 ? sqrt(dii) : 1.0;
    }
    double rsum = 0.0, srow = 0.0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const double arc = walk_entry(sg, i, k);
        const double sk = __shfl_sync(0xffffffffu, si, k);
        rsum = rsum + fabs(arc);
        srow = srow + fabs(si * arc * sk);
    }
    const double bi = row ? sg[N * (N + 1) / 2 + i] : 0.0;
    double a_max = row ? rsum : 0.0, sa_max = row ? srow : 0.0;
    double b_max = fabs(bi), sb_max = fabs(si * bi);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a_max = fmax(a_max, __shfl_xor_sync(0xffffffffu, a_max, o));
        sa_max = fmax(sa_max, __shfl_xor_sync(0xffffffffu, sa_max, o));
        b_max = fmax(b_max, __shfl_xor_sync(0xffffffffu, b_max, o));
        sb_max = fmax(sb_max, __shfl_xor_sync(0xffffffffu, sb_max, o));
    }
    if (lane == 0) {
        scol[WALK_SMAX] = a_max;
        scol[WALK_SMAX + 1] = sa_max;
        scol[WALK_SMAX + 2] = b_max;
        scol[WALK_SMAX + 3] = sb_max;
    }
    __syncwarp();
}

// The acceptance test of level 0 of the escalating strategy, in product form (no division
// on its path), for x (lane i's x_i) with the pivots of the last walk_gj (sP = scol + WALK_SP),
// good, and walk_matrix_norms's results. With the residual r_i = b_i - (A x)_i, (A x)_i
// summed as (sum over even k) + (sum over odd k), each in column order from 0:
//   bad      = some r_i is NaN or some x_i is not finite (rejected, residual NaN);
//   ill      = some pivot D_i thr < a_ii (D_J = p00; D_{J+1} = det / p00 compared as
//              det thr < a_ii p00), or sa_max * max_i |x_i| t_i > thr * sb_max (growth);
//   accepted = good && !bad && !ill && r_max <= tol (a_max x_max + b_max).
// These are residual_check's relative residual <= tol, growth <= thr and pivot ratio
// >= 1 / thr with the divisions multiplied out (the scaled x as |x_i| t_i, not
// |x_i / s_i|). The residual reported is r_max / (a_max x_max + b_max) (0 where that is
// 0). Publishes x in sx = scol + WALK_SX and returns lane i's r_i in .ri (the refinement's
// right-hand side; by value, not through local memory). The CPU mirror: gj2_solve_checked
// in kernels/src/gj2.rs.
__device__ __noinline__ WalkSolve walk_check(const double* sg, double* scol, double xi, double bi0, bool good,
                                             double tol, double thr, int lane) {
    const int i = lane;
    const bool row = i < N;
    double* const sx = scol + WALK_SX;
    const double* const sP = scol + WALK_SP;
    if (row) sx[i] = xi;
    __syncwarp();
    bool ill = false;
    double ti = 1.0;
    if (row) {
        const int t = i >> 1;
        const double p00 = sP[2 * t];
        const double aii = sg[i * (i + 1) / 2 + i];
        ill = (i & 1) ? sP[2 * t + 1] * thr < aii * p00 : p00 * thr < aii;
        ti = scol[WALK_ST + i];
    }
    double acc0 = 0.0, acc1 = 0.0;
#pragma unroll
    for (int k = 0; k < N; k += 2) {
        acc0 = acc0 + walk_entry(sg, i, k) * sx[k];
        acc1 = acc1 + walk_entry(sg, i, k + 1) * sx[k + 1];
    }
    const double a_max = scol[WALK_SMAX], sa_max = scol[WALK_SMAX + 1], b_max = scol[WALK_SMAX + 2],
                 sb_max = scol[WALK_SMAX + 3];
    __syncwarp();  // sx is read: a refinement may overwrite it
    const double rs = bi0 - (acc0 + acc1);
    const double ri = fabs(rs);
    // Lanes past N contribute zeros to the maxima.
    const bool bad = row && (ri != ri || !(fabs(xi) <= 1.7976931348623157e308));
    // (Where no lane is bad, every term is a non-negative number: walk_max_nonneg.)
    const double r_max = walk_max_nonneg(row ? ri : 0.0), x_max = walk_max_nonneg(row ? fabs(xi) : 0.0),
                 sx_max = walk_max_nonneg(row ? fabs(xi) * ti : 0.0);
    const bool any_bad = __ballot_sync(0xffffffffu, bad) != 0u;
    const bool any_ill = __ballot_sync(0xffffffffu, ill) != 0u;
    WalkSolve out;
    out.ri = rs;
    if (any_bad) {
        out.residual = __longlong_as_double(0x7ff8000000000000LL);
        out.accepted = false;
        return out;
    }
    const double den = a_max * x_max + b_max;
    out.residual = den == 0.0 ? 0.0 : r_max / den;
    out.accepted = good && !any_ill && r_max <= tol * den && !(sa_max * sx_max > thr * sb_max);
    return out;
}

// WALK_PROF (benches/walk_bench.cu only, a timing aid): each warp sums clock() spans per
// phase into g_walk_prof[w][phase] (lane 0): 0 the waits for the chunks' copies, 1 the
// build's work, 2 the Gram's join, 3 the solve and the barrier after it, 4 the exercise
// with the next date's copies; [w][6] counts the warp's steps (5 was the barrier at the
// step's end, gone since the fifty-second session). The solving warp also sums into
// g_walk_prof_solve: 0 walk_gj, 1 the wait for the other warp's norms, 2 the first
// walk_check, 3 the refinement (walk_resolve and the second check), 4 the systems
// refined, 5 the systems solved, 6 the join pass (walk_gram_pass op 3, with its 1 / count).
#ifdef WALK_PROF
__device__ unsigned long long g_walk_prof[2][8];
__device__ unsigned long long g_walk_prof_solve[8];
#define WALK_PROF_NOW() (unsigned)clock()
#define WALK_PROF_ADD(i, t0)          \
    do {                              \
        const unsigned t1_ = clock(); \
        prof[i] += t1_ - (t0);        \
        t0 = t1_;                     \
    } while (0)
#define WALK_PROF_SOLVE(i, t0)                                                                           \
    do {                                                                                                 \
        const unsigned t1_ = clock();                                                                    \
        if (lane == 0 && norms_barrier) atomicAdd(&g_walk_prof_solve[i], (unsigned long long)(t1_ - (t0))); \
        t0 = t1_;                                                                                        \
    } while (0)
#else
#define WALK_PROF_NOW() 0u
#define WALK_PROF_ADD(i, t0) (void)(t0)
#define WALK_PROF_SOLVE(i, t0) (void)(t0)
#endif

// Solves the system in sg (packed lower triangle of A, b in row N; not changed) on one
// warp: walk_gj, walk_check; where the test fails with positive pivots, one step of
// iterative refinement in the working precision (x += the solve of A d = b - A x: the
// elimination is not backward stable as L D L^T's substitutions are, and one step of
// refinement makes up for it, Skeel 1980; the solve of A d = r by walk_resolve from the
// first elimination's numerators in smul, WALK_SMUL doubles) and the test again. x goes to
// sx = scol + WALK_SX (SCOL doubles of scratch). walk_matrix_norms must have run on sg first: with
// norms_barrier, on the block's other warp, which arrives at named barrier 1 when done
// (the walk); without, on this warp before the call. Every lane returns the same outcome.
// Inlined into its callers: as a call of its own it moved the register allocation of the
// functions it calls (walk_bench 0.0731 s inlined against 0.0745, fifty-first session).
__device__ __forceinline__ WalkSolve walk_solve(const double* sg, double* scol, double* smul, double tol, double thr,
                                             bool norms_barrier, int lane) {
    [[maybe_unused]] unsigned pq = WALK_PROF_NOW();
    const double bi0 = lane < N ? sg[N * (N + 1) / 2 + lane] : 0.0;
    const WalkGj first = walk_gj(sg, bi0, scol, smul, lane);
    WALK_PROF_SOLVE(0, pq);
    if (norms_barrier) asm volatile("bar.sync 1, 64;" ::: "memory");
    WALK_PROF_SOLVE(1, pq);
    double xi = first.xi;
    WalkSolve out = walk_check(sg, scol, xi, bi0, first.good, tol, thr, lane);
    WALK_PROF_SOLVE(2, pq);
    const bool refine = __any_sync(0xffffffffu, !out.accepted && first.good);
    if (refine) {
        xi = xi + walk_resolve(out.ri, scol, smul, lane);
        out = walk_check(sg, scol, xi, bi0, first.good, tol, thr, lane);
        WALK_PROF_SOLVE(3, pq);
    }
#ifdef WALK_PROF
    if (lane == 0 && norms_barrier) {
        atomicAdd(&g_walk_prof_solve[4], (unsigned long long)refine);
        atomicAdd(&g_walk_prof_solve[5], 1ull);
    }
#endif
    // (The last walk_check has already stored these x_i in sx. Without this store the
    // kernel's allocation moved: walk_bench 0.0709-0.0710 -> 0.0716-0.0717 s, the engine's
    // one-stream walk 0.0733 -> 0.0729 s; fifty-second session, call 11. It stays.)
    if (lane < N) scol[WALK_SX + lane] = xi;
    __syncwarp();
    return out;
}

// The walk of outer path l = blockIdx.x over `steps` regression steps, s = steps - 1 .. 0 at
// exercise dates date0 + s. In: the states (above; stride doubles per outer path), the
// discount factors discount[k] = e^{-r k dt}, alive[l] (a dead outer path is skipped), the
// cash flows cash_g[l * m + mm] and their dates cash_date_g (absolute date indices), and
// the first step's discounted cash flows y_g (engine_cash_init's). Out, for an outer path
// not flagged: cash_g and cash_date_g after the walk; for every outer path l < c:
// walked[l] (alive and not flagged) and fallback[l] (alive and flagged: a system failed
// the acceptance test, nothing else written for it but counts and reports), and
// *flagged_count += the flagged ones; for every alive outer path: counts[s * c + l] (the
// entering paths of step s) and reports[s * c + l] (residual, method 0, status 0 for a
// solved system; for a system with counts < n nothing). y_g is not written.
#define WALK_BLOCKS_PER_SM 4  // (shared memory allows 4 blocks of WALK_SMEM_BYTES per SM)
extern "C" __global__ void __launch_bounds__(64, WALK_BLOCKS_PER_SM)
walk_american(const double* __restrict__ states, long long stride, long long c, int steps, unsigned date0,
              const double* __restrict__ discount, const unsigned char* __restrict__ alive,
              double* __restrict__ cash_g, unsigned* __restrict__ cash_date_g, const double* __restrict__ y_g,
              unsigned char* __restrict__ walked, unsigned char* __restrict__ fallback, unsigned* __restrict__ flagged_count,
              unsigned* __restrict__ counts, WalkReport* __restrict__ reports,
              double tol, double thr) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned* const sh = (unsigned*)smem;               // M x D high words
    double* const sp = (double*)(sh + SH_WORDS);        // M payoffs
    double* const sy = sp + M;                          // M discounted cash flows
    double* const sg = sy + M;                          // packed [Psi y]^T [Psi y]
    double* const sb = sg + NPK;                        // beta
    double* const scol = sb + 32;                       // the solver's scratch
    unsigned* const stot = (unsigned*)(scol + SCOL);    // warp 1's count, the flag, warp 0's count
    unsigned long long* const mb = (unsigned long long*)(stot + 4);  // the chunks' mbarriers
    double* const sdisc = (double*)(mb + NCH);          // discount[0 .. steps + 2)
    double* const smul = sdisc + WALK_DISC;             // walk_gj's numerators
    // The solving warp: the one whose SM sub-partition (warp slot mod 4) balances the
    // solvers (slot s solves where bit 2 of s equals bit 0), if the block's two warps sit
    // on such a pair; otherwise warp 0. Every thread takes part (no return before).
    const int lane = threadIdx.x & 31;
    int w = threadIdx.x >> 5;
    {
        unsigned wid;
        asm volatile("mov.u32 %0, %%warpid;" : "=r"(wid));
        const bool f = ((wid >> 2) & 1) == (wid & 1);
        const int f1 = __syncthreads_count(w == 1 && f), f0 = __syncthreads_count(w == 0 && f);
        w ^= (f1 > 0 && f0 == 0) ? 1 : 0;
    }
    const long long l = blockIdx.x;
    if (l >= c) return;
    const unsigned* const base = (const unsigned*)(states + l * stride);
    auto block = [&](int s) { return base + (long long)s * (2 * M * D); };

    // The first date's copies before anything else, so that their latency runs beside the
    // loads below (an outer path that turns out dead waits for them before it leaves).
    if (lane == 0) {
        for (int cc = w; cc < NCH; cc += 2) walk_mbar_init(mb + cc);
        for (int cc = w; cc < NCH; cc += 2) walk_issue_chunk(sh, sp, block(steps - 1), cc, mb);
    }
    const bool live = alive[l] != 0;

    // This warp's chunks c = w + 2 j, j < NCW: lane's path 32 c + lane in cash[j], cdate[j]
    // (0 past the last path).
    constexpr int NCW = (NCH + 1) / 2;
    double cash[NCW];
    unsigned cdate[NCW];
#pragma unroll
    for (int j = 0; j < NCW; ++j) {
        const int p = 32 * (w + 2 * j) + lane;
        cash[j] = p < M ? cash_g[l * M + p] : 0.0;
        cdate[j] = p < M ? cash_date_g[l * M + p] : 0u;
        if (p < M) sy[p] = y_g[l * M + p];
    }
    if (threadIdx.x < steps + 2) sdisc[threadIdx.x] = discount[threadIdx.x];
    if (threadIdx.x == 0) stot[1] = 0;
    __syncwarp();
    if (!live) {
        for (int cc = w; cc < NCH; cc += 2) walk_mbar_wait(mb + cc, 0);
        if (threadIdx.x == 0) walked[l] = fallback[l] = 0;
        return;
    }

#ifdef WALK_PROF
    unsigned prof[5] = {0, 0, 0, 0, 0};
#endif
    for (int s = steps - 1; s >= 0; --s) {
        const unsigned date = date0 + (unsigned)s;
        [[maybe_unused]] unsigned pt = WALK_PROF_NOW();
        // The Gram: this warp's chunks, then warp 1's sums join warp 0's in sg.
        unsigned total = 0;
        double acc[WALK_NT][4];
#pragma unroll
        for (int k = 0; k < WALK_NT; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
#pragma unroll 1
        for (int cc = w; cc < NCH; cc += 2) {
            walk_mbar_wait(mb + cc, (steps - 1 - s) & 1);
            __syncwarp();
            WALK_PROF_ADD(0, pt);
            const int p0 = 32 * cc;
            walk_build_chunk(acc, total, sh + p0 * D, sp + p0, sy + p0, min(32, M - p0), lane);
            WALK_PROF_ADD(1, pt);
        }
        if (w == 1) {
            walk_gram_pass(acc, sg, lane, 0, 0.0);
            if (lane == 0) stot[0] = total;
        } else if (lane == 0) {
            stot[2] = total;
        }
        walk_bar_sync();
        WALK_PROF_ADD(2, pt);
        if (s == 0 && w == 1 && lane == 0) {
            // The walk that will most likely start when this one ends (blocks start in
            // order, WALK_BLOCKS_PER_SM per SM): its first date's states and its cash flows
            // into L2, so that its first copies come from L2 (a hint: an outer path that is
            // not next loses nothing but the bandwidth). The states' size and address are
            // multiples of 16 bytes (the host's checks: m d a multiple of 4, m even, aligned
            // blocks); so are the cash flows' and y's (m even) and the dates' where m is a
            // multiple of 4.
            unsigned nsm;
            asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
            const long long ln = l + (long long)WALK_BLOCKS_PER_SM * nsm;
            if (ln < c) {
                // (block()'s address for walk ln: a helper shared by the two moved ptxas's
                // allocation of the whole kernel under NVRTC 13, walk_gj's model by 2%, so
                // they stay apart until that is timed on the GPU.)
                const unsigned* nb0 = (const unsigned*)(states + ln * stride) + (long long)(steps - 1) * (2 * M * D);
                if ((M * D * 4 + M * 8) % 16 == 0) walk_prefetch_l2(nb0, M * D * 4 + M * 8);
                if ((M * 8) % 16 == 0) {
                    walk_prefetch_l2(cash_g + ln * M, M * 8);
                    walk_prefetch_l2(y_g + ln * M, M * 8);
                }
                if ((M * 4) % 16 == 0) walk_prefetch_l2(cash_date_g + ln * M, M * 4);
            }
        }
        if (w == 1 && total + stot[2] >= (unsigned)N) {
            // A's norms for the solver's acceptance test, beside its elimination (sg
            // holds the scaled sums once warp 0's join pass is done: barrier 2).
            asm volatile("bar.sync 2, 64;" ::: "memory");
            walk_matrix_norms(sg, scol, lane);
            asm volatile("bar.arrive 1, 64;" ::: "memory");
        }
        if (w == 0) {
            total += stot[0];
            walk_gram_pass(acc, sg, lane, 3, walk_inv_counts.v[total]);
#ifdef WALK_PROF
            __syncwarp();
            if (lane == 0) atomicAdd(&g_walk_prof_solve[6], (unsigned long long)((unsigned)clock() - pt));
#endif
            const bool selected = total >= (unsigned)N;
            if (selected) asm volatile("bar.arrive 2, 64;" ::: "memory");
            __syncwarp();
            bool ok = false;
            double residual = 0.0, mean = 0.0;
            if (selected) {
                const WalkSolve r = walk_solve(sg, scol, smul, tol, thr, true, lane);
                ok = r.accepted;
                residual = r.residual;
            } else if (total > 0 && lane == 0) {
                // Too few paths: the fallback mean, summed in path order (engine.cu).
                double sum = 0.0;
                for (int p = 0; p < M; ++p)
                    if (!WALK_ITM || sp[p] > 0.0) sum = sum + sy[p];
                mean = sum / (double)total;
            }
            mean = __shfl_sync(0xffffffffu, mean, 0);
            if (lane < N) sb[lane] = ok ? scol[WALK_SX + lane] : (lane == 0 ? mean : 0.0);
            if (lane == 0) {
                counts[(long long)s * c + l] = total;
                if (selected) reports[(long long)s * c + l] = WalkReport{residual, 0u, ok ? 0u : 2u};
                if (selected && !ok) stot[1] = 1;
            }
        }
        walk_bar_sync();
        WALK_PROF_ADD(3, pt);

        // The exercise from the shared states (engine_exercises, engine_exercise_store),
        // chunks three at a time, then their next copies.
        double bt[N];
#pragma unroll
        for (int k = 0; k < N; ++k) bt[k] = sb[k];
        const unsigned* const nxt = s > 0 ? block(s - 1) : base;
// One path's decision and its discounted cash flow (this warp's chunk J, path P,
// continuation CONT).
#define WALK_EX_ONE(J, P, CONT)                                        \
    if ((P) < M) {                                                     \
        const double pv = sp[P];                                       \
        if (pv > 0.0 && pv >= (CONT)) {                                \
            cash[J] = pv;                                              \
            cdate[J] = date;                                           \
        }                                                              \
        if (s > 0) sy[P] = cash[J] * sdisc[cdate[J] - (date - 1u)];    \
    }
// This warp's chunks JA, JB, JC (w + 2 J; JB, JC: -1 for none) together: the
// continuations, the decisions, then the chunks' copies of the next date. One copy of the
// code serves both warps; a chunk past the last (w = 1, NCH odd) has no path (P >= M).
#define WALK_EXN(JA, JB, JC)                                                                   \
    {                                                                                          \
        constexpr int JA_ = (JA), JB_ = (JB), JC_ = (JC);                                      \
        constexpr int JBI = JB_ < 0 ? JA_ : JB_, JCI = JC_ < 0 ? JA_ : JC_;                     \
        const int ca = w + 2 * JA_, cb = w + 2 * JBI, cc3 = w + 2 * JCI;                      \
        const int pa = 32 * ca + lane, pb = 32 * cb + lane, pc = 32 * cc3 + lane;              \
        const unsigned* ra = sh + min(pa, M - 1) * D;                                          \
        const unsigned* rb = sh + min(pb, M - 1) * D;                                          \
        const unsigned* rc = sh + min(pc, M - 1) * D;                                          \
        double conta = 0.0 + 1.0 * bt[0], contb = conta, contc = conta;                        \
        _Pragma("unroll") for (int k = 1; k < N; ++k) {                                        \
            conta = conta + walk_feature(ra, k) * bt[k];                                       \
            if (JB_ >= 0) contb = contb + walk_feature(rb, k) * bt[k];                         \
            if (JC_ >= 0) contc = contc + walk_feature(rc, k) * bt[k];                         \
        }                                                                                      \
        WALK_EX_ONE(JA_, pa, conta)                                                            \
        if constexpr (JB_ >= 0) { WALK_EX_ONE(JBI, pb, contb) }                                \
        if constexpr (JC_ >= 0) { WALK_EX_ONE(JCI, pc, contc) }                                \
        __syncwarp();                                                                          \
        if (s > 0 && lane == 0) {                                                              \
            if (ca < NCH) walk_issue_chunk(sh, sp, nxt, ca, mb);                               \
            if (JB_ >= 0 && cb < NCH) walk_issue_chunk(sh, sp, nxt, cb, mb);                   \
            if (JC_ >= 0 && cc3 < NCH) walk_issue_chunk(sh, sp, nxt, cc3, mb);                 \
        }                                                                                      \
    }
// This warp's chunks (at most 5) in groups of three: the same groups as chunk by chunk.
#define WALK_J(J) ((J) < NCW ? (J) : -1)
        WALK_EXN(0, WALK_J(1), WALK_J(2))
        if constexpr (NCW > 3) WALK_EXN(3, WALK_J(4), -1)
#undef WALK_J
#undef WALK_EXN
#undef WALK_EX_ONE
        WALK_PROF_ADD(4, pt);
        // No barrier at the step's end (fifty-second session): each warp goes on to its next
        // build. What the next step writes first is this warp's own (its chunks' copies and
        // y) or was last read before the barrier after the solve (sg, which warp 1's next
        // sums overwrite; stot[0] and stot[2]); beta (sb) is written again only after the
        // next join barrier, which both warps reach after their exercise.
    }
#ifdef WALK_PROF
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < 5; ++i) atomicAdd(&g_walk_prof[w][i], (unsigned long long)prof[i]);
        atomicAdd(&g_walk_prof[w][6], (unsigned long long)steps);
    }
#endif
    const bool flagged = stot[1] != 0;
    if (!flagged) {
#pragma unroll
        for (int j = 0; j < NCW; ++j) {
            const int p = 32 * (w + 2 * j) + lane;
            if (p < M) {
                cash_g[l * M + p] = cash[j];
                cash_date_g[l * M + p] = cdate[j];
            }
        }
    }
    if (threadIdx.x == 0) {
        walked[l] = !flagged;
        fallback[l] = flagged;
        if (flagged) atomicAdd(flagged_count, 1u);
    }
}

// Test entry: the solver on a batch of systems in the engine's layout (A: n x n
// column-major, lower triangle read; b: n), one warp per system: x (n per system) and
// out[4 * s ..] = {accepted, residual, 0, 0}. For the bitwise comparison with the CPU
// mirror (kernels/src/gj2.rs).
extern "C" __global__ void __launch_bounds__(32) walk_solve_batch(const double* __restrict__ a,
                                                                  const double* __restrict__ b, long long batch,
                                                                  double tol, double thr, double* __restrict__ x,
                                                                  double* __restrict__ out) {
    __shared__ double sg[NPK];
    __shared__ double scol[SCOL];
    __shared__ double smul[WALK_SMUL];
    const long long s = blockIdx.x;
    const int lane = threadIdx.x;
    if (s >= batch) return;
    for (int e = lane; e < N * (N + 1) / 2; e += 32) {
        int r = 0;
        while ((r + 1) * (r + 2) / 2 <= e) ++r;
        const int cc = e - r * (r + 1) / 2;
        sg[e] = a[s * N * N + (long long)cc * N + r];
    }
    if (lane < N) sg[N * (N + 1) / 2 + lane] = b[s * N + lane];
    __syncwarp();
    walk_matrix_norms(sg, scol, lane);
    const WalkSolve r = walk_solve(sg, scol, smul, tol, thr, false, lane);
    if (lane < N) x[s * N + lane] = scol[WALK_SX + lane];
    if (lane == 0) {
        out[4 * s] = r.accepted ? 1.0 : 0.0;
        out[4 * s + 1] = r.residual;
        out[4 * s + 2] = 0.0;
        out[4 * s + 3] = 0.0;
    }
}
