// Batched A = L D L^T factorization and solve of small symmetric positive definite
// systems (Abbas-Turki & Graillat 2016, Section 3), with the residual and per-system
// status computed on the device.
//
// Layout (kernels/src/batch/mod.rs): matrix i is column-major n x n at A + i*n*n, only
// its lower triangle is read; b_i at B + i*n; x_i written at X + i*n; one GpuReport
// per system.
//
// Two organisations:
//  * ldlt_simd (NSTAR undefined): one thread per system, the matrix packed in shared
//    memory (interleaved between the threads of the block so that the threads'
//    accesses fall in different banks). The paper's SIMD version.
//  * ldlt_group (NSTAR defined): NSTAR communicating threads per system, several
//    systems per warp (Algorithm 1). NSTAR = n is the paper's collaborative version,
//    NSTAR < n its hybrid version. Thread t owns rows t, t + NSTAR, ... and keeps them
//    in registers (row i: L_{i,0..i-1} once computed); the factorization goes column
//    after column, j = 0..n-1: every owned row i >= j computes
//        t_ij = A_ij - sum_{k<j} L_ik W_jk,   W_jk = L_jk D_k,
//    (the sum in two interleaved chains, the next column's sum overlapping this one's
//    pivot (LDLT_LOOKAHEAD), fused multiply-adds with LDLT_FMA), the t_ij are written to shared memory as
//    row-major W (row j of W is then read by broadcast for column j+1 onwards),
//    D_j = t_jj, L_ij = t_ij * (1 / D_j), the reciprocal correctly rounded without a
//    branch (rcp_rn_fast; pivots outside its range redo the factorization exactly).
//    Then L y = b (forward, y_k broadcast), D L^T x = y (backward, reading the rows of
//    W, whose row k holds (D L^T)_{i,k} = W_ki), and the residual.
//    The blocks are persistent: each group loops over systems. Shared memory holds two
//    buffers of max(packed A, W) entries that swap roles every system: the current A
//    in one, W in the other; once the back substitution is done W is dead and the next
//    system's A and b are copied into its buffer with cp.async while the residual of
//    the current one is computed and written (the other resident warps hide the rest
//    of the latency). This costs a third less shared memory than separate double
//    buffers of A plus W, which is what limited the resident warps.

#ifdef NSTAR

// W rows padded to VEC entries of 16 bytes in all (2 doubles, 4 floats).
constexpr int VEC = 16 / (int)sizeof(real);
#ifndef VEC_OK
#define VEC_OK 0
#endif
__host__ __device__ constexpr int round_vec(int v) { return (v + VEC - 1) / VEC * VEC; }
// Start of row j of W: the sum of the padded lengths round_vec(j' + 1), j' < j. Rows
// come in runs of VEC with equal padded length, hence the closed form
// VEC^2 full (full + 1) / 2 + rem VEC (full + 1), full = j / VEC, rem = j % VEC.
__host__ __device__ constexpr int w_row(int j) {
    return VEC * VEC * (j / VEC) * (j / VEC + 1) / 2 + (j % VEC) * VEC * (j / VEC + 1);
}
// LDLT_CANDIDATE 1 turns on the set measured faster in round 5 (benches/RESULTS.md:
// f64 n = 30 221 -> 236-238 M systems/s, n = 32 218 -> 272, n = 48 51 -> 63): layout 1
// of W below where its argument holds, and LDLT_RD_END, LDLT_Y_PRED, LDLT_X_SHARED.
// On since the final verification of this round, where every GPU solver test passed
// with it (the escalating tests had not finished in round 5's own device call).
#ifndef LDLT_CANDIDATE
#define LDLT_CANDIDATE 1
#endif
// Layout of W (LDLT_WLAYOUT):
//  0: row-major, row j at w_row(j), entry (j, k) at w_row(j) + k. The store of column
//     J (one entry per row i >= J, all rows at once) falls into banks w_row(i) + J
//     mod 32 words, which collide (3.1x the ideal wavefronts in f64 n = 30, n* = 16).
//  1 (f64 only): pairs of columns, column-major: columns 2p, 2p + 1 hold rows
//     i >= 2p at w_pair(p) + 2 (i - 2p), the two entries of a row next to each other
//     and swapped when bit 3 of i is set:
//         (i, k) at w_pair(k / 2) + 2 (i - 2 (k / 2)) + ((k & 1) ^ ((i >> 3) & 1)).
//     The store of column J by 16 consecutive rows 16 b + t (one half-warp) then
//     touches 16 different 8-byte bank pairs (t and t + 8 differ in the swap bit),
//     conflict-free; row J's entries 2p, 2p + 1 are still one 16-byte aligned pair
//     (read by one 16-byte broadcast, swapped back at compile time). Same size as 0.
//     The back substitution's reads of a row of W (entries (k, i), one per row i)
//     become 2-way conflicts where they had none, fewer wavefronts than the stores
//     save. The argument needs the 16 lanes of a half-warp to own 16 consecutive rows
//     16 b .. 16 b + 15 of one system: n* a multiple of 16, or n* >= n (one row per
//     thread); LDLT_CANDIDATE takes layout 1 there in f64 and layout 0 elsewhere
//     (any layout gives the same results: the same values are stored and read).
#ifndef LDLT_WLAYOUT
#define LDLT_WLAYOUT (LDLT_CANDIDATE && REAL_F64 && (NSTAR % 16 == 0 || NSTAR >= N))
#endif
#if LDLT_WLAYOUT == 1
static_assert(REAL_F64 && VEC == 2, "LDLT_WLAYOUT 1 is for f64");
__host__ __device__ constexpr int w_pair(int p) { return 2 * p * (N - p + 1); }
__host__ __device__ constexpr int w_swap(int i) { return (i >> 3) & 1; }
__host__ __device__ constexpr int w_at(int i, int k) {
    return w_pair(k >> 1) + 2 * (i - (k & ~1)) + ((k & 1) ^ w_swap(i));
}
// Entry (i, J) = store base of row i for the parity of J + w_store_off(J).
__host__ __device__ constexpr int w_store_base(int i, int parity) { return 2 * i + (parity ^ w_swap(i)); }
__host__ __device__ constexpr int w_store_off(int j) { return w_pair(j >> 1) - 2 * (j & ~1); }
// Entry (k, i), i < k (back substitution, row i reads row k of W):
// w_bs_base(i, w_swap(k)) + 2 k.
__host__ __device__ constexpr int w_bs_base(int i, int sw) {
    return w_pair(i >> 1) - 2 * (i & ~1) + ((i & 1) ^ sw);
}
// The 16-byte pair of row j holding entries k0, k0 + 1 (k0 even), and whether they
// are swapped there.
__host__ __device__ constexpr int w_vec_at(int j, int k0) { return w_pair(k0 >> 1) + 2 * (j - k0); }
__host__ __device__ constexpr bool w_vec_swapped(int j) { return w_swap(j) != 0; }
constexpr int W_SIZE = w_pair((N + 1) / 2);
static_assert(W_SIZE == w_row(N), "both layouts take the same space (tuning::ldlt_group_elems)");
#else
__host__ __device__ constexpr int w_at(int i, int k) { return w_row(i) + k; }
__host__ __device__ constexpr int w_store_base(int i, int) { return w_row(i); }
__host__ __device__ constexpr int w_store_off(int j) { return j; }
__host__ __device__ constexpr int w_vec_at(int j, int k0) { return w_row(j) + k0; }
__host__ __device__ constexpr bool w_vec_swapped(int) { return false; }
constexpr int W_SIZE = w_row(N);
#endif
// One of the two buffers (A packed, or W), a multiple of VEC entries so that both
// start 16-byte aligned. Mirrored by tuning::ldlt_group_elems.
constexpr int BUF = round_vec(N * (N + 1) / 2) > W_SIZE ? round_vec(N * (N + 1) / 2) : W_SIZE;
__device__ __forceinline__ void load_vec(real* w, const real* p) {
#if VEC_OK
#if REAL_F64
    double2 v = *reinterpret_cast<const double2*>(p);
    w[0] = v.x; w[1] = v.y;
#else
    float4 v = *reinterpret_cast<const float4*>(p);
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
#endif
#else
#pragma unroll
    for (int e = 0; e < VEC; ++e) w[e] = p[e];
#endif
}

