// Kernels of the GPU nested Monte Carlo engine (src/gpu_engine.rs), around the path
// generator (paths.cu), the fused regression build (regression.cu) and the batched
// solvers: cash flows at maturity, European values, the Longstaff-Schwartz exercise
// update (with the fallback means and the discounted cash flows of the next step), the
// selection of the systems to solve, the per-step solver statistics, the values of the
// positions at the exposure dates, and the exposure statistics (sums, Welford means and
// an exact radix select for the PFE quantile).
//
// Arithmetic follows src/engine.rs operation by operation (compiled with --fmad=false,
// IEEE division): sums over inner paths run in increasing path index from 0.0, the
// payoff is that of src/scenario.rs, and basis values are psi_0 = 1,
// psi_t = psi_{parent[t]} * (S_h[asset[var[t]]] * inv_spot[var[t]]) as in src/basis.rs, S_h
// the price's high word (state_high in prelude.cu, high_word in kernels/src/basis.rs).
// Only the exposure statistics over outer paths (src/exposure.rs) are summed in another
// (fixed, deterministic) order.
//
// Inner states: element (l, mm, i) of the block of m * d doubles at states + l * stride (a
// view of the path generator's [l][s][mm][i] layout at one date), held as the two planes
// of words of prelude.cu: the high word of element e = mm * d + i at word e of the
// block, its low word at word m * d + e. Cash flows: (l, mm) at
// cash[l * m + mm], with the date index they are paid at in cash_date. Outer states:
// (l, k, i) at outer[l * outer_stride + k * d + i].
//
// The per-outer-path kernels run one warp per outer path over tiles of 32 inner paths:
// the warp copies the tile's 32 * d contiguous doubles into shared memory with coalesced
// loads (rows padded to an odd stride, so that the row-per-lane reads are free of bank
// conflicts), each lane then works on its own inner path, and sums over inner paths are
// taken in path order by broadcasting the lanes' terms (engine_ordered_sum).

#define ENGINE_MAX_N 64

// The solver's per-system report (kernels/src/cuda/solver.rs GpuReport, 16 bytes).
struct EngineReport {
    double residual;
    unsigned method;
    unsigned status;
};

// One inner path's states in the two planes: s[i] joins hi[i] and lo[i].
struct StateRow {
    const unsigned* hi;
    const unsigned* lo;
    __device__ __forceinline__ double operator[](int i) const { return state_join(hi, lo, i); }
};

// Payoff kinds: level = S[ua[0]] (0), sum_k uw[k] S[ua[k]] (1), max_k S[ua[k]] (2); s a
// StateRow or a pointer to the doubles (outer states).
template <typename Row>
__device__ __forceinline__ double engine_payoff(const Row& s, int kind, int put, double strike,
                                                const int* __restrict__ ua,
                                                const double* __restrict__ uw, int nu) {
    double level;
    if (kind == 0) {
        level = s[ua[0]];
    } else if (kind == 1) {
        level = 0.0;
#pragma unroll 8
        for (int k = 0; k < nu; ++k) level = level + uw[k] * s[ua[k]];
    } else {
        level = __longlong_as_double(0xfff0000000000000ULL);  // -infinity
#pragma unroll 8
        for (int k = 0; k < nu; ++k) level = fmax(level, s[ua[k]]);
    }
    return put ? fmax(strike - level, 0.0) : fmax(level - strike, 0.0);
}

// Tiles of 32 inner paths in shared memory. A warp's share holds `bufs` (1 or 2) tile
// buffers of `tile` doubles each (0 buffers when even one tile does not fit: rows are
// then read from global memory): the tile's high words in rows of ds words (ds odd), then
// its low words likewise (32 ds words each: the 32 ds doubles of the buffer). With two
// buffers the copy of tile t + 1 (cp.async, sm_80+) is in flight while the warp works on
// tile t, so the warp never waits for a whole tile's latency between two tiles.
struct EngineTiles {
    const double* src;  // states + l * stride: the outer path's block of m * d doubles
    double* buf;        // the warp's buffers (nullptr: no staging)
    int tile, bufs, m, d, ds, lane;
};

// The warp's asynchronous copy of `rows` contiguous rows of d words from src (global)
// into rows of stride ds at dst (shared): in 16-byte pieces when the rows are stored
// without padding (ds == d) and both are 16-byte aligned (a tail of fewer than 4 words in
// 4-byte pieces), else word by word into the padded rows. Every lane calls it; no commit.
__device__ __forceinline__ void engine_rows_copy(unsigned* dst, const unsigned* src, int rows, int d,
                                                 int ds, int lane) {
    const int total = rows * d;
    if (ds == d && ((((unsigned long long)src | (unsigned long long)dst) & 15ull) == 0)) {
        const int nv = total & ~3;
        for (int e = 4 * lane; e < nv; e += 128) async_copy16(dst + e, src + e);
        for (int e = nv + lane; e < total; e += 32) async_copy4(dst + e, src + e);
    } else {
        const int qd = 32 / d, rd = 32 % d;
        int r = lane / d;
        int i = lane - r * d;
        for (int e = lane; e < total; e += 32) {
            async_copy4(dst + r * ds + i, src + e);
            r += qd;
            i += rd;
            if (i >= d) {
                i -= d;
                ++r;
            }
        }
    }
}

