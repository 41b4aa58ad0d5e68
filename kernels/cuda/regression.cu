// Fused Longstaff-Schwartz regression build: for each outer path l of a batch,
//   A_l = (1/c_l) sum_m psi(S_m) psi(S_m)^T,   b_l = (1/c_l) sum_m psi(S_m) y_m,
// over its inner paths m that enter the regression (payoff > 0 when ITM_ONLY, else all),
// c_l their number, straight from the inner states and the discounted cash flows. The
// design matrix never reaches global memory: chunks of P paths are staged in shared
// memory, their basis values formed there, and each thread keeps a 4 x 4 tile of the
// lower triangle of the augmented (N+1) x (N+1) matrix [psi; y][psi; y]^T in registers
// (row N of it is b).
//
// Order of operations: every entry is a sum over the regression paths in increasing m,
// started at 0, with one rounded product and one rounded add per path (no FMA unless
// USE_FMA), in the working precision `real`; psi is evaluated in double
// (x_v = S[asset_v] * inv_spot_v, psi_t = ((1 * x_{v1}) * x_{v2}) ...) then rounded to
// real, y likewise; the sums are scaled by inv = 1 / c_l in real. That is the CPU
// engine's arithmetic (src/engine.rs), so the results match it bitwise.
//
// Defines (from the host): REAL_F64, N (basis size), DEG (longest chain, >= 1),
// G (regressions per block), P (paths per chunk, a power of two
// <= 32), STAGES (stage buffers of raw states: STAGES - 1 chunks are copied ahead of the
// one being prepared, >= 2), THREADS (block size, a multiple of 32, >= G * NT and >= G * P), USE_FMA.
//
// Shared memory (dynamic, 16-byte aligned): psi[2][G][P][NEP] real |
// raw[STAGES][G][P][d] double | yraw[STAGES][G][P] double | chain_inv[N][DEG] double | uw[nu] double | cnt[G] int |
// total[G] int | chain_asset[N][DEG] int | ua[nu] int | src[G][P] int.

#if REAL_F64
typedef double real;
#define ENTRY(name) name##_f64
#else
typedef float real;
#define ENTRY(name) name##_f32
#endif

#define NE (N + 1)
#define NEP (((NE + 3) / 4) * 4)
#define TB (NEP / 4)
#define NT (TB * (TB + 1) / 2)

#if USE_FMA
#define MADD(a, b, acc) fma((a), (b), (acc))
#else
#define MADD(a, b, acc) ((acc) + (a) * (b))
#endif

// Payoff kinds: level = S[a0] (0), sum_k w_k S[a_k] (1), max_k S[a_k] (2); call or put.
__device__ __forceinline__ double payoff_of(const double* s, int kind, int put, double strike,
                                            const int* ua, const double* uw, int nu) {
    double level;
    if (kind == 0) {
        level = s[ua[0]];
    } else if (kind == 1) {
        level = 0.0;
        for (int k = 0; k < nu; ++k) level = level + uw[k] * s[ua[k]];
    } else {
        level = __longlong_as_double(0xfff0000000000000ULL);  // -infinity
        for (int k = 0; k < nu; ++k) level = fmax(level, s[ua[k]]);
    }
    return put ? fmax(strike - level, 0.0) : fmax(level - strike, 0.0);
}

// 8-byte asynchronous copy global -> shared (sm_80 and later; a plain copy before).
__device__ __forceinline__ void copy_async8(double* dst, const double* src) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %1;\n\tcp.async.ca.shared.global [%0], [g], 8;\n\t}"
                 :
                 : "r"(d), "l"(src)
                 : "memory");
#else
    *dst = *src;
#endif
}

__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

#define PREP_WARPS ((G * P + 31) / 32)
#define TILE_WARPS ((G * NT + 31) / 32)
#define GROUPS_PER_WARP (32 / P)

__device__ __forceinline__ void named_sync(int id) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(THREADS) : "memory");
}

__device__ __forceinline__ void named_arrive(int id) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(THREADS) : "memory");
}

template <int PENDING>
__device__ __forceinline__ void copy_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
#endif
}