// Resident blocks of 128 threads the compiler must allow (register cap 65536 /
// (128 LDLT_MIN_BLOCKS) = 168 for 3, a third resident warp per scheduler); 1 = no cap.
// History (H100, benches/RESULTS.md): round 2 put the cap on f64 rows of at most
// LDLT_CAP_ROW_REGS registers (n = 30 n* = 16 184 -> 191 M/s); round 4 measured it
// neutral (221.4 / 221.8). Round 6 ("L D L^T register cap re-measured"), after round 5
// freed registers: without the cap f64 n = 30 n* = 16 runs spill-free at 254 registers
// and 8 warps/SM at 279-281 M/s against 239 with it (96 B of spills); over n = 10..32
// the uncapped kernel is the faster or within 3% at every measured (n, n*). So the cap
// is kept only where it was never re-measured, f64 n <= 8.
#ifndef LDLT_CAP_ROW_REGS
#define LDLT_CAP_ROW_REGS 92
#endif
// Registers of the rows of one thread (tuning::ldlt_row_registers).
__host__ __device__ constexpr int row_regs(int s) {
    return s >= R ? 0 : (N < (s + 1) * NSTAR ? N : (s + 1) * NSTAR) * (int)sizeof(real) / 4 + row_regs(s + 1);
}
#ifndef LDLT_MIN_BLOCKS
#define LDLT_MIN_BLOCKS (REAL_F64 && N <= 8 && row_regs(0) <= LDLT_CAP_ROW_REGS ? 3 : 1)
#endif
#if REAL_F64
#define LDLT_EPS 2.220446049250313e-16
#else
#define LDLT_EPS 1.1920928955078125e-07f
#endif