// Issues the copy of tile t (inner paths 32 t .. 32 t + rows, both planes) into buffer
// t % bufs and commits it as one group.
__device__ __forceinline__ void engine_tile_issue(const EngineTiles& T, int t) {
    const int mm0 = 32 * t;
    const int rows = min(32, T.m - mm0);
    const unsigned* src = (const unsigned*)T.src + (long long)mm0 * T.d;
    unsigned* dst = (unsigned*)(T.buf + (t % T.bufs) * T.tile);
    engine_rows_copy(dst, src, rows, T.d, T.ds, T.lane);
    engine_rows_copy(dst + 32 * T.ds, src + (long long)T.m * T.d, rows, T.d, T.ds, T.lane);
    async_copy_commit();
}

// Starts a pass over the tiles (every lane of the warp calls it).
__device__ __forceinline__ void engine_tiles_begin(const EngineTiles& T) {
    if (T.buf != nullptr) {
        __syncwarp();  // the previous pass's lanes are done with the buffers
        engine_tile_issue(T, 0);
    }
}

// This lane's row of tile t: waits for the tile's copy (after issuing the next tile's
// when there are two buffers) and synchronises the warp. Every lane calls it, for
// t = 0, 1, ... in order, and calls engine_tile_done after its last use of the row.
__device__ __forceinline__ StateRow engine_tile_row(const EngineTiles& T, int t) {
    const int mm0 = 32 * t;
    if (T.buf == nullptr) {
        const unsigned* h = (const unsigned*)T.src + (long long)(mm0 + T.lane) * T.d;
        return {h, h + (long long)T.m * T.d};
    }
    if (T.bufs == 2 && mm0 + 32 < T.m) {
        engine_tile_issue(T, t + 1);
        async_copy_wait<1>();
    } else {
        async_copy_wait<0>();
    }
    __syncwarp();
    const unsigned* h = (const unsigned*)(T.buf + (t % T.bufs) * T.tile) + T.lane * T.ds;
    return {h, h + 32 * T.ds};
}

// After the warp's last read of tile t: with one buffer, the next tile is issued here.
__device__ __forceinline__ void engine_tile_done(const EngineTiles& T, int t) {
    if (T.buf == nullptr) return;
    __syncwarp();  // every lane has read the buffer the next copy overwrites
    if (T.bufs == 1 && 32 * (t + 1) < T.m) engine_tile_issue(T, t + 1);
}

// sum + v_0 + v_1 + ... + v_{rows-1} over the lanes i < rows whose `take` is set, added
// one at a time in lane order (the CPU's order over inner paths). Every lane of the warp
// calls it and gets the same result.
__device__ __forceinline__ double engine_ordered_sum(double sum, double v, bool take, int rows) {
    const unsigned mask = __ballot_sync(0xffffffffu, take);
    for (int i = 0; i < rows; ++i) {
        const double vi = __shfl_sync(0xffffffffu, v, i);
        if ((mask >> i) & 1u) sum = sum + vi;
    }
    return sum;
}

// Shared memory of the warp-per-outer-path kernels: `per_warp` doubles per warp (the
// tile first, then kernel-specific scratch).
extern __shared__ __align__(16) double engine_smem[];

// The warp's EngineTiles for outer path l (after ENGINE_WARP_SETUP).
#define ENGINE_TILES(T)                                                                  \
    const EngineTiles T = {states + l * stride, tile_doubles > 0 ? warp_smem : nullptr, \
                           tile_doubles, bufs, m, d, ds, lane}

#define ENGINE_WARP_SETUP(per_warp)                                                 \
    const int lane = threadIdx.x & 31;                                              \
    const long long l = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;   \
    double* const warp_smem = engine_smem + (long long)(threadIdx.x >> 5) * (per_warp)

// cash[l * m + mm] = payoff(state(l, mm)), cash_date[..] = date, for l < c, mm < m; and
// where next_date >= 0, y = cash * discount[date - next_date] (the discounted cash flows
// of the first regression step). One warp per outer path.
extern "C" __global__ void engine_cash_init(
    const double* __restrict__ states, long long stride, long long c, int m, int d, int ds,
    int tile_doubles, int bufs, int per_warp, int kind, int put, double strike,
    const int* __restrict__ ua, const double* __restrict__ uw, int nu, unsigned date, int next_date,
    const double* __restrict__ discount, double* __restrict__ cash,
    unsigned* __restrict__ cash_date, double* __restrict__ y) {
    ENGINE_WARP_SETUP(per_warp);
    if (l >= c) return;
    ENGINE_TILES(T);
    engine_tiles_begin(T);
    for (int tt = 0; 32 * tt < m; ++tt) {
        const int rows = min(32, m - 32 * tt);
        const StateRow s = engine_tile_row(T, tt);
        if (lane < rows) {
            const long long t = l * m + 32 * tt + lane;
            const double p = engine_payoff(s, kind, put, strike, ua, uw, nu);
            cash[t] = p;
            cash_date[t] = date;
            if (next_date >= 0) y[t] = p * discount[date - (unsigned)next_date];
        }
        engine_tile_done(T, tt);
    }
}

// European position maturing at the states' date: where alive[l],
// values[l] += q * df * (sum over mm, in order, of payoff(state(l, mm))) / m.
extern "C" __global__ void engine_european(const double* __restrict__ states, long long stride,
                                           long long c, int m, int d, int ds, int tile_doubles,
                                           int bufs, int per_warp, int kind, int put,
                                           double strike,
                                           const int* __restrict__ ua,
                                           const double* __restrict__ uw, int nu,
                                           const unsigned char* __restrict__ alive, double q,
                                           double df, double* __restrict__ values) {
    ENGINE_WARP_SETUP(per_warp);
    if (l >= c || !alive[l]) return;
    ENGINE_TILES(T);
    engine_tiles_begin(T);
    double sum = 0.0;
    for (int tt = 0; 32 * tt < m; ++tt) {
        const int rows = min(32, m - 32 * tt);
        const StateRow s = engine_tile_row(T, tt);
        const double p = lane < rows ? engine_payoff(s, kind, put, strike, ua, uw, nu) : 0.0;
        engine_tile_done(T, tt);
        sum = engine_ordered_sum(sum, p, lane < rows, rows);
    }
    if (lane == 0) values[l] = values[l] + q * df * sum / (double)m;
}