// states: element (l, mm, i) at states[l * path_stride + mm * d + i] (the inner states
// at the exercise date); y: (l, mm) at y[l * m + mm]. A: batch x N x N column-major,
// lower triangle written (upper untouched); B: batch x N; counts: batch.
// chain_asset / chain_inv: N x DEG, for basis function t the asset index and 1/S_0 of
// each factor from the root, -1 after the last. Payoff: kind, put, strike and the
// nu (asset, weight) pairs in ua / uw (max reads ua only).
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
ENTRY(regression_build)(const double* __restrict__ states, long long path_stride,
                        const double* __restrict__ y, real* __restrict__ A,
                        real* __restrict__ B, unsigned* __restrict__ counts, long long batch,
                        int m, int d, const int* __restrict__ chain_asset_g,
                        const double* __restrict__ chain_inv_g, int kind, int put, double strike,
                        const int* __restrict__ ua_g, const double* __restrict__ uw_g, int nu,
                        int itm_only) {
    extern __shared__ __align__(16) unsigned char smem[];
    real* psi = (real*)smem;
    double* raw = (double*)(psi + 2 * G * P * NEP);
    double* yraw = raw + STAGES * G * P * d;
    double* chain_inv = yraw + STAGES * G * P;
    double* uw = chain_inv + N * DEG;
    int* cnt = (int*)(uw + nu);
    int* total = cnt + 2 * G;
    int* chain_asset = total + G;
    int* ua = chain_asset + N * DEG;
    int* src = ua + nu;

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const long long l0 = (long long)blockIdx.x * G;
    const int chunks = (m + P - 1) / P;

    for (int e = tid; e < N * DEG; e += THREADS) {
        chain_asset[e] = chain_asset_g[e];
        chain_inv[e] = chain_inv_g[e];
    }
    for (int e = tid; e < nu; e += THREADS) {
        ua[e] = ua_g[e];
        uw[e] = uw_g[e];
    }
    __syncthreads();

    // Tile threads (of the tile warps): regression ag, tile row tr, tile column tc <= tr.
    const int a = tid - 32 * PREP_WARPS;
    const bool acc_thread = a >= 0 && a < G * NT;
    const int ag = acc_thread ? a / NT : 0;
    int tr = 0, tc = acc_thread ? a - ag * NT : 0;
    while (tc > tr) {
        tc -= tr + 1;
        ++tr;
    }
    real acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = (real)0;

    if (warp < PREP_WARPS) {
        // This lane's path slot: regression g (may be >= G), path p of the chunk.
        const int g = tid / P, p = tid - g * P;
        // Copies of chunk c of this warp's regressions into stage buffer c % STAGES, as
        // one commit group (empty past the last chunk, so that every iteration commits
        // one group and the wait below keeps a constant count).
        auto stage = [&](int c) {
            if (c < chunks) {
                const int p0 = c * P, np = min(P, m - p0), sb = c % STAGES;
                for (int j = 0; j < GROUPS_PER_WARP; ++j) {
                    const int gg = warp * GROUPS_PER_WARP + j;
                    if (gg >= G || l0 + gg >= batch) break;
                    const double* s = states + (l0 + gg) * path_stride + (long long)p0 * d;
                    double* dst = raw + (sb * G + gg) * (P * d);
                    for (int r = lane; r < np * d; r += 32) copy_async8(dst + r, s + r);
                }
                if (g < G && l0 + g < batch && p < np)
                    copy_async8(yraw + (sb * G + g) * P + p, y + (l0 + g) * m + p0 + p);
            }
            copy_async_commit();
        };
        if (lane == 0)
            for (int j = 0; j < GROUPS_PER_WARP; ++j)
                if (warp * GROUPS_PER_WARP + j < G) total[warp * GROUPS_PER_WARP + j] = 0;
        // STAGES - 1 chunks in flight ahead of the one being prepared.
        for (int c = 0; c < STAGES - 1; ++c) stage(c);
        for (int c = 0; c < chunks; ++c) {
            const int buf = c & 1, sb = c % STAGES, np = min(P, m - c * P);
            __syncwarp();  // every lane is done with the stage buffer chunk c + STAGES - 1 reuses
            stage(c + STAGES - 1);
            copy_async_wait<STAGES - 1>();  // chunk c's group is complete
            __syncwarp();  // chunk c's copies by every lane of the warp are visible
            if (c >= 2) named_sync(3 + buf);  // the tile warps are done with psi[buf]
            const double* rb = raw + sb * (G * P * d);
            const double* yb = yraw + sb * (G * P);
            real* pb = psi + buf * (G * P * NEP);
            // Which paths enter.
            bool f = false;
            if (g < G && l0 + g < batch && p < np)
                f = !itm_only || payoff_of(rb + tid * d, kind, put, strike, ua, uw, nu) > 0.0;
            const unsigned mask = __ballot_sync(0xffffffffu, f);
            // Compaction: an entering path's lane writes its index at its rank among the
            // entering paths of its regression (the bits of its lane group below it).
            const int j0 = lane / P;
            const unsigned group = P == 32 ? mask : (mask >> (j0 * P)) & ((1u << (P & 31)) - 1u);
            if (f) src[g * P + __popc(group & ((1u << p) - 1u))] = p;
            __syncwarp();
            // Basis values (and y, and zero padding) of the entering paths, in order:
            // element (slot, t) of the group's compacted rows, lanes over consecutive t.
#pragma unroll 1
            for (int j = 0; j < GROUPS_PER_WARP; ++j) {
                const int gg = warp * GROUPS_PER_WARP + j;
                if (gg >= G) break;
                const unsigned bits = P == 32 ? mask : (mask >> (j * P)) & ((1u << (P & 31)) - 1u);
                const int cn = __popc(bits);
                real* out = pb + gg * (P * NEP);
#pragma unroll 4
                for (int q = lane; q < cn * NEP; q += 32) {
                    const int slot = q / NEP, t = q - slot * NEP;
                    const int pp = src[gg * P + slot];
                    real v;
                    if (t < N) {
                        const double* s = rb + (gg * P + pp) * d;
                        double x = 1.0;
                        for (int k = 0; k < DEG; ++k) {
                            const int a = chain_asset[t * DEG + k];
                            if (a < 0) break;
                            x = x * (s[a] * chain_inv[t * DEG + k]);
                        }
                        v = (real)x;
                    } else if (t == N) {
                        v = (real)yb[gg * P + pp];
                    } else {
                        v = (real)0;
                    }
                    out[q] = v;
                }
                if (lane == 0) {
                    cnt[buf * G + gg] = cn;
                    total[gg] += cn;
                }
            }
            __syncwarp();
            named_arrive(1 + buf);  // psi[buf] and cnt[buf] are ready
        }
    } else {
        for (int c = 0; c < chunks; ++c) {
            const int buf = c & 1;
            named_sync(1 + buf);  // chunk c prepared
            // Accumulate this thread's tile over the entering paths, in order.
            if (acc_thread) {
                const int cn = cnt[buf * G + ag];
                const real* base = psi + buf * (G * P * NEP) + ag * P * NEP;
                for (int slot = 0; slot < cn; ++slot) {
                    const real* row = base + slot * NEP;
                    real rv[4], cv[4];
#if REAL_F64
                    const double2 r01 = ((const double2*)(row + 4 * tr))[0];
                    const double2 r23 = ((const double2*)(row + 4 * tr))[1];
                    const double2 c01 = ((const double2*)(row + 4 * tc))[0];
                    const double2 c23 = ((const double2*)(row + 4 * tc))[1];
                    rv[0] = r01.x; rv[1] = r01.y; rv[2] = r23.x; rv[3] = r23.y;
                    cv[0] = c01.x; cv[1] = c01.y; cv[2] = c23.x; cv[3] = c23.y;
#else
                    const float4 r4 = *(const float4*)(row + 4 * tr);
                    const float4 c4 = *(const float4*)(row + 4 * tc);
                    rv[0] = r4.x; rv[1] = r4.y; rv[2] = r4.z; rv[3] = r4.w;
                    cv[0] = c4.x; cv[1] = c4.y; cv[2] = c4.z; cv[3] = c4.w;
#endif
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][j] = MADD(rv[i], cv[j], acc[i][j]);
                }
            }
            if (c + 2 < chunks) named_arrive(3 + buf);  // psi[buf] may be refilled
        }
    }
    __syncthreads();  // the totals are final
    if (acc_thread && l0 + ag < batch) {
        const long long l = l0 + ag;
        const int tot = total[ag];
        const real inv = tot > 0 ? (real)1 / (real)tot : (real)0;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int r = 4 * tr + i, cc = 4 * tc + j;
                if (cc < N && r >= cc && r <= N) {
                    const real v = tot > 0 ? acc[i][j] * inv : (real)0;
                    if (r < N)
                        A[l * (N * N) + cc * N + r] = v;
                    else
                        B[l * N + cc] = v;
                }
            }
    }
    if (tid < G && l0 + tid < batch) counts[l0 + tid] = (unsigned)total[tid];
}