// Variants of the factorization (compile-time, for measurements; the defaults are
// the measured best, benches/RESULTS.md round 4):
//  LDLT_FMA    1: the column dot products and the substitutions accumulate with fused
//              multiply-adds (one rounding per term instead of two; results differ
//              from the unfused kernel in the last bits), 0: separate * and -.
//  LDLT_LOOKAHEAD (see ldlt_factor_rows).
#ifndef LDLT_FMA
#define LDLT_FMA 1
#endif
// LDLT_RD_END 1: the owned rows' 1 / D_i are computed once after the factorization
// (from W's diagonal, same rcp_rn_fast, same value) instead of a select per column.
#ifndef LDLT_RD_END
#define LDLT_RD_END LDLT_CANDIDATE
#endif
// LDLT_Y_PRED 1: the forward substitution updates only the rows i > k (a predicate)
// instead of updating every row and saving y_k by a select when it is broadcast.
#ifndef LDLT_Y_PRED
#define LDLT_Y_PRED LDLT_CANDIDATE
#endif
// LDLT_X_SHARED 1: after the back substitution each thread reads its rows' x_i from
// the shared vector x (written there for the residual anyway) instead of a select
// per step.
#ifndef LDLT_X_SHARED
#define LDLT_X_SHARED LDLT_CANDIDATE
#endif
// acc - p * q (LDLT_FMA: one rounding) and acc + p * q.
__device__ __forceinline__ real sub_mul(real acc, real p, real q) {
#if LDLT_FMA
    return fma(-p, q, acc);
#else
    return acc - p * q;
#endif
}
__device__ __forceinline__ real add_mul(real acc, real p, real q) {
#if LDLT_FMA
    return fma(p, q, acc);
#else
    return acc + p * q;
#endif
}

// Correctly rounded 1 / d without the out-of-line slow path of IEEE division
// (rcp_rn_fast_f64 / _f32 of rcp.cu, prepended to this file), for pivots d in
// [2^-1000, 2^1001) (f64) or [2^-100, 2^101) (f32): the caller checks the range once per
// system, from the integer keys below, and redoes the factorization with true divisions
// otherwise. The key of a pivot is its high word (f64) or its bits (f32): for d >= 0 it
// grows with d, it is negative for d < 0 or -0, and at least RCP_KEY_INF for inf and NaN.
#if REAL_F64
#define RCP_KEY_LO (23 << 20)            // hi(2^-1000)
#define RCP_KEY_HI (2024 << 20)          // hi(2^1001)
#define RCP_KEY_INF 0x7ff00000
__device__ __forceinline__ int rcp_key(double d) { return __double2hiint(d); }
__device__ __forceinline__ double rcp_rn_fast(double d) { return rcp_rn_fast_f64(d); }
#else
#define RCP_KEY_LO (27 << 23)            // bits of 2^-100
#define RCP_KEY_HI (228 << 23)           // bits of 2^101
#define RCP_KEY_INF 0x7f800000
__device__ __forceinline__ int rcp_key(float d) { return __float_as_int(d); }
__device__ __forceinline__ float rcp_rn_fast(float d) { return rcp_rn_fast_f32(d); }
#endif

// The residual pass of the group kernel: the relative residual of `group_residual`
// (same arithmetic), the finiteness of A folded in (a row sum of |A| that is not finite
// sends its row through an exact per-entry check; every lower-triangle entry lies in
// some row), and with ESC the equilibrated solution growth of `residual_check_warp`
// (cuda/stedc.cu, kernels/src/batch/residual.rs) in its arithmetic, and the largest
// A_jj / D_jj of the system (v.q of each thread reduced; REAL_MAX if some a_jj <= 0),
// the inverse of the pivot ratio min_j D_jj / A_jj of `solve_one`.
// ssc: N reals of shared scratch (the equilibration). Sets *bad if A is not finite.
struct RowVals {
    real b[R];
    real x[R];
    real q;  // ESC: max over the owned rows of A_ii * (1 / D_ii); 0 without rows
};
struct ResidualOut {
    double res;
    double growth;
    real inv_ratio;
    bool bad;
};
template <bool ESC>
__device__ __forceinline__ ResidualOut ldlt_residual(const real* sA, const real* sx, real* ssc, const RowVals v,
                                                     const Group& g, real* scratch, int* iscratch) {
    const real* b = v.b;
    const real* x = v.x;
    ResidualOut out;
    out.bad = false;
    out.growth = 0;
    out.inv_ratio = 0;
    real sr_own[R];
#pragma unroll
    for (int s = 0; s < R; ++s) sr_own[s] = 1;
    bool nonpos = false;
    if (ESC) {
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int i = g.t + s * NSTAR;
            if (g.t < NSTAR && i < N) {
                const real arr = sA[packed_col(i)];
                const real dr = fabs(arr);
                if (!(arr > (real)0)) nonpos = true;
                sr_own[s] = dr > (real)0 ? (real)1 / sqrt(dr) : (real)1;
                ssc[i] = sr_own[s];
            }
        }
        group_sync();
    }
    real r_max = 0, a_max = 0, x_max = 0, b_max = 0;
    real sa_max = 0, sx_max = 0, sb_max = 0;
    bool nan_row = false;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = g.t + s * NSTAR;
        if (g.t < NSTAR && i < N) {
            real acc = 0, row = 0, srow = 0;
            const real sr = sr_own[s];
            int oi = i * N - (i * (i - 1)) / 2;  // packed_col(i)
#pragma unroll
            for (int c = 0; c < N; ++c) {
                real aic = (i >= c) ? sA[packed_col(c) + i - c] : sA[oi + c - i];
                acc += aic * sx[c];
                row += fabs(aic);
                if (ESC) srow += fabs(sr * aic * ssc[c]);
            }
            if (!finite(row)) {
                // Rare: a non-finite entry, or a sum of |A| that overflowed.
#pragma unroll
                for (int c = 0; c < N; ++c) {
                    real aic = (i >= c) ? sA[packed_col(c) + i - c] : sA[oi + c - i];
                    if (!finite(aic)) out.bad = true;
                }
            }
            real ri = fabs(b[s] - acc);
            if (isnan(ri) || !finite(x[s])) nan_row = true;
            r_max = fmax(r_max, ri);
            a_max = fmax(a_max, row);
            x_max = fmax(x_max, fabs(x[s]));
            b_max = fmax(b_max, fabs(b[s]));
            if (ESC) {
                sa_max = fmax(sa_max, srow);
                sx_max = fmax(sx_max, fabs(x[s] / sr));
                sb_max = fmax(sb_max, fabs(sr * b[s]));
            }
        }
    }
    bool any_nan = group_any(nan_row, g, iscratch);
    group_max4(r_max, a_max, x_max, b_max, scratch);
    if (ESC) {
        real q = nonpos ? (real)REAL_MAX : v.q;
        group_max4(sa_max, sx_max, sb_max, q, scratch);
        out.inv_ratio = q;
        const double sax = (double)sa_max * (double)sx_max;
        out.growth = any_nan ? __longlong_as_double(0x7ff8000000000000ULL) : (sax == 0.0 ? 0.0 : sax / (double)sb_max);
    }
    double den = (double)a_max * (double)x_max + (double)b_max;
    out.res = any_nan ? __longlong_as_double(0x7ff8000000000000ULL) : (den == 0.0 ? 0.0 : (double)r_max / den);
    return out;
}
// The escalation variant out of line: it needs registers only after the solve, and
// inlined it made ptxas spill across the factorization. Arguments by value so that
// the caller's row arrays stay in registers.
__device__ __noinline__ ResidualOut ldlt_residual_esc(const real* sA, const real* sx, real* ssc, const RowVals v,
                                                      const Group g, real* scratch, int* iscratch) {
    return ldlt_residual<true>(sA, sx, ssc, v, g, scratch, iscratch);
}