// The continuation psi(s) . beta of one inner path from the high words h of its states
// (the basis reads the prices with the low 32 bits of the significand cleared, as the
// CPU's BasisTables::eval does through high_word), as the CPU engine forms it:
// ((0 + 1 beta_0) + psi_1 beta_1) + ..., psi_k = psi_parent[k] * (S_h[var_asset[k]] *
// var_inv[k]) (on a flat basis psi_k = S_h[var_asset[k]] * var_inv[k]). The flat loop is
// unrolled by 8 (the loads of 8 terms in flight ahead of the chain; the same operations in
// the same order).
__device__ __forceinline__ double engine_continuation(const unsigned* h, const double* beta,
                                                      int flat, int n, const int* parent,
                                                      const int* var_asset,
                                                      const double* var_inv) {
    double continuation = 0.0;
    continuation = continuation + 1.0 * beta[0];
    if (flat) {
#pragma unroll 8
        for (int k = 1; k < n; ++k)
            continuation = continuation + (state_high(h, var_asset[k]) * var_inv[k]) * beta[k];
    } else {
        double psi[ENGINE_MAX_N];
        psi[0] = 1.0;
        for (int k = 1; k < n; ++k) {
            psi[k] = psi[parent[k]] * (state_high(h, var_asset[k]) * var_inv[k]);
            continuation = continuation + psi[k] * beta[k];
        }
    }
    return continuation;
}

// The exercise decision of one inner path from the high words h[i] of its states (all
// that the basis reads) and its payoff (engine_payoff of the full states, as the
// regression build or the path kernel stored it): where the payoff is positive and at
// least the continuation (psi . beta when ok, else mean), *cf becomes the payoff and the
// function returns true.
__device__ __forceinline__ bool engine_exercises(
    const unsigned* h, double payoff, bool ok, const double* beta, double mean, int flat, int n,
    const int* parent, const int* var_asset, const double* var_inv, double* cf) {
    if (!(payoff > 0.0)) return false;
    const double continuation =
        ok ? engine_continuation(h, beta, flat, n, parent, var_asset, var_inv) : mean;
    if (!(payoff >= continuation)) return false;
    *cf = payoff;
    return true;
}

// The result of one inner path's exercise decision at `date` (t its index, cf and cd its
// cash flow and date after the decision, `exercised` whether it exercised there): the
// new cash flow is stored where it exercised, and where next_date >= 0 the discounted
// cash flow y[t] = cf * discount[cd - next_date] for the next regression step.
__device__ __forceinline__ void engine_exercise_store(bool exercised, unsigned date, long long t, double cf,
                                                      unsigned cd, const double* discount, int next_date,
                                                      double* cash, unsigned* cash_date, double* y) {
    if (exercised) {
        cd = date;
        cash[t] = cf;
        cash_date[t] = cd;
    }
    if (next_date >= 0) y[t] = cf * discount[cd - (unsigned)next_date];
}

// The exercise update at exercise date `date`, one warp per outer path l. The outer path
// takes part where alive[l] and counts[l] > 0. Its continuation estimate is psi . beta
// with beta = x[l * n ..] (converted to double) where the system was selected
// (counts[l] >= n) and solved with status Ok; otherwise the fallback: the mean of y (the
// discounted cash flows at `date`) over the regression paths (payoff > 0 when itm_only,
// else all), divided by counts[l]. Where the payoff is positive and at least the
// continuation, the cash flow becomes the payoff, paid at `date`. Then, where
// next_date >= 0, y = cash * discount[cash_date - next_date] for every inner path (also
// of the outer paths that take no part): the next regression step's input. The payoffs
// are those the regression build stored (payoffs[l * m + mm]); the states' high words are
// what the basis reads. (The payoff tables kind .. nu are not read.)
// Shared memory per warp: bufs tile buffers of tile_doubles, then n doubles of beta.
template <typename real>
__device__ __forceinline__ void engine_exercise_impl(
    const double* __restrict__ states, long long stride, long long c, int m, int d, int ds,
    int tile_doubles, int bufs, int per_warp, int kind, int put, double strike,
    const int* __restrict__ ua, const double* __restrict__ uw, int nu, int itm_only, int n, const int* __restrict__ parent,
    const int* __restrict__ var_asset, const double* __restrict__ var_inv, int flat,
    const real* __restrict__ x, const EngineReport* __restrict__ reports,
    const unsigned char* __restrict__ alive, const unsigned* __restrict__ counts,
    const double* __restrict__ discount, unsigned date, int next_date, double* __restrict__ y,
    double* __restrict__ cash, unsigned* __restrict__ cash_date,
    const double* __restrict__ payoffs) {
    ENGINE_WARP_SETUP(per_warp);
    if (l >= c) return;
    ENGINE_TILES(T);
    double* beta = warp_smem + bufs * tile_doubles;
    const unsigned count = counts[l];
    const bool active = alive[l] && count > 0;
    bool ok = false;
    if (active && count >= (unsigned)n) {
        const EngineReport r = reports[l];
        ok = r.status == 0 && (r.method & 0xffu) <= 2;
    }
    if (ok) {
        for (int k = lane; k < n; k += 32) beta[k] = (double)x[l * n + k];
        __syncwarp();
    }
    double mean = 0.0;
    if (active && !ok) {
        double sum = 0.0;
        for (int tt = 0; 32 * tt < m; ++tt) {
            const int mm0 = 32 * tt;
            const int rows = min(32, m - mm0);
            bool take = lane < rows;
            if (itm_only) take = take && payoffs[l * m + mm0 + lane] > 0.0;
            const double v = take ? y[l * m + mm0 + lane] : 0.0;
            sum = engine_ordered_sum(sum, v, take, rows);
        }
        mean = sum / (double)count;
    }
    if (active) engine_tiles_begin(T);
    for (int tt = 0; 32 * tt < m; ++tt) {
        const int mm0 = 32 * tt;
        const int rows = min(32, m - mm0);
        const StateRow s = active ? engine_tile_row(T, tt) : StateRow{nullptr, nullptr};
        if (lane < rows) {
            const long long t = l * m + mm0 + lane;
            double cf = cash[t];
            unsigned cd = cash_date[t];
            const bool ex = active && engine_exercises(s.hi, payoffs[t], ok, beta, mean, flat, n,
                                                       parent, var_asset, var_inv, &cf);
            engine_exercise_store(ex, date, t, cf, cd, discount, next_date, cash, cash_date, y);
        }
        if (active) engine_tile_done(T, tt);
    }
}

