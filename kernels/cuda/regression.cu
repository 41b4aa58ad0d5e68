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
// (x_v = S_h[asset_v] * inv_spot_v with S_h the price's high word, state_high;
// psi_t = ((1 * x_{v1}) * x_{v2}) ...) then rounded to
// real, y likewise; the sums are scaled by inv = 1 / c_l in real. That is the CPU
// engine's arithmetic (src/engine.rs), so the results match it bitwise.
//
// Two kernels: with TENSOR_CORES = 1 the f64 tensor-core build (its own header below;
// not bitwise the CPU's sums), else the tile kernel described here.
//
// Defines (from the host): REAL_F64, N (basis size), DEG (longest chain, >= 1),
// G (regressions per block), P (paths per chunk, a power of two
// <= 32), STAGES (stage buffers of raw states: STAGES - 1 chunks are copied ahead of the
// one being prepared, >= 2), THREADS (block size, a multiple of 32, >= G * NT and >= G * P),
// USE_FMA, TILE_PREFETCH (the tile threads load the next row's tile-row values before
// the current row's products), D (assets per state), and
// `double payoff_value(const unsigned* hi, const unsigned* lo, double strike)` (a device
// function of the asset prices of one path, state_join(hi, lo, i), generated from the
// payoff with its assets, weights and call/put as constants: the bits of engine.cu's
// engine_payoff and of the CPU's GpuPayoff::value, see regression.rs).
//
// States: the two planes of words of prelude.cu (paths.cu writes them). Every kernel
// stores the payoff of every inner path of its regressions at payoff[l * m + mm] (the
// exercise update reads it there), whether or not the path enters. With PAYOFF_PLANE (1)
// the states' second plane holds the payoffs the path kernel formed (paths.cu's payoff
// plane: the double at word m D + 2 mm of the block) instead of the low words: the
// kernels stage those (in the low words' stage buffers) instead of evaluating
// payoff_value.
//
// Shared memory (dynamic, 16-byte aligned): psi[2][G][P][NEP] real |
// rawh[STAGES][G][P * D] and rawl[STAGES][G][P * D] words (the staged states' high and
// low words) | yraw[STAGES][G][P] double | junk[PREP_WARPS][32] real |
// cnt[2][G] int | total[G] int |
// src[G][P] int. A psi row holds element t at psi_pos(t): in f64 the first two values
// of every 4-group t = 4q.. in the row's first half (at 2q), the last two in its second
// half, so that the 16-byte loads of the tile threads of one row hit distinct banks.
// Preparing lane `lane` writes row position lane (+ 32 k), i.e. element psi_elem(pos), so
// that its stores are conflict-free too. The columns that do not depend on the path (the
// constant basis function, the zero padding past y) are written once, at the start, in
// every row of both buffers; the others (basis values, y) for each chunk.

#ifndef PAYOFF_PLANE
#define PAYOFF_PLANE 0
#endif

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

#define PREP_WARPS ((G * P + 31) / 32)
#define TILE_WARPS ((G * NT + 31) / 32)
#define GROUPS_PER_WARP (32 / P)
// Psi columns per preparing lane (lane t, t + 32, ...).
#define TPL ((NEP + 31) / 32)

// Position of element t in a psi row (see the header).
__device__ __forceinline__ int psi_pos(int t) {
#if REAL_F64
    return ((t & 3) >> 1) * (NEP / 2) + 2 * (t >> 2) + (t & 1);
#else
    return t;
#endif
}

// Element stored at position pos of a psi row (the inverse of psi_pos).
__device__ __forceinline__ int psi_elem(int pos) {
#if REAL_F64
    const int h = pos / (NEP / 2), r = pos - h * (NEP / 2);
    return 4 * (r >> 1) + 2 * h + (r & 1);
#else
    return pos;
#endif
}

__device__ __forceinline__ void named_sync(int id) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(THREADS) : "memory");
}

__device__ __forceinline__ void named_arrive(int id) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(THREADS) : "memory");
}