// a[s][k] = A_ik, k <= i, of the rows i = t + s NSTAR this thread owns (0 elsewhere;
// the identity for an inactive system), from the packed lower triangle sA.
__device__ __forceinline__ void ldlt_load_rows(real (&a)[R][N], const real* sA, const Group& g, bool active) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = g.t + s * NSTAR;
        bool own = g.t < NSTAR && i < N;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            if (k <= row_max(s)) {
                a[s][k] = (own && k <= i) ? (active ? sA[packed_col(k) + i - k] : (real)(k == i ? 1 : 0)) : (real)0;
            }
        }
    }
}

// Left-looking factorization of the group's system, column j = 0..N-1: every owned
// row i >= j computes t_ij = A_ij - sum_{k<j} L_ik W_jk (W_jk = t_jk = L_jk D_k),
// writes it to row i of W (shared), D_j = t_jj, L_ij = t_ij * (1 / D_j) overwrites
// a[s][j]; rd[s] = 1 / D_i for the owned rows. The sum is
//     p_ij = (A_ij - sum_{k < j-1, k even} L_ik W_jk) - sum_{k < j-1, k odd} L_ik W_jk,
//     t_ij = p_ij - L_{i,j-1} W_{j,j-1}
// (two interleaved chains for instruction-level parallelism). With LDLT_LOOKAHEAD the
// p_{i,j+1} of the next column are computed during column j: every term they need
// was written to W before the previous column's synchronisation, so the loads and
// multiply-adds of the bulk of the next column overlap the dependency chain of this
// one (t_ij -> shuffle of D_j -> reciprocal -> L_ij), and only the last term waits
// for the synchronisation. Without it, each column loads its W row after the
// synchronisation (same arithmetic).
// 1 / D_j by rcp_rn_fast; the return value says whether some pivot was outside its
// range (then the caller redoes the factorization with ldlt_factor_exact, which also
// decides not_pd). Sets not_pd if some pivot is < 0, -0 or not finite.
#ifndef LDLT_LOOKAHEAD
#define LDLT_LOOKAHEAD 1
#endif
// p = (A_ij - even terms) - odd terms over k < KEND of the row slot S, W row J.
template <int S, int KEND, int J>
__device__ __forceinline__ real ldlt_partial(const real (&a)[R][N], const real* sW, real aij) {
    real acc = aij, acc2 = 0;
#pragma unroll
    for (int k0 = 0; k0 < KEND; k0 += VEC) {
        real w[VEC];
        if (k0 + VEC <= KEND) {
            load_vec(w, sW + w_vec_at(J, k0));
            if (w_vec_swapped(J)) {
                const real w0 = w[0];
                w[0] = w[1];
                w[1] = w0;
            }
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) w[e] = k0 + e < KEND ? sW[w_at(J, k0 + e)] : (real)0;
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const int k = k0 + e;
            if (k < KEND) {
                if (k & 1) acc2 = add_mul(acc2, a[S][k], w[e]);
                else acc = sub_mul(acc, a[S][k], w[e]);
            }
        }
    }
    return acc - acc2;
}
template <int S, int J>
struct LdltPartials {
    // p of column J for slot S (and the following slots).
    static __device__ __forceinline__ void run(real (&p)[R], const real (&a)[R][N], const real* sW) {
        if (row_max(S) >= J) p[S] = ldlt_partial<S, (J >= 1 ? J - 1 : 0), J>(a, sW, a[S][J]);
        LdltPartials<S + 1, J>::run(p, a, sW);
    }
};
template <int J>
struct LdltPartials<R, J> {
    static __device__ __forceinline__ void run(real (&)[R], const real (&)[R][N], const real*) {}
};
template <int J>
struct LdltColumns {
    // Columns J..N-1; p holds the partial sums of column J.
    static __device__ __forceinline__ void run(real (&a)[R][N], real (&rd)[R], real (&p)[R], real* sW,
                                               const int (&row)[R], real* const (&wrow)[2][R], const Group& g,
                                               int& kmin, int& kmax) {
#if !LDLT_LOOKAHEAD
        LdltPartials<0, J>::run(p, a, sW);
#endif
        real t[R];
        const real wl = J >= 1 ? sW[w_at(J, J >= 1 ? J - 1 : 0)] : (real)0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (row_max(s) >= J) {
                t[s] = J >= 1 ? sub_mul(p[s], a[s][J >= 1 ? J - 1 : 0], wl) : p[s];
                if (row[s] >= J) wrow[J & 1][s][w_store_off(J)] = t[s];
            }
        }
#if NSTAR <= 32
        const real d = group_bcast(t[J / NSTAR], g, J % NSTAR);
#else
        group_sync();
        const real d = sW[w_at(J, J)];
#endif
        kmin = min(kmin, rcp_key(d));
        kmax = max(kmax, rcp_key(d));
        const real r = rcp_rn_fast(d);
#if LDLT_LOOKAHEAD
        if (J + 1 < N) LdltPartials<0, (J + 1 < N ? J + 1 : N - 1)>::run(p, a, sW);
#endif
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (row_max(s) >= J) {
                // Rows i < J never read a[s][J] again; row J keeps 1 / D_J in rd.
                a[s][J] = t[s] * r;
#if !LDLT_RD_END
                if (s == J / NSTAR && g.t == J % NSTAR) rd[s] = r;
#endif
            }
        }
        group_sync();
        LdltColumns<J + 1>::run(a, rd, p, sW, row, wrow, g, kmin, kmax);
    }
};
template <>
struct LdltColumns<N> {
    static __device__ __forceinline__ void run(real (&)[R][N], real (&)[R], real (&)[R], real*, const int (&)[R],
                                               real* const (&)[2][R], const Group&, int&, int&) {}
};