#define ENGINE_EXERCISE(name, real)                                                              \
    extern "C" __global__ void name(                                                             \
        const double* __restrict__ states, long long stride, long long c, int m, int d, int ds, \
        int tile_doubles, int bufs, int per_warp, int kind, int put, double strike,             \
        const int* __restrict__ ua, const double* __restrict__ uw, int nu, int itm_only, int n, \
        const int* __restrict__ parent, const int* __restrict__ var_asset,                      \
        const double* __restrict__ var_inv, int flat, const real* __restrict__ x,               \
        const EngineReport* __restrict__ reports, const unsigned char* __restrict__ alive,      \
        const unsigned* __restrict__ counts, const double* __restrict__ discount,               \
        unsigned date, int next_date, double* __restrict__ y, double* __restrict__ cash,        \
        unsigned* __restrict__ cash_date, const double* __restrict__ payoffs) {                 \
        engine_exercise_impl<real>(states, stride, c, m, d, ds, tile_doubles, bufs, per_warp,   \
                                   kind, put, strike, ua, uw, nu, itm_only, n, parent, var_asset,     \
                                   var_inv, flat, x, reports, alive, counts, discount, date,    \
                                   next_date, y, cash, cash_date, payoffs);                     \
    }
ENGINE_EXERCISE(engine_exercise_f64, double)
ENGINE_EXERCISE(engine_exercise_f32, float)

// ---- The exercise update as a stream of tiles (few persistent warps) ----
//
// The same update as engine_exercise_impl (the same decisions and bits), shaped to run
// beside the inner-path kernel of the next date on another stream: a small grid (a
// block or two per SM, `warps` warps each) whose warp gw of TW takes the contiguous outer
// paths [c gw / TW, c (gw + 1) / TW) and streams their tiles of 32 inner paths through a
// ring of ENGINE_STREAM_BUFS buffers, ENGINE_STREAM_BUFS - 1 tiles ahead and across the
// boundaries between outer paths, so that a few warps keep enough bytes in flight to read
// at the device's bandwidth. It reads half the state bytes: a buffer holds the tile's
// high words only (rows at an odd stride ds), the payoffs the regression build stored,
// and the cash flows and dates, so that no lane waits on a global load per tile (the
// basis reads the high words alone, engine_exercises); the discount factors and the
// basis tables sit in
// shared memory; alive, counts, the report and beta of an outer path are loaded while
// the previous one is worked on. The states of an outer path that takes no part are not
// copied (its cash flows are: y is updated for every inner path). The fallback mean
// (fewer than n regression paths or no Ok solution, rare) reads the stored payoffs
// straight from global memory.
//
// The payoff itself is not evaluated here (no payoff tables): the stored payoffs stand for
// it. Shared memory: discount[n_discount] | var_inv[n] | var_asset[n] int | parent[n] int
// (rounded up to an even count of doubles), then per warp ENGINE_STREAM_BUFS slots of
// 16 ds + 80 doubles (32 ds words of high words, then 32 doubles of payoffs, 32 of cash
// flows, 32 dates as unsigned) and n rounded up to even doubles of beta.
#ifndef ENGINE_STREAM_BUFS
#define ENGINE_STREAM_BUFS 4
#endif