// The 4 values of tile row `q` of a psi row (elements 4q .. 4q + 3).
__device__ __forceinline__ void load_quad(const real* row, int q, real v[4]) {
#if REAL_F64
    const double2 lo = *(const double2*)(row + 2 * q);
    const double2 hi = *(const double2*)(row + NEP / 2 + 2 * q);
    v[0] = lo.x;
    v[1] = lo.y;
    v[2] = hi.x;
    v[3] = hi.y;
#else
    const float4 f = *(const float4*)(row + 4 * q);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
#endif
}

#if TENSOR_CORES
// ---- f64 build on the FP64 tensor cores (TENSOR_CORES = 1; f64 only) ----
//
// One warp per regression, no block barriers. The warp stages chunks of 32 paths
// (`cp.async`, STAGES - 1 chunks ahead) into its own buffers rawh / rawl[STAGES][32 D]
// (the two planes of words) and yraw[STAGES][32]; lane p evaluates the payoff of path p
// of the chunk and stores it, a ballot gives the entering paths. Psi is never stored: for
// every k-step of 4 paths the lanes form the fragments straight from the staged states.
// Augmented columns: 0..N-1 the basis functions, N the cash flow y, N+1 .. 8 NB - 1 zero;
// path k0 + t%4 is the row lane t owns, its column 8 I + t/4 for I < NB (psi of a path
// that does not enter is 0, so it adds exact zeros). With mma.sync m8n8k4 (A 8 x 4
// row-major: lane t holds A[t/4][t%4]; B 4 x 8 column-major: lane t holds B[t%4][t/4]; C
// 8 x 8: lane t holds C[t/4][2 (t%4) + {0, 1}]) the A fragment of Psi^T for row block I
// and the B fragment of Psi for column block I are the same value, so one value per lane
// and block feeds both: block (I, J), I >= J, of [Psi y]^T [Psi y] is acc[I][J] +=
// frag[I] x frag[J].
// Per 4 paths: NB (+ chain length - 1) states (two 4-byte shared loads each) and y per
// lane, NB (NB + 1) / 2 DMMAs; 4-path steps in which no path enters are skipped. b is row N.
//
// Arithmetic: psi as in the tile kernel (evaluated in double, chains from the root);
// the sums' order and rounding are the tensor cores' (a DMMA adds 4 products per step),
// so A and b are no longer bitwise the CPU's: each entry differs from the CPU's by at
// most about (c + 1) eps (1/c) sum |psi_i| |psi_j| (to first order: the two summation
// bounds gamma_c ~ c eps / 2 and the two roundings of the scaling), c the entering
// paths. Scaling by 1/c in double as before.
//
// Defines (beyond the payoff function): N, DEG, D, W (regressions = warps per block),
// STAGES (>= 2), THREADS (= 32 W), MIN_BLOCKS. Shared memory (dynamic, 16-byte
// aligned): per warp rawh[STAGES][32 D] words | rawl[STAGES][32 D] words (the staged
// states' two planes; with PAYOFF_PLANE [STAGES][32] payoffs, doubles) |
// yraw[STAGES][32] double: TC_WARP_DOUBLES.
#define TC_CHUNK 32
// Words per path of a stage's second buffer (the low words, or with PAYOFF_PLANE the
// payoff, a double) and doubles of shared memory per warp.
#if PAYOFF_PLANE
#define TC_SECOND_WORDS 2
#else
#define TC_SECOND_WORDS D
#endif
#define TC_WARP_DOUBLES (STAGES * TC_CHUNK * (D + TC_SECOND_WORDS + 2) / 2)
#define NB ((N + 1 + 7) / 8)
#define NBLK (NB * (NB + 1) / 2)
// TC_K: paths per tensor-core step. 8 where mma.m16n8k8.f64 exists (sm_90): one DMMA
// per 16 x 8 block of rows 16 R.. and columns 8 J.. of the augmented matrix, for the
// blocks that touch its lower triangle (J <= 2 R + 1): 6 DMMAs per 8 paths at NB = 4
// instead of 2 x 10 m8n8k4. Else 4 (m8n8k4). The host may force 4 with TC_K 4.
#ifndef TC_K
#ifdef HAVE_MMA_M16N8K8_F64
#define TC_K 8
#else
#define TC_K 4
#endif
#endif
#if TC_K == 8 && !defined(HAVE_MMA_M16N8K8_F64)
#error "TC_K 8 needs mma.m16n8k8.f64 (sm_90 or later)"
#endif
#if TC_K != 4 && TC_K != 8
#error "TC_K must be 4 or 8"
#endif
// Row blocks of 16 (TC_K 8) and the 16 x 8 blocks they hold.
#define NR ((NB + 1) / 2)
#define NBLK16 (NR * (NR + 1) - (2 * NR > NB ? 1 : 0))

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
regression_build_f64(const double* __restrict__ states, long long path_stride,
                     const double* __restrict__ y, double* __restrict__ A,
                     double* __restrict__ B, unsigned* __restrict__ counts,
                     double* __restrict__ payoff, long long batch,
                     int m, int d, const int* __restrict__ chain_asset_g,
                     const double* __restrict__ chain_inv_g, int kind, int put, double strike,
                     const int* __restrict__ ua_g, const double* __restrict__ uw_g, int nu,
                     int itm_only, const unsigned char* __restrict__ active) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long l = (long long)blockIdx.x * W + warp;
    if (l >= batch) return;  // whole warps: no barrier below spans warps
    // Where active is given, an outer path with active[l] == 0 is skipped: nothing is
    // written for it (its system is replaced and its exercise skipped by the caller).
    if (active != nullptr && !active[l]) return;
    unsigned* const rawh = (unsigned*)((double*)smem + (long long)warp * TC_WARP_DOUBLES);
    unsigned* const rawl = rawh + STAGES * TC_CHUNK * D;  // low words, or payoffs (doubles)
    double* const yraw = (double*)(rawl + STAGES * TC_CHUNK * TC_SECOND_WORDS);
    const int chunks = (m + TC_CHUNK - 1) / TC_CHUNK;

    // This lane's columns c = 8 I + lane / 4: a chain of factors (asset, 1/S_0), the
    // constant 1 (empty chain), y (c == N) or 0 (c > N). Lanes without a chain take a
    // throw-away value from asset 0 and select the constant.
    int cha[NB][DEG];
    double chi[NB][DEG];
    bool is_chain[NB], is_y[NB];
    double cst[NB];
