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
// G (regressions per block), P (paths per chunk), THREADS (block size, a multiple of
// 32, >= G * NT), USE_FMA.
//
// Shared memory (dynamic, 16-byte aligned): psi[G][P][NEP] real | raw[G][P][d] double |
// yraw[G][P] double | src[G][P] int | itm[G][P] int | cnt[G] int | total[G] int |
// chain_asset[N][DEG] int | chain_inv[N][DEG] double (placed before the ints).

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

// states: element (l, mm, i) at states[l * path_stride + mm * d + i] (the inner states
// at the exercise date); y: (l, mm) at y[l * m + mm]. A: batch x N x N column-major,
// lower triangle written (upper untouched); B: batch x N; counts: batch.
// chain_asset / chain_inv: N x DEG, for basis function t the asset index and 1/S_0 of
// each factor from the root, -1 after the last. Payoff: kind, put, strike and the
// nu (asset, weight) pairs in ua / uw (max reads ua only).
extern "C" __global__ void __launch_bounds__(THREADS)
ENTRY(regression_build)(const double* __restrict__ states, long long path_stride,
                        const double* __restrict__ y, real* __restrict__ A,
                        real* __restrict__ B, unsigned* __restrict__ counts, long long batch,
                        int m, int d, const int* __restrict__ chain_asset_g,
                        const double* __restrict__ chain_inv_g, int kind, int put, double strike,
                        const int* __restrict__ ua_g, const double* __restrict__ uw_g, int nu,
                        int itm_only) {
    extern __shared__ __align__(16) unsigned char smem[];
    real* psi = (real*)smem;
    double* raw = (double*)(psi + G * P * NEP);
    double* yraw = raw + G * P * d;
    double* chain_inv = yraw + G * P;
    double* uw = chain_inv + N * DEG;
    int* src = (int*)(uw + nu);
    int* itm = src + G * P;
    int* cnt = itm + G * P;
    int* total = cnt + G;
    int* chain_asset = total + G;
    int* ua = chain_asset + N * DEG;

    const int tid = threadIdx.x;
    const long long l0 = (long long)blockIdx.x * G;

    for (int e = tid; e < N * DEG; e += THREADS) {
        chain_asset[e] = chain_asset_g[e];
        chain_inv[e] = chain_inv_g[e];
    }
    for (int e = tid; e < nu; e += THREADS) {
        ua[e] = ua_g[e];
        uw[e] = uw_g[e];
    }
    if (tid < G) total[tid] = 0;

    // This thread's tile: regression ag, tile row tr, tile column tc <= tr.
    const bool acc_thread = tid < G * NT;
    const int ag = tid / NT;
    int tr = 0, tc = tid - ag * NT;
    while (tc > tr) {
        tc -= tr + 1;
        ++tr;
    }
    real acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b] = (real)0;

    for (int p0 = 0; p0 < m; p0 += P) {
        const int np = min(P, m - p0);
        __syncthreads();  // the previous chunk is consumed; tables are in place
        // 1. Stage the chunk's states (contiguous np * d doubles per regression) and y.
        for (int g = 0; g < G; ++g) {
            const long long l = l0 + g;
            if (l >= batch) break;
            const double* s = states + l * path_stride + (long long)p0 * d;
            for (int e = tid; e < np * d; e += THREADS) raw[g * P * d + e] = s[e];
        }
        for (int e = tid; e < G * P; e += THREADS) {
            const int g = e / P, p = e - g * P;
            if (l0 + g < batch && p < np) yraw[e] = y[(l0 + g) * m + p0 + p];
        }
        __syncthreads();
        // 2. Which paths enter.
        for (int e = tid; e < G * P; e += THREADS) {
            const int g = e / P, p = e - g * P;
            int f = 0;
            if (l0 + g < batch && p < np)
                f = !itm_only || payoff_of(raw + (long long)e * d, kind, put, strike, ua, uw, nu) > 0.0;
            itm[e] = f;
        }
        __syncthreads();
        // 3. Compact them, in order.
        if (tid < G) {
            int c = 0;
            for (int p = 0; p < P; ++p)
                if (itm[tid * P + p]) src[tid * P + c++] = p;
            cnt[tid] = c;
            total[tid] += c;
        }
        __syncthreads();
        // 4. Basis values (and y, and zero padding) of the entering paths.
        for (int e = tid; e < G * P * NEP; e += THREADS) {
            const int g = e / (P * NEP);
            const int r = e - g * (P * NEP);
            const int slot = r / NEP;
            const int t = r - slot * NEP;
            if (slot < cnt[g]) {
                const int p = src[g * P + slot];
                real v;
                if (t < N) {
                    const double* s = raw + (g * P + p) * d;
                    double x = 1.0;
                    for (int k = 0; k < DEG; ++k) {
                        const int a = chain_asset[t * DEG + k];
                        if (a < 0) break;
                        x = x * (s[a] * chain_inv[t * DEG + k]);
                    }
                    v = (real)x;
                } else if (t == N) {
                    v = (real)yraw[g * P + p];
                } else {
                    v = (real)0;
                }
                psi[e] = v;
            }
        }
        __syncthreads();
        // 5. Accumulate this thread's tile over the entering paths, in order.
        if (acc_thread) {
            const int c = cnt[ag];
            const real* base = psi + ag * P * NEP;
            for (int slot = 0; slot < c; ++slot) {
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
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int b = 0; b < 4; ++b) acc[a][b] = MADD(rv[a], cv[b], acc[a][b]);
            }
        }
    }
    __syncthreads();

    if (acc_thread && l0 + ag < batch) {
        const long long l = l0 + ag;
        const int tot = total[ag];
        const real inv = tot > 0 ? (real)1 / (real)tot : (real)0;
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int r = 4 * tr + a, c = 4 * tc + b;
                if (c < N && r >= c && r <= N) {
                    const real v = tot > 0 ? acc[a][b] * inv : (real)0;
                    if (r < N)
                        A[l * (N * N) + c * N + r] = v;
                    else
                        B[l * N + c] = v;
                }
            }
    }
    if (tid < G && l0 + tid < batch) counts[l0 + tid] = (unsigned)total[tid];
}