template <typename real>
__device__ __forceinline__ void engine_exercise_stream_impl(
    const double* __restrict__ states, long long stride, long long c, int m, int d, int ds,
    int itm_only, int n, const int* __restrict__ parent_g,
    const int* __restrict__ var_asset_g, const double* __restrict__ var_inv_g, int flat,
    const real* __restrict__ x, const EngineReport* __restrict__ reports,
    const unsigned char* __restrict__ alive, const unsigned* __restrict__ counts,
    const double* __restrict__ discount_g, int n_discount, unsigned date, int next_date,
    double* __restrict__ y, double* __restrict__ cash, unsigned* __restrict__ cash_date,
    const double* __restrict__ payoff) {
    constexpr int K = ENGINE_STREAM_BUFS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    double* const disc = engine_smem;
    double* const var_inv = disc + n_discount;
    int* const var_asset = (int*)(var_inv + n);
    int* const parent = var_asset + n;
    for (int i = threadIdx.x; i < n_discount; i += blockDim.x) disc[i] = discount_g[i];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        var_inv[i] = var_inv_g[i];
        var_asset[i] = var_asset_g[i];
        parent[i] = parent_g[i];
    }
    __syncthreads();
    const int tables = (n_discount + 2 * n + 1) & ~1;
    const int slot = 16 * ds + 80;
    const int npad = (n + 1) & ~1;
    double* const wsm = engine_smem + tables + (long long)warp * (K * slot + npad);
    double* const beta = wsm + K * slot;

    const long long tw = (long long)gridDim.x * warps, gw = (long long)blockIdx.x * warps + warp;
    const long long l0 = c * gw / tw, l1 = c * (gw + 1) / tw;
    const int tpp = (m + 31) / 32;

    // The issue cursor: tile it of outer path il goes to slot is.
    long long il = l0;
    int it = 0, is = 0;
    // ia: il takes part; (na, nc): alive and counts of il + 1, loaded a whole outer path
    // before they are looked at.
    bool ia = il < l1 && alive[il] && counts[il] > 0;
    unsigned na = 0, nc = 0;
    if (il + 1 < l1) {
        na = alive[il + 1];
        nc = counts[il + 1];
    }
    auto issue = [&]() {
        if (il < l1) {
            const int mm0 = 32 * it;
            const int rows = min(32, m - mm0);
            double* const dst = wsm + is * slot;
            if (ia) {
                engine_rows_copy((unsigned*)dst, (const unsigned*)(states + il * stride) + (long long)mm0 * d,
                                 rows, d, ds, lane);
            }
            if (lane < rows) {
                const long long t = il * m + mm0 + lane;
                if (ia) async_copy8(dst + 16 * ds + lane, payoff + t);
                async_copy8(dst + 16 * ds + 32 + lane, cash + t);
                async_copy4((unsigned*)(dst + 16 * ds + 64) + lane, cash_date + t);
            }
            if (++it == tpp) {
                it = 0;
                ++il;
                ia = (na != 0) & (nc > 0);
                if (il + 1 < l1) {
                    na = alive[il + 1];
                    nc = counts[il + 1];
                }
            }
            if (++is == K) is = 0;
        }
        async_copy_commit();
    };

    // The per-outer-path inputs, one outer path ahead.
    unsigned n_count = 0, n_alive = 0, n_status = 1, n_method = 0;
    double n_b0 = 0.0, n_b1 = 0.0;
    auto fetch = [&](long long l) {
        if (l < l1) {
            n_count = counts[l];
            n_alive = alive[l];
            const EngineReport r = reports[l];
            n_status = r.status;
            n_method = r.method;
            n_b0 = lane < n ? (double)x[l * n + lane] : 0.0;
            n_b1 = lane + 32 < n ? (double)x[l * n + lane + 32] : 0.0;
        }
    };
    fetch(l0);
    for (int k = 0; k < K - 1; ++k) issue();

    bool active = false, ok = false;
    double mean = 0.0;
    long long l = l0;
    int tt = 0, ps = 0;
    const long long tiles = (l1 - l0) * tpp;
#pragma unroll 1
    for (long long q = 0; q < tiles; ++q) {
        __syncwarp();  // every lane is done with the slot issued next and with beta
        issue();
        if (tt == 0) {
            const unsigned count = n_count;
            active = n_alive && count > 0;
            ok = active && count >= (unsigned)n && n_status == 0 && (n_method & 0xffu) <= 2;
            if (ok) {
                if (lane < n) beta[lane] = n_b0;
                if (lane + 32 < n) beta[lane + 32] = n_b1;
            }
            fetch(l + 1);
            mean = 0.0;
            if (active && !ok) {
                double sum = 0.0;
                for (int t2 = 0; 32 * t2 < m; ++t2) {
                    const int mm0 = 32 * t2;
                    const int rows = min(32, m - mm0);
                    bool take = lane < rows;
                    if (itm_only) take = take && payoff[l * m + mm0 + lane] > 0.0;
                    const double v = take ? y[l * m + mm0 + lane] : 0.0;
                    sum = engine_ordered_sum(sum, v, take, rows);
                }
                mean = sum / (double)count;
            }
        }
        async_copy_wait<K - 1>();  // this tile's group is complete
        __syncwarp();              // and visible to the whole warp, beta too
        const double* const buf = wsm + ps * slot;
        const int mm0 = 32 * tt;
        const int rows = min(32, m - mm0);
        if (lane < rows) {
            const long long t = l * m + mm0 + lane;
            double cf = buf[16 * ds + 32 + lane];
            unsigned cd = ((const unsigned*)(buf + 16 * ds + 64))[lane];
            bool ex = false;
            if (active) {
                const unsigned* h = (const unsigned*)buf + lane * ds;
                ex = engine_exercises(h, buf[16 * ds + lane], ok, beta, mean, flat, n, parent,
                                      var_asset, var_inv, &cf);
            }
            engine_exercise_store(ex, date, t, cf, cd, disc, next_date, cash, cash_date, y);
        }
        if (++ps == K) ps = 0;
        if (++tt == tpp) {
            tt = 0;
            ++l;
        }
    }
    async_copy_wait<0>();  // no copy outlives the kernel
}