#pragma unroll
    for (int I = 0; I < NB; ++I) {
        const int c = 8 * I + (lane >> 2);
        const bool chain = c < N && chain_asset_g[c * DEG] >= 0;
        is_chain[I] = chain;
        is_y[I] = c == N;
        cst[I] = c < N ? 1.0 : 0.0;
#pragma unroll
        for (int e = 0; e < DEG; ++e) {
            cha[I][e] = chain ? chain_asset_g[c * DEG + e] : (e == 0 ? 0 : -1);
            chi[I][e] = chain ? chain_inv_g[c * DEG + e] : 0.0;
        }
    }

#if TC_K == 8
    double acc[NBLK16][4];
#pragma unroll
    for (int k = 0; k < NBLK16; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
#else
    double acc[NBLK][2];
#pragma unroll
    for (int k = 0; k < NBLK; ++k) acc[k][0] = acc[k][1] = 0.0;
#endif
    unsigned total = 0;

    // The value of this lane's column block I for the staged path with high words sph (cash
    // flow yv): x = 1, then x = x * (S[asset] * inv_spot) along the chain; the constant or
    // y where the column has no chain; 0 when the path does not enter.
    auto column_value = [&](int I, const unsigned* sph, double yv,
                            bool enters) -> double {
        double x = 1.0 * (state_high(sph, cha[I][0]) * chi[I][0]);
#pragma unroll
        for (int e = 1; e < DEG; ++e)
            if (cha[I][e] >= 0) x = x * (state_high(sph, cha[I][e]) * chi[I][e]);
        const double v = is_chain[I] ? x : (is_y[I] ? yv : cst[I]);
        return enters ? v : 0.0;
    };
    const unsigned* const slh = (const unsigned*)(states + l * path_stride);
    const unsigned* const sll = slh + (long long)m * D;  // the low words or payoffs
    const double* const yl = y + l * (long long)m;
    double* const pl = payoff + l * (long long)m;
    // 16-byte copies of a plane when its chunks start on 16-byte boundaries (every chunk
    // starts 32 D words after the previous one).
    const bool vech = (((unsigned long long)slh) & 15) == 0;
#if !PAYOFF_PLANE
    const bool vecl = (((unsigned long long)sll) & 15) == 0;
#endif
    auto stage = [&](int c) {
        if (c < chunks) {
            const int p0 = c * TC_CHUNK, np = min(TC_CHUNK, m - p0), sb = c % STAGES;
            const int ne = np * D;
            warp_copy_words_async<TC_CHUNK * D>(rawh + sb * (TC_CHUNK * D), slh + (long long)p0 * D,
                                                ne, np == TC_CHUNK, vech, lane);
#if PAYOFF_PLANE
            if (lane < np)
                async_copy8((double*)rawl + sb * TC_CHUNK + lane, (const double*)sll + p0 + lane);
#else
            warp_copy_words_async<TC_CHUNK * D>(rawl + sb * (TC_CHUNK * D), sll + (long long)p0 * D,
                                                ne, np == TC_CHUNK, vecl, lane);
#endif
            if (lane < np) async_copy8(yraw + sb * TC_CHUNK + lane, yl + p0 + lane);
        }
        async_copy_commit();
    };
    for (int c = 0; c < STAGES - 1; ++c) stage(c);
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
        __syncwarp();  // every lane is done with the buffer chunk c + STAGES - 1 reuses
        stage(c + STAGES - 1);
        async_copy_wait<STAGES - 1>();  // chunk c's group is complete
        __syncwarp();                   // and visible to the whole warp
        const unsigned* rbh = rawh + (c % STAGES) * (TC_CHUNK * D);
        const unsigned* rbl = rawl + (c % STAGES) * (TC_CHUNK * TC_SECOND_WORDS);
        const double* yb = yraw + (c % STAGES) * TC_CHUNK;
        const int np = min(TC_CHUNK, m - c * TC_CHUNK);
        bool f = false;
        if (lane < np) {
#if PAYOFF_PLANE
            const double pv = ((const double*)rbl)[lane];
#else
            const double pv = payoff_value(rbh + lane * D, rbl + lane * D, strike);
#endif
            pl[c * TC_CHUNK + lane] = pv;
            f = !itm_only || pv > 0.0;
        }
        const unsigned mask = __ballot_sync(0xffffffffu, f);
        total += __popc(mask);
#if TC_K == 8
        // 8 paths per step: lane l (g = l/4, q = l%4) forms the values of paths k0 + q
        // and k0 + q + 4 (h = 0, 1) in columns 8 I + g; they are its B fragment of column
        // block J (v[J][0], v[J][1]) and its A fragment of row block R (v[2R][0],
        // v[2R+1][0], v[2R][1], v[2R+1][1]). Each entry gets its 8 products in path order
        // (the 16x8x8 DMMA adds them as an in-order chain of fused multiply-adds, as the
        // m8n8k4 one adds its 4: the same bits as TC_K 4, measured on an H200).
#pragma unroll
        for (int k0 = 0; k0 < TC_CHUNK; k0 += TC_K) {
            if (((mask >> k0) & 0xffu) == 0) continue;  // warp-uniform
            double v[2 * NR][TC_K / 4];
#pragma unroll
            for (int h = 0; h < TC_K / 4; ++h) {
                const int p = k0 + (lane & 3) + 4 * h;
                const bool enters = (mask >> p) & 1u;
                const unsigned* sph = rbh + p * D;
                const double yv = yb[p];
#pragma unroll
                for (int I = 0; I < 2 * NR; ++I)
                    v[I][h] = I < NB ? column_value(I, sph, yv, enters) : 0.0;
            }
            int k = 0;
#pragma unroll
            for (int R = 0; R < NR; ++R)
#pragma unroll
                for (int J = 0; J < NB && J <= 2 * R + 1; ++J, ++k)
                    mma_m16n8k8_f64(acc[k], v[2 * R][0], v[2 * R + 1][0], v[2 * R][1],
                                    v[2 * R + 1][1], v[J][0], v[J][1]);
        }
#else
#pragma unroll
        for (int k0 = 0; k0 < TC_CHUNK; k0 += 4) {
            if (((mask >> k0) & 0xfu) == 0) continue;  // warp-uniform
            const int p = k0 + (lane & 3);
            const bool enters = (mask >> p) & 1u;
            const unsigned* sph = rbh + p * D;
            const double yv = yb[p];
            double fr[NB];
#pragma unroll
            for (int I = 0; I < NB; ++I) fr[I] = column_value(I, sph, yv, enters);
#pragma unroll
            for (int I = 0; I < NB; ++I)
#pragma unroll
                for (int J = 0; J <= I; ++J) {
                    const int k = I * (I + 1) / 2 + J;
                    mma_m8n8k4_f64(acc[k][0], acc[k][1], fr[I], fr[J]);
                }
        }
#endif
    }
    const double inv = total > 0 ? 1.0 / (double)total : 0.0;
    // Entry (r, cc) of the augmented matrix, scaled: A's lower triangle, or b in row N.
    auto store = [&](int r, int cc, double sum) {
        if (cc < N && r >= cc && r <= N) {
            const double v = total > 0 ? sum * inv : 0.0;
            if (r < N)
                A[l * (N * N) + cc * N + r] = v;
            else
                B[l * N + cc] = v;
        }
    };