__device__ __forceinline__ bool ldlt_factor_rows(real (&a)[R][N], real (&rd)[R], real* sW, const Group& g,
                                                 bool& not_pd) {
    // Row index of each slot, -1 where the thread owns no row; W store addresses
    // (entry (i, J) at wrow[J & 1][s] + w_store_off(J)).
    int row[R];
    real* wrow[2][R];
    real p[R];
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int i = g.t + s * NSTAR;
        row[s] = (g.t < NSTAR && i < N) ? i : -1;
        wrow[0][s] = sW + w_store_base(i < N ? i : N - 1, 0);
        wrow[1][s] = sW + w_store_base(i < N ? i : N - 1, 1);
        rd[s] = 0;
        p[s] = a[s][0];
    }
    // Smallest and largest pivot key: the range test of rcp_rn_fast and the pivot test.
    int kmin = RCP_KEY_INF, kmax = 0;
    LdltColumns<0>::run(a, rd, p, sW, row, wrow, g, kmin, kmax);
#if LDLT_RD_END
    // 1 / D_i of the owned rows from the diagonal of W (the value each column
    // broadcast), by the same rcp_rn_fast: no per-column select.
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int i = g.t + s * NSTAR;
        rd[s] = rcp_rn_fast(sW[w_at(i < N ? i : N - 1, i < N ? i : N - 1)]);
    }
#endif
    // A negative key is a pivot < 0 (or -0), a key >= RCP_KEY_INF one that is not
    // finite: not positive definite, whatever the other pivots. Otherwise every pivot in
    // range means every 1 / D_j above was exact; anything else (a +0, subnormal, tiny or
    // huge pivot) is settled by the exact redo, which also decides positive definiteness.
    not_pd = kmin < 0 || kmax >= RCP_KEY_INF;
    return !not_pd && (kmin < RCP_KEY_LO || kmax >= RCP_KEY_HI);
}

// The factorization of ldlt_factor_rows by one thread, with IEEE division for 1 / D_j
// and otherwise the same operations in the same order (so the same W and 1 / D_j
// wherever rcp_rn_fast was in range): W into sW, 1 / D_j into sr[j]. Returns whether
// some pivot is <= 0 or not finite. Slow (O(n^3) on one thread); only for systems
// with a pivot key outside [RCP_KEY_LO, RCP_KEY_HI) that are not already known to be
// indefinite.
__device__ __noinline__ bool ldlt_factor_exact(const real* sA, real* sW, real* sr) {
    bool not_pd = false;
#pragma unroll 1
    for (int j = 0; j < N; ++j) {
#pragma unroll 1
        for (int i = j; i < N; ++i) {
            real acc = sA[packed_col(j) + i - j], acc2 = 0;
#pragma unroll 1
            for (int k = 0; k + 1 < j; ++k) {
                const real l = sW[w_at(i, k)] * sr[k];
                if (k & 1) acc2 = add_mul(acc2, l, sW[w_at(j, k)]);
                else acc = sub_mul(acc, l, sW[w_at(j, k)]);
            }
            real t = acc - acc2;
            if (j >= 1) t = sub_mul(t, sW[w_at(i, j - 1)] * sr[j - 1], sW[w_at(j, j - 1)]);
            sW[w_at(i, j)] = t;
        }
        const real d = sW[w_at(j, j)];
        not_pd |= !(d > (real)0 && d <= REAL_MAX);
        sr[j] = (real)1 / d;
    }
    return not_pd;
}