#define ENGINE_EXERCISE_STREAM(name, real)                                                     \
    extern "C" __global__ void name(                                                           \
        const double* __restrict__ states, long long stride, long long c, int m, int d,        \
        int ds, int itm_only, int n,                                                           \
        const int* __restrict__ parent, const int* __restrict__ var_asset,                    \
        const double* __restrict__ var_inv, int flat, const real* __restrict__ x,             \
        const EngineReport* __restrict__ reports, const unsigned char* __restrict__ alive,    \
        const unsigned* __restrict__ counts, const double* __restrict__ discount,             \
        int n_discount, unsigned date, int next_date, double* __restrict__ y,                 \
        double* __restrict__ cash, unsigned* __restrict__ cash_date,                          \
        const double* __restrict__ payoff) {                                                  \
        engine_exercise_stream_impl<real>(states, stride, c, m, d, ds, itm_only, n, parent,   \
                                          var_asset, var_inv,                                  \
                                          flat, x, reports, alive, counts, discount,          \
                                          n_discount, date, next_date, y, cash, cash_date,    \
                                          payoff);                                            \
    }
ENGINE_EXERCISE_STREAM(engine_exercise_stream_f64, double)
ENGINE_EXERCISE_STREAM(engine_exercise_stream_f32, float)

// The systems not to solve (not alive, or counts < n) become A = I, b = 0, so that the
// whole batch goes to the solver and solution l stays at x[l * n]. One warp per system.
template <typename real>
__device__ __forceinline__ void engine_select_impl(const unsigned char* __restrict__ alive,
                                                   const unsigned* __restrict__ counts,
                                                   long long c, int n, real* __restrict__ a,
                                                   real* __restrict__ b) {
    const int lane = threadIdx.x & 31;
    const long long l = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (l >= c) return;
    if (alive[l] && counts[l] >= (unsigned)n) return;
    real* al = a + l * n * n;
    for (int e = lane; e < n * n; e += 32) al[e] = e % (n + 1) == 0 ? (real)1 : (real)0;
    for (int row = lane; row < n; row += 32) b[l * n + row] = (real)0;
}

extern "C" __global__ void engine_select_f64(const unsigned char* __restrict__ alive,
                                             const unsigned* __restrict__ counts, long long c,
                                             int n, double* __restrict__ a,
                                             double* __restrict__ b) {
    engine_select_impl<double>(alive, counts, c, n, a, b);
}

extern "C" __global__ void engine_select_f32(const unsigned char* __restrict__ alive,
                                             const unsigned* __restrict__ counts, long long c,
                                             int n, float* __restrict__ a,
                                             float* __restrict__ b) {
    engine_select_impl<float>(alive, counts, c, n, a, b);
}

// Statistics of one regression step over the selected systems (alive, counts >= n), as
// BatchSummary::from_reports and the engine's too-few count: record[0] systems,
// [1..3] per method, [4..7] per status, [8] discarded eigenvalues, [9] too few paths
// (alive, 0 < counts < n), [10] the bits of the largest positive residual of status Ok,
// [11] 1 if a residual of status Ok is NaN. Reports with unknown codes count as status
// Failed with a NaN residual (GpuReport::to_system_report). residual[l] = (float) the
// residual of a selected system, NaN otherwise (with keep, residual[l] is written only
// for the selected systems: a second summary of the same step over other outer paths,
// the walk's fallback). record must be zeroed first.
extern "C" __global__ void engine_step_summary(const EngineReport* __restrict__ reports,
                                               const unsigned char* __restrict__ alive,
                                               const unsigned* __restrict__ counts, long long c,
                                               int n, unsigned long long* __restrict__ record,
                                               float* __restrict__ residual, int keep) {
    __shared__ unsigned sh[10];
    __shared__ unsigned long long sh_max;
    __shared__ unsigned sh_nan;
    if (threadIdx.x < 10) sh[threadIdx.x] = 0;
    if (threadIdx.x == 0) {
        sh_max = 0;
        sh_nan = 0;
    }
    __syncthreads();
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l < c) {
        const bool al = alive[l] != 0;
        const unsigned cnt = counts[l];
        float res_out = __int_as_float(0x7fc00000);
        if (al && cnt >= (unsigned)n) {
            const EngineReport r = reports[l];
            unsigned method = r.method & 0xffu;
            unsigned status = r.status;
            unsigned discarded = r.method >> 8;
            double res = r.residual;
            if (method > 2 || status > 3) {
                if (method > 2) method = 0;
                status = 2;
                res = __longlong_as_double(0x7ff8000000000000LL);
                discarded = 0;
            }
            atomicAdd(&sh[0], 1u);
            atomicAdd(&sh[1 + method], 1u);
            atomicAdd(&sh[4 + status], 1u);
            if (discarded) atomicAdd(&sh[8], discarded);
            if (status == 0) {
                if (res != res)
                    atomicOr(&sh_nan, 1u);
                else if (res > 0.0)
                    atomicMax(&sh_max, (unsigned long long)__double_as_longlong(res));
            }
            if (res == res) res_out = (float)res;
            residual[l] = res_out;
        } else {
            if (al && cnt > 0) atomicAdd(&sh[9], 1u);
            if (!keep) residual[l] = res_out;
        }
    }
    __syncthreads();
    if (threadIdx.x < 10) {
        if (sh[threadIdx.x]) atomicAdd(&record[threadIdx.x], (unsigned long long)sh[threadIdx.x]);
    } else if (threadIdx.x == 10) {
        if (sh_max) atomicMax(&record[10], sh_max);
    } else if (threadIdx.x == 11) {
        if (sh_nan) atomicOr(&record[11], 1ull);
    }
}