#if TC_K == 8
    {
        int k = 0;
#pragma unroll
        for (int R = 0; R < NR; ++R)
#pragma unroll
            for (int J = 0; J < NB && J <= 2 * R + 1; ++J, ++k)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    store(16 * R + (lane >> 2) + 8 * (i >> 1), 8 * J + 2 * (lane & 3) + (i & 1), acc[k][i]);
    }
#else
#pragma unroll
    for (int I = 0; I < NB; ++I)
#pragma unroll
        for (int J = 0; J <= I; ++J)
#pragma unroll
            for (int i = 0; i < 2; ++i)
                store(8 * I + (lane >> 2), 8 * J + 2 * (lane & 3) + i, acc[I * (I + 1) / 2 + J][i]);
#endif
    if (lane == 0) counts[l] = total;
}
#else
// states: element (l, mm, i) of the block of m x D doubles at states + l * path_stride (the
// inner states at the exercise date, in two planes of words); y: (l, mm) at y[l * m + mm].
// A: batch x N x N column-major, lower triangle written (upper untouched); B: batch x N;
// counts: batch; payoff: batch x m, every inner path's payoff. chain_asset / chain_inv:
// N x DEG, for basis function t the asset index and 1/S_0 of each factor from the root,
// -1 after the last. Payoff: strike (the rest is compiled into payoff_value; kind, put,
// ua, uw, nu and d (= D) are not read).
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
ENTRY(regression_build)(const double* __restrict__ states, long long path_stride,
                        const double* __restrict__ y, real* __restrict__ A,
                        real* __restrict__ B, unsigned* __restrict__ counts,
                        double* __restrict__ payoff, long long batch,
                        int m, int d, const int* __restrict__ chain_asset_g,
                        const double* __restrict__ chain_inv_g, int kind, int put, double strike,
                        const int* __restrict__ ua_g, const double* __restrict__ uw_g, int nu,
                        int itm_only, const unsigned char* __restrict__ active) {
    (void)active;  // a hint the tile kernel does not take (its blocks span regressions)
    extern __shared__ __align__(16) unsigned char smem[];
    real* psi = (real*)smem;
    unsigned* rawh = (unsigned*)(psi + 2 * G * P * NEP);
    unsigned* rawl = rawh + STAGES * G * P * D;
    double* yraw = (double*)(rawl + STAGES * G * P * D);
    real* junk = (real*)(yraw + STAGES * G * P);
    int* cnt = (int*)(junk + 32 * PREP_WARPS);
    int* total = cnt + 2 * G;
    int* src = total + G;

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const long long l0 = (long long)blockIdx.x * G;
    const int chunks = (m + P - 1) / P;

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
        // This lane's row positions lane + 32 k: element t = psi_elem(pos); `live` when t
        // is a basis function with a non-empty chain (its factors in registers). The other
        // lanes compute a throw-away value from asset 0 and store it into their warp's
        // junk slots, so that every row is the same instructions for every lane.
        int cha[TPL][DEG];
        double chi[TPL][DEG];
        bool live[TPL];
#pragma unroll
        for (int k = 0; k < TPL; ++k) {
            const int pos = lane + 32 * k;
            const int t = pos < NEP ? psi_elem(pos) : NEP;
            live[k] = t < N && chain_asset_g[t * DEG] >= 0;
#pragma unroll
            for (int e = 0; e < DEG; ++e) {
                cha[k][e] = live[k] ? chain_asset_g[t * DEG + e] : (e == 0 ? 0 : -1);
                chi[k][e] = live[k] ? chain_inv_g[t * DEG + e] : 0.0;
            }
        }
        real* const my_junk = junk + 32 * warp + lane;
        // The path-independent columns of every row of both buffers (this lane's
        // positions that are neither live nor y): 1 for an empty chain, 0 past y.
#pragma unroll
        for (int k = 0; k < TPL; ++k) {
            const int pos = lane + 32 * k;
            const int t = pos < NEP ? psi_elem(pos) : N;
            if (!live[k] && t != N)
                for (int r = warp; r < 2 * G * P; r += PREP_WARPS)
                    psi[r * NEP + pos] = t < N ? (real)1 : (real)0;
        }
        // 16-byte copies of a plane when every (regression, chunk) piece of it starts on a
        // 16-byte boundary.
        const bool vech = (((unsigned long long)states) & 15) == 0 && (path_stride & 1) == 0 &&
                          ((P * D) & 3) == 0;
#if !PAYOFF_PLANE
        const bool vecl = vech && (((long long)m * D) & 3) == 0;
#endif
        // Copies of chunk c of this warp's regressions into stage buffer c % STAGES, as
        // one commit group (empty past the last chunk, so that every iteration commits
        // one group and the wait below keeps a constant count).
        auto stage = [&](int c) {
            if (c < chunks) {
                const int p0 = c * P, np = min(P, m - p0), sb = c % STAGES, ne = np * D;
#pragma unroll 1
                for (int j = 0; j < GROUPS_PER_WARP; ++j) {
                    const int gg = warp * GROUPS_PER_WARP + j;
                    if (gg >= G || l0 + gg >= batch) break;
                    const unsigned* sh = (const unsigned*)(states + (l0 + gg) * path_stride) + (long long)p0 * D;
                    warp_copy_words_async<P * D>(rawh + (sb * G + gg) * (P * D), sh, ne,
                                                 np == P && ((P * D) & 3) == 0, vech, lane);
#if !PAYOFF_PLANE
                    warp_copy_words_async<P * D>(rawl + (sb * G + gg) * (P * D), sh + (long long)m * D, ne,
                                                 np == P && ((P * D) & 3) == 0, vecl, lane);
#endif
                }
                if (g < G && l0 + g < batch && p < np) {
                    async_copy8(yraw + (sb * G + g) * P + p, y + (l0 + g) * m + p0 + p);
#if PAYOFF_PLANE
                    // Payoff (g, p) at double g P + p of the stage's low-word buffer.
                    const unsigned* sg0 = (const unsigned*)(states + (l0 + g) * path_stride);
                    async_copy8((double*)(rawl + sb * (G * P * D)) + g * P + p,
                                (const double*)(sg0 + (long long)m * D) + p0 + p);
#endif
                }
            }
            async_copy_commit();
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
            async_copy_wait<STAGES - 1>();  // chunk c's group is complete
            __syncwarp();  // chunk c's copies by every lane of the warp are visible
            const unsigned* rbh = rawh + sb * (G * P * D);
            const unsigned* rbl = rawl + sb * (G * P * D);
            const double* yb = yraw + sb * (G * P);
            // Which paths enter (before waiting for the psi buffer).
            const bool mine = g < G && l0 + g < batch && p < np;
            bool f = false;
            if (mine) {
#if PAYOFF_PLANE
                const double pv = ((const double*)rbl)[tid];  // tid = g P + p
#else
                const double pv = payoff_value(rbh + tid * D, rbl + tid * D, strike);
#endif
                payoff[(l0 + g) * m + c * P + p] = pv;
                f = !itm_only || pv > 0.0;
            }
            const unsigned mask = __ballot_sync(0xffffffffu, f);
            // Compaction: an entering path's lane writes its index at its rank among the
            // entering paths of its regression (the bits of its lane group below it).
            const int j0 = lane / P;
            const unsigned group = P == 32 ? mask : (mask >> (j0 * P)) & ((1u << (P & 31)) - 1u);
            const int gcn = __popc(group);
            if (f) src[g * P + __popc(group & ((1u << p) - 1u))] = p;
            __syncwarp();
            if (c >= 2) named_sync(3 + buf);  // the tile warps are done with psi[buf]
            real* pb = psi + buf * (G * P * NEP);
            // y of the entering paths: lane p of group g writes slot p.
            if (g < G && p < gcn)
                pb[(g * P + p) * NEP + psi_pos(N)] =
                    (real)yb[g * P + (gcn == np ? p : src[g * P + p])];
            // Basis values of the entering paths, in order: one row per compacted slot,
            // lanes over the row's positions.
#pragma unroll 1
            for (int j = 0; j < GROUPS_PER_WARP; ++j) {
                const int gg = warp * GROUPS_PER_WARP + j;
                if (gg >= G) break;
                const unsigned bits = P == 32 ? mask : (mask >> (j * P)) & ((1u << (P & 31)) - 1u);
                const int cn = __popc(bits);
                const unsigned* rgh = rbh + gg * (P * D);
                const int* sg = src + gg * P;
                real* out = pb + gg * (P * NEP) + lane;
                auto row = [&](int slot, int pp) {
                    const unsigned* sph = rgh + pp * D;
#pragma unroll
                    for (int k = 0; k < TPL; ++k) {
                        // x = 1, then x = x * (S[asset] * inv_spot) along the chain.
                        double x = 1.0 * (state_high(sph, cha[k][0]) * chi[k][0]);
#pragma unroll
                        for (int e = 1; e < DEG; ++e)
                            if (cha[k][e] >= 0) x = x * (state_high(sph, cha[k][e]) * chi[k][e]);
                        *(live[k] ? out + slot * NEP + 32 * k : my_junk) = (real)x;
                    }
                };
                if (cn == np) {  // every path of the chunk enters: slot = path
#pragma unroll 4
                    for (int slot = 0; slot < cn; ++slot) row(slot, slot);
                } else {
#pragma unroll 4
                    for (int slot = 0; slot < cn; ++slot) row(slot, sg[slot]);
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
#if TILE_PREFETCH
                // The next row's tile-row values are loaded before this row's products
                // (the column values too would not fit the register budget).
                real rv[4];
                if (cn > 0) load_quad(base, tr, rv);
#pragma unroll 1
                for (int slot = 0; slot < cn; ++slot) {
                    real cv[4], rn[4];
                    load_quad(base + slot * NEP, tc, cv);
                    load_quad(base + min(slot + 1, P - 1) * NEP, tr, rn);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][j] = MADD(rv[i], cv[j], acc[i][j]);
#pragma unroll
                    for (int i = 0; i < 4; ++i) rv[i] = rn[i];
                }
#else
#pragma unroll 2
                for (int slot = 0; slot < cn; ++slot) {
                    real rv[4], cv[4];
                    load_quad(base + slot * NEP, tr, rv);
                    load_quad(base + slot * NEP, tc, cv);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][j] = MADD(rv[i], cv[j], acc[i][j]);
                }
#endif
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
#endif  // TENSOR_CORES