// After ldlt_factor_exact: a[s][k] = L_ik = W_ik * (1 / D_k) for k < i (what
// ldlt_factor_rows leaves there; the entries k >= i are never read), rd[s] = 1 / D_i.
__device__ __forceinline__ void ldlt_reload_rows(real (&a)[R][N], real (&rd)[R], const real* sW, const real* sr,
                                                 const Group& g) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
        const int i = g.t + s * NSTAR;
        const bool own = g.t < NSTAR && i < N;
        const int ic = i < N ? i : N - 1;
        rd[s] = own ? sr[ic] : (real)0;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            if (k <= row_max(s)) a[s][k] = (own && k < i) ? sW[w_at(ic, LDLT_WLAYOUT == 1 && k > ic ? ic : k)] * sr[k] : (real)0;
        }
    }
}

// LDLT_MAXNREG: a register cap of its own instead (__maxnreg__; the launch then picks
// the block size that fits the most warps, e.g. 10 per SM at 200 registers).
#ifdef LDLT_MAXNREG
extern "C" __global__ void __maxnreg__(LDLT_MAXNREG)
#else
extern "C" __global__ void __launch_bounds__(NSTAR > 32 ? 64 : 128, NSTAR > 32 ? 1 : LDLT_MIN_BLOCKS)
#endif
ENTRY(ldlt_group)(const real* __restrict__ A, const real* __restrict__ B, real* __restrict__ X,
                  GpuReport* __restrict__ rep, long long batch, double tol, double thr,
                  unsigned int* __restrict__ defer, unsigned int* __restrict__ counters) {
    // Escalating strategy (defer != null): decide here which systems L D L^T settles.
    const bool esc = defer != nullptr;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ real red_scratch[8];
    __shared__ int iscratch[1];
    Group g = make_group();
    // Shared memory of the group: two buffers of BUF entries (one holds the current A,
    // packed lower triangle, the other W, row-major with rows padded to VEC entries
    // (16 bytes, so that a row is read by 16-byte broadcasts); they swap every
    // system), two vectors and two buffers of b. SYS_STRIDE is a multiple of VEC when
    // VEC_OK (checked on the host), so every W row is 16-byte aligned.
    real* sbase = reinterpret_cast<real*>(smem_raw) + (long long)g.index * SYS_STRIDE;
    real* sx = sbase + 2 * BUF;
    real* sy = sx + N;
    real* sB0 = sy + N;  // two buffers of N
    // Persistent loop over tiles of systems (one tile = the systems of one block); the
    // loop condition depends on the block only, so the compiler sees it as uniform.
#if NSTAR > 32
    const long long spb = 1;
#else
    const long long spb = (long long)(blockDim.x >> 5) * SPW;
#endif
    const long long stride = (long long)gridDim.x * spb;

    prefetch_system(A + (g.sys < batch ? g.sys : 0) * (N * N), B + (g.sys < batch ? g.sys : 0) * N, sbase, sB0, g,
                    g.sys < batch);
    async_copy_commit();
#pragma unroll 1
    for (long long tile = blockIdx.x, it = 0; tile * spb < batch; tile += gridDim.x, ++it, g.sys += stride) {
        const int buf = it & 1;
        const long long next = g.sys + stride;
        async_copy_wait<0>();
        group_sync();
        const real* sA = sbase + buf * BUF;
        real* sW = sbase + (buf ^ 1) * BUF;
        const real* sB = sB0 + buf * N;
        const bool active = g.sys < batch;
        const long long sys = active ? g.sys : 0;

        // Rows into registers: a[s][k] = A_ik, k <= i (the identity for an inactive
        // system), checking that b is finite (A: in the residual pass).
        bool bad = false;
        real a[R][N];
        real b[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int i = g.t + s * NSTAR;
            bool own = g.t < NSTAR && i < N;
            b[s] = (own && active) ? sB[i] : (real)0;
            bad |= !finite(b[s]);
        }
        ldlt_load_rows(a, sA, g, active);

        // Factorization, column after column, with the branch-free reciprocal; if a
        // pivot fell outside its range (never for reasonably scaled systems), again by
        // one thread with true divisions in the same arithmetic, so that every
        // L_ij = t_ij * ((real)1 / D_j) whatever the scale.
        real rd[R];  // 1 / D_ii of the owned rows
        bool not_pd = false;
        const bool odd = ldlt_factor_rows(a, rd, sW, g, not_pd);
        // Warp-uniform condition (the redo synchronises the group; a warp holds several).
#if NSTAR > 32
        if (group_any(odd, g, iscratch)) {
#else
        if (__any_sync(0xffffffffu, odd)) {
#endif
            group_sync();
            if (g.t == 0) sy[0] = ldlt_factor_exact(sA, sW, sx) ? (real)1 : (real)0;
            group_sync();
            not_pd = sy[0] != (real)0;
            ldlt_reload_rows(a, rd, sW, sx, g);
            group_sync();
        }

        // Forward substitution L y = b: y_k is final in its owner's register once the
        // columns k' < k have been subtracted.
        // The update runs on every row; a row i <= k is already final and was saved in
        // yf when it was broadcast, so what happens to its y afterwards is irrelevant.
        real y[R], yf[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            y[s] = b[s];
            yf[s] = 0;
        }
#pragma unroll
        for (int k = 0; k < N; ++k) {
            real yk;
#if !LDLT_Y_PRED
            if (g.t == k % NSTAR) yf[k / NSTAR] = y[k / NSTAR];
#endif
#if NSTAR > 32
            if (g.t == k % NSTAR) sy[k] = y[k / NSTAR];
            group_sync();
            yk = sy[k];
#else
            yk = group_bcast(y[k / NSTAR], g, k % NSTAR);
#endif
#pragma unroll
            for (int s = 0; s < R; ++s) {
#if LDLT_Y_PRED
                if (row_max(s) > k && g.t + s * NSTAR > k) y[s] = sub_mul(y[s], a[s][k], yk);
#else
                if (row_max(s) > k) y[s] = sub_mul(y[s], a[s][k], yk);
#endif
            }
        }
#if LDLT_Y_PRED
#pragma unroll
        for (int s = 0; s < R; ++s) yf[s] = y[s];
#endif

        // Back substitution D L^T x = y, column-oriented:
        // x_k = (y_k - sum_{i>k} W_ik x_i) / D_k.
        // As above, rows i >= k keep updating a dead copy; their index is clamped so
        // that the read stays inside W.
        real x[R];
#if LDLT_WLAYOUT == 1
        // Entry (k, i) of W at wb[w_swap(k)][s] + 2 k, i the row of slot s.
        const real* wb[2][R];
#else
        int ic[R];
#endif
#pragma unroll
        for (int s = 0; s < R; ++s) {
            x[s] = 0;
            y[s] = yf[s];
#if LDLT_WLAYOUT == 1
            const int i = min(g.t + s * NSTAR, N - 1);
            wb[0][s] = sW + w_bs_base(i, 0);
            wb[1][s] = sW + w_bs_base(i, 1);
#else
            ic[s] = min(g.t + s * NSTAR, N - 1);
#endif
        }
#pragma unroll
        for (int k = N - 1; k >= 0; --k) {
            const int sk = k / NSTAR, tk = k % NSTAR;
            real xk_own = y[sk] * rd[sk];
            if (g.t == tk) {
#if !LDLT_X_SHARED
                x[sk] = xk_own;
#endif
                sx[k] = xk_own;
            }
            real xk;
#if NSTAR > 32
            group_sync();
            xk = sx[k];
#else
            xk = group_bcast(xk_own, g, tk);
#endif
#pragma unroll
            for (int s = 0; s < R; ++s) {
#if LDLT_WLAYOUT == 1
                if (row_min(s) < k) y[s] = sub_mul(y[s], wb[w_swap(k)][s][2 * k], xk);
#else
                if (row_min(s) < k) y[s] = sub_mul(y[s], sW[w_at(k, ic[s])], xk);
#endif
            }
        }
        group_sync();
#if LDLT_X_SHARED
#pragma unroll
        for (int s = 0; s < R; ++s) {
            const int i = g.t + s * NSTAR;
            x[s] = (g.t < NSTAR && i < N) ? sx[i] : (real)0;
        }
#endif
        // W is dead: its buffer receives the next system while the residual is computed.
        prefetch_system(A + (next < batch ? next : 0) * (N * N), B + (next < batch ? next : 0) * N, sW,
                        sB0 + (buf ^ 1) * N, g, next < batch);
        async_copy_commit();

        RowVals rv;
        rv.q = 0;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            rv.b[s] = b[s];
            rv.x[s] = x[s];
            const int i = g.t + s * NSTAR;
            // A_ii / D_ii of the owned rows (the pivot ratio's inverse; NaN pivots are
            // not positive definite, so fmax dropping a NaN loses nothing).
            if (esc && g.t < NSTAR && i < N) rv.q = fmax(rv.q, sA[packed_col(i)] * rd[s]);
        }
        const ResidualOut ro = esc ? ldlt_residual_esc(sA, sx, sy, rv, g, red_scratch, iscratch)
                                   : ldlt_residual<false>(sA, sx, sy, rv, g, red_scratch, iscratch);
        const double res = ro.res, growth = ro.growth;
        const double inv_ratio = (double)ro.inv_ratio;
        bad = group_any(bad || ro.bad, g, iscratch);
        unsigned status = bad ? STATUS_NON_FINITE_INPUT
                        : not_pd ? STATUS_NOT_POSITIVE_DEFINITE
                        : isnan(res) ? STATUS_FAILED : STATUS_OK;
        if (esc && active && g.t == 0) {
            // What solve_one decides after its L D L^T, settled here when the decision
            // does not hang on rounding: final if the input is not finite, or if the
            // residual and the equilibrated growth pass and this kernel's own pivot
            // ratio min_j D_jj / A_jj is at least 4 / thr + 128 n eps. Its pivots come
            // from another summation order than the CPU's, so a ratio near 1 / thr
            // could fall on the other side there; this margin makes that need the two
            // orders to disagree by more than 3 / thr + 128 n eps, which is not proved
            // (the difference grows with the conditioning of the leading blocks): the
            // GPU tests count the systems whose level differs from the CPU's. Any other
            // system is deferred to ldlt_check, which recomputes the pivots in the
            // CPU's order and decides as the CPU does.
            const double margin = 4.0 / thr + 128.0 * N * (double)LDLT_EPS;
            const bool final_here = status == STATUS_NON_FINITE_INPUT ||
                                    (status == STATUS_OK && res <= tol && growth <= thr && !(thr < 1.0) &&
                                     inv_ratio * margin <= 1.0);
            if (!final_here) defer[atomicAdd(&counters[2], 1u)] = (unsigned)sys;
        }
        if (active) {
            const bool no_solution = status == STATUS_NON_FINITE_INPUT || status == STATUS_NOT_POSITIVE_DEFINITE;
            store_group_solution(X, sys, g.t, x, no_solution);
            if (g.t == 0) store_report(rep, sys, no_solution, res, METHOD_LDLT, status);
        }
        // Everyone is done with this buffer before the next iteration refills it.
        group_sync();
    }
    async_copy_wait<0>();
}