// The value of an American position at exposure date `date` on the outer paths where it
// is alive: continuation = (sum over mm, in order, of cash * discount[cash_date - date])
// / m; with allow_exercise, payoff = payoff(outer state) > 0 and payoff >= continuation,
// the position is exercised (value = payoff, alive[l] = 0, one more in *exercises), else
// the value is the continuation; values[l] += q * value. One warp per outer path.
extern "C" __global__ void engine_american_value(
    const double* __restrict__ cash, const unsigned* __restrict__ cash_date,
    const double* __restrict__ discount, unsigned date, long long c, int m,
    const double* __restrict__ outer, long long outer_stride, int kind, int put, double strike,
    const int* __restrict__ ua, const double* __restrict__ uw, int nu, double q,
    int allow_exercise, unsigned char* __restrict__ alive, double* __restrict__ values,
    unsigned long long* __restrict__ exercises) {
    ENGINE_WARP_SETUP(0);
    (void)warp_smem;
    if (l >= c || !alive[l]) return;
    double sum = 0.0;
    for (int mm0 = 0; mm0 < m; mm0 += 32) {
        const int rows = min(32, m - mm0);
        double v = 0.0;
        if (lane < rows) {
            const long long t = l * m + mm0 + lane;
            v = cash[t] * discount[cash_date[t] - date];
        }
        sum = engine_ordered_sum(sum, v, lane < rows, rows);
    }
    if (lane != 0) return;
    const double cont = sum / (double)m;
    const double payoff = engine_payoff(outer + l * outer_stride, kind, put, strike, ua, uw, nu);
    double value = cont;
    if (allow_exercise && payoff > 0.0 && payoff >= cont) {
        alive[l] = 0;
        atomicAdd(exercises, 1ull);
        value = payoff;
    }
    values[l] = values[l] + q * value;
}

// Positions maturing at the outer states' date: where alive[l],
// values[l] += q * payoff(outer state); then alive[l] = 0. One thread per outer path.
extern "C" __global__ void engine_pay_maturing(const double* __restrict__ outer,
                                               long long outer_stride, long long c, int kind,
                                               int put, double strike,
                                               const int* __restrict__ ua,
                                               const double* __restrict__ uw, int nu, double q,
                                               unsigned char* __restrict__ alive,
                                               double* __restrict__ values) {
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= c) return;
    if (alive[l])
        values[l] =
            values[l] + q * engine_payoff(outer + l * outer_stride, kind, put, strike, ua, uw, nu);
    alive[l] = 0;
}

// ---- Exposure statistics over outer paths (src/exposure.rs) ----
//
// netted[k * m0 + l]: the netted value of outer path l at date k, k < dates.
// P^+ = (P > 0 ? P : +0.0) and P^- = (P < 0 ? P : +0.0): NaN counts as 0 in both, as
// f64::max(0.0) and f64::min(0.0) do.

#define ENGINE_STATS_THREADS 256

__device__ __forceinline__ double engine_pos(double v) { return v > 0.0 ? v : 0.0; }
__device__ __forceinline__ double engine_neg(double v) { return v < 0.0 ? v : 0.0; }

// partial[(k * gridDim.x + block) * 3 + {0,1,2}] = sums of P, P^+, P^- of date k = blockIdx.y
// over this block's share (fixed grid: deterministic).
extern "C" __global__ void engine_stats_sums(const double* __restrict__ netted, long long m0,
                                             double* __restrict__ partial) {
    __shared__ double sh[3][ENGINE_STATS_THREADS];
    const int k = blockIdx.y;
    const double* p = netted + (long long)k * m0;
    double s = 0.0, sp = 0.0, sn = 0.0;
    for (long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x; l < m0;
         l += (long long)gridDim.x * blockDim.x) {
        const double v = p[l];
        s = s + v;
        sp = sp + engine_pos(v);
        sn = sn + engine_neg(v);
    }
    sh[0][threadIdx.x] = s;
    sh[1][threadIdx.x] = sp;
    sh[2][threadIdx.x] = sn;
    __syncthreads();
    for (int h = ENGINE_STATS_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h)
            for (int j = 0; j < 3; ++j) sh[j][threadIdx.x] = sh[j][threadIdx.x] + sh[j][threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x < 3) partial[((long long)k * gridDim.x + blockIdx.x) * 3 + threadIdx.x] = sh[threadIdx.x][0];
}

// out[k * 3 + j] = sum over blocks b, in order, of partial[(k * blocks + b) * 3 + j].
extern "C" __global__ void engine_stats_sums_final(const double* __restrict__ partial, int blocks,
                                                   int dates, double* __restrict__ out) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= dates * 3) return;
    const int k = t / 3, j = t - k * 3;
    double s = 0.0;
    for (int b = 0; b < blocks; ++b) s = s + partial[((long long)k * blocks + b) * 3 + j];
    out[t] = s;
}

struct EngineWelford {
    double n, mean, m2;
};

__device__ __forceinline__ void engine_welford_push(EngineWelford& w, double x) {
    w.n = w.n + 1.0;
    const double delta = x - w.mean;
    w.mean = w.mean + delta / w.n;
    w.m2 = w.m2 + delta * (x - w.mean);
}

// Chan et al.'s combination of two Welford states.
__device__ __forceinline__ EngineWelford engine_welford_merge(EngineWelford a, EngineWelford b) {
    if (b.n == 0.0) return a;
    if (a.n == 0.0) return b;
    EngineWelford r;
    r.n = a.n + b.n;
    const double delta = b.mean - a.mean;
    r.mean = a.mean + delta * (b.n / r.n);
    r.m2 = a.m2 + b.m2 + delta * delta * (a.n * b.n / r.n);
    return r;
}

// Welford states of X_l = sum_{k=1..dates-1} lgd * df[k] * P_k^+ * dp[k] (the CVA per
// outer path, added in k order as exposure::estimate) and of P_v, v = value_date (the
// values V_0 is estimated from), per block:
// partial[block * 6 + {n, mean, m2 of X, n, mean, m2 of P_v}] (fixed grid: deterministic).
extern "C" __global__ void engine_stats_welford(const double* __restrict__ netted, long long m0,
                                                int dates, int value_date, double lgd,
                                                const double* __restrict__ df,
                                                const double* __restrict__ dp,
                                                double* __restrict__ partial) {
    __shared__ EngineWelford sx[ENGINE_STATS_THREADS], s0[ENGINE_STATS_THREADS];
    EngineWelford wx = {0.0, 0.0, 0.0}, w0 = {0.0, 0.0, 0.0};
    for (long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x; l < m0;
         l += (long long)gridDim.x * blockDim.x) {
        double x = 0.0;
        for (int k = 1; k < dates; ++k) x = x + lgd * df[k] * engine_pos(netted[k * m0 + l]) * dp[k];
        engine_welford_push(wx, x);
        engine_welford_push(w0, netted[value_date * m0 + l]);
    }
    sx[threadIdx.x] = wx;
    s0[threadIdx.x] = w0;
    __syncthreads();
    for (int h = ENGINE_STATS_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            sx[threadIdx.x] = engine_welford_merge(sx[threadIdx.x], sx[threadIdx.x + h]);
            s0[threadIdx.x] = engine_welford_merge(s0[threadIdx.x], s0[threadIdx.x + h]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double* o = partial + (long long)blockIdx.x * 6;
        o[0] = sx[0].n;
        o[1] = sx[0].mean;
        o[2] = sx[0].m2;
        o[3] = s0[0].n;
        o[4] = s0[0].mean;
        o[5] = s0[0].m2;
    }
}

// out[0..6] = the block states of engine_stats_welford merged in block order.
extern "C" __global__ void engine_stats_welford_final(const double* __restrict__ partial,
                                                      int blocks, double* __restrict__ out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    EngineWelford wx = {0.0, 0.0, 0.0}, w0 = {0.0, 0.0, 0.0};
    for (int b = 0; b < blocks; ++b) {
        const double* p = partial + (long long)b * 6;
        wx = engine_welford_merge(wx, EngineWelford{p[0], p[1], p[2]});
        w0 = engine_welford_merge(w0, EngineWelford{p[3], p[4], p[5]});
    }
    out[0] = wx.n;
    out[1] = wx.mean;
    out[2] = wx.m2;
    out[3] = w0.n;
    out[4] = w0.mean;
    out[5] = w0.m2;
}

// Exact selection of two order statistics of P^+ per date by radix select on the bit
// patterns (non-negative doubles order as their bits): 8 passes of 8 bits, from the top.
// state[k * 4 + {0, 1}]: the prefixes found so far of the two wanted values; state[k * 4
// + {2, 3}]: their remaining ranks among the values with that prefix. hist[(k * 2 + w) *
// 256 + digit] counts the values of date k whose bits above `shift + 8` equal prefix w
// (all values when mask = 0), by their digit at `shift`. hist must be zero.
extern "C" __global__ void engine_select_histogram(const double* __restrict__ netted,
                                                   long long m0,
                                                   const unsigned long long* __restrict__ state,
                                                   int shift, unsigned long long mask,
                                                   unsigned* __restrict__ hist) {
    __shared__ unsigned sh[2][256];
    const int k = blockIdx.y;
    for (int i = threadIdx.x; i < 512; i += blockDim.x) sh[i >> 8][i & 255] = 0;
    __syncthreads();
    const unsigned long long p0 = state[k * 4], p1 = state[k * 4 + 1];
    const double* p = netted + (long long)k * m0;
    for (long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x; l < m0;
         l += (long long)gridDim.x * blockDim.x) {
        const unsigned long long key = (unsigned long long)__double_as_longlong(engine_pos(p[l]));
        const unsigned digit = (unsigned)(key >> shift) & 255u;
        if (((key ^ p0) & mask) == 0) atomicAdd(&sh[0][digit], 1u);
        if (((key ^ p1) & mask) == 0) atomicAdd(&sh[1][digit], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 512; i += blockDim.x) {
        const unsigned v = sh[i >> 8][i & 255];
        if (v) atomicAdd(&hist[(long long)k * 512 + i], v);
    }
}

// One block per date: picks the digit holding each remaining rank, extends the prefixes,
// and zeroes the histogram for the next pass.
extern "C" __global__ void engine_select_pick(unsigned long long* __restrict__ state,
                                              unsigned* __restrict__ hist, int shift) {
    const int k = blockIdx.x;
    unsigned* h = hist + (long long)k * 512;
    if (threadIdx.x < 2) {
        const int w = threadIdx.x;
        unsigned long long rank = state[k * 4 + 2 + w];
        unsigned long long cum = 0;
        for (int digit = 0; digit < 256; ++digit) {
            const unsigned long long c = h[w * 256 + digit];
            if (rank < cum + c) {
                state[k * 4 + w] |= (unsigned long long)digit << shift;
                state[k * 4 + 2 + w] = rank - cum;
                break;
            }
            cum += c;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 512; i += blockDim.x) h[i] = 0;
}