#else  // one thread per system

// Shared memory: per thread, the packed lower triangle (PA entries) and a vector of n;
// entry p of thread u at S[p * blockDim.x + u].
extern "C" __global__ void ENTRY(ldlt_simd)(const real* __restrict__ A, const real* __restrict__ B,
                                           real* __restrict__ X, GpuReport* __restrict__ rep,
                                           long long batch) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int PA = N * (N + 1) / 2;
    real* S = reinterpret_cast<real*>(smem_raw);
    const int T = blockDim.x;
    const int u = threadIdx.x;
    const long long sys0 = (long long)blockIdx.x * T;
    // Cooperative, coalesced copy of the block's matrices (whole columns, lower kept).
    for (int e = u; e < T * N * N; e += T) {
        int w = e / (N * N), rc = e % (N * N), c = rc / N, r = rc % N;
        if (r >= c) {
            real v = (sys0 + w < batch) ? A[(sys0 + w) * (N * N) + rc] : (real)(r == c ? 1 : 0);
            S[(packed_col(c) + r - c) * T + w] = v;
        }
    }
    __syncthreads();
    const long long sys = sys0 + u;
    const bool active = sys < batch;
#define SA(r, c) S[(packed_col(c) + (r) - (c)) * T + u]
#define SV(i) S[(PA + (i)) * T + u]
    bool bad = false;
    for (int p = 0; p < PA; ++p) bad |= !finite(S[p * T + u]);
    for (int i = 0; i < N; ++i) {
        real v = active ? B[sys * N + i] : (real)0;
        bad |= !finite(v);
        SV(i) = v;
    }
    bool not_pd = false;
    for (int j = 0; j < N; ++j) {
        real d = SA(j, j);
        for (int k = 0; k < j; ++k) d -= SA(j, k) * (SA(j, k) * SA(k, k));
        not_pd |= !(d > (real)0 && d <= REAL_MAX);
        SA(j, j) = d;
        for (int i = j + 1; i < N; ++i) {
            real t = SA(i, j);
            for (int k = 0; k < j; ++k) t -= SA(i, k) * (SA(j, k) * SA(k, k));
            SA(i, j) = t / d;
        }
    }
    for (int i = 0; i < N; ++i) {  // L y = b
        real t = SV(i);
        for (int k = 0; k < i; ++k) t -= SA(i, k) * SV(k);
        SV(i) = t;
    }
    for (int i = 0; i < N; ++i) SV(i) = SV(i) / SA(i, i);
    for (int i = N - 1; i >= 0; --i) {  // L^T x = z
        real t = SV(i);
        for (int k = i + 1; k < N; ++k) t -= SA(k, i) * SV(k);
        SV(i) = t;
    }
    // Residual against the original matrix, read again from global memory.
    real r_max = 0, a_max = 0, x_max = 0, b_max = 0;
    bool nan_row = false;
    const real* gA = A + (active ? sys : 0) * (N * N);
    for (int i = 0; i < N && active; ++i) {
        real acc = 0, row = 0;
        for (int c = 0; c < N; ++c) {
            real aic = i >= c ? gA[i + c * N] : gA[c + i * N];
            acc += aic * SV(c);
            row += fabs(aic);
        }
        real bi = B[sys * N + i];
        real ri = fabs(bi - acc);
        real xi = SV(i);
        if (isnan(ri) || !finite(xi)) nan_row = true;
        r_max = fmax(r_max, ri);
        a_max = fmax(a_max, row);
        x_max = fmax(x_max, fabs(xi));
        b_max = fmax(b_max, fabs(bi));
    }
    double den = (double)a_max * (double)x_max + (double)b_max;
    double res = nan_row ? __longlong_as_double(0x7ff8000000000000ULL) : (den == 0.0 ? 0.0 : (double)r_max / den);
    unsigned status = bad ? STATUS_NON_FINITE_INPUT
                    : not_pd ? STATUS_NOT_POSITIVE_DEFINITE
                    : isnan(res) ? STATUS_FAILED : STATUS_OK;
    if (active) {
        const bool no_solution = status == STATUS_NON_FINITE_INPUT || status == STATUS_NOT_POSITIVE_DEFINITE;
        for (int i = 0; i < N; ++i) X[sys * N + i] = no_solution ? real_nan() : SV(i);
        store_report(rep, sys, no_solution, res, METHOD_LDLT, status);
    }
#undef SA
#undef SV
}

#endif
