// Small kernels of the GPU nested Monte Carlo engine (src/gpu_engine.rs), around the
// path generator (paths.cu), the fused regression build (regression.cu) and the batched
// solvers: payoffs of inner paths, discounted cash flows, the Longstaff-Schwartz
// exercise update, per-outer-path means, and the gather of the systems to solve.
//
// Arithmetic follows src/engine.rs operation by operation (compiled with --fmad=false,
// IEEE division): sums over inner paths run in increasing path index from 0.0, the
// payoff is that of src/scenario.rs, and basis values are psi_0 = 1,
// psi_t = psi_{parent[t]} * (S[asset[var[t]]] * inv_spot[var[t]]) as in src/basis.rs.
//
// Inner states: element (l, mm, i) at states[l * stride + mm * d + i] (a view of the
// path generator's [l][s][mm][i] layout at one date). Cash flows: (l, mm) at
// cash[l * m + mm], with the date index they are paid at in cash_date.

#define ENGINE_MAX_N 64

// Payoff kinds: level = S[ua[0]] (0), sum_k uw[k] S[ua[k]] (1), max_k S[ua[k]] (2).
__device__ __forceinline__ double engine_payoff(const double* s, int kind, int put, double strike,
                                                const int* __restrict__ ua,
                                                const double* __restrict__ uw, int nu) {
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

// cash[l * m + mm] = payoff(state(l, mm)), cash_date[..] = date, for l < c, mm < m.
extern "C" __global__ void engine_cash_init(const double* __restrict__ states, long long stride,
                                            long long c, int m, int d, int kind, int put,
                                            double strike, const int* __restrict__ ua,
                                            const double* __restrict__ uw, int nu,
                                            unsigned date, double* __restrict__ cash,
                                            unsigned* __restrict__ cash_date) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= c * m) return;
    const long long l = t / m;
    const long long mm = t - l * m;
    cash[t] = engine_payoff(states + l * stride + mm * d, kind, put, strike, ua, uw, nu);
    cash_date[t] = date;
}

// out[l] = sum over mm < m, in order, of payoff(state(l, mm)), for l < c.
extern "C" __global__ void engine_payoff_sums(const double* __restrict__ states, long long stride,
                                              long long c, int m, int d, int kind, int put,
                                              double strike, const int* __restrict__ ua,
                                              const double* __restrict__ uw, int nu,
                                              double* __restrict__ out) {
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= c) return;
    double sum = 0.0;
    for (int mm = 0; mm < m; ++mm)
        sum = sum + engine_payoff(states + l * stride + (long long)mm * d, kind, put, strike, ua, uw,
                                  nu);
    out[l] = sum;
}

// y[t] = cash[t] * discount[cash_date[t] - date], t < total.
extern "C" __global__ void engine_discounted_cash(const double* __restrict__ cash,
                                                  const unsigned* __restrict__ cash_date,
                                                  const double* __restrict__ discount,
                                                  unsigned date, long long total,
                                                  double* __restrict__ y) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= total) return;
    y[t] = cash[t] * discount[cash_date[t] - date];
}

// out[l] = (sum over mm, in order, of cash * discount[cash_date - date]) / m, l < c:
// the continuation value at the exposure date `date`.
extern "C" __global__ void engine_discounted_means(const double* __restrict__ cash,
                                                   const unsigned* __restrict__ cash_date,
                                                   const double* __restrict__ discount,
                                                   unsigned date, long long c, int m,
                                                   double* __restrict__ out) {
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= c) return;
    const double* cf = cash + l * m;
    const unsigned* cd = cash_date + l * m;
    double sum = 0.0;
    for (int mm = 0; mm < m; ++mm) sum = sum + cf[mm] * discount[cd[mm] - date];
    out[l] = sum / (double)m;
}

// Fallback continuation of outer path l at exercise date `date` where no regression
// coefficients are usable (alive, counts > 0, beta_slot < 0): the mean discounted cash
// flow of the paths that entered the regression (payoff > 0 when itm_only, else all).
// Other entries of `mean` are left untouched.
extern "C" __global__ void engine_fallback_means(
    const double* __restrict__ states, long long stride, long long c, int m, int d, int kind,
    int put, double strike, const int* __restrict__ ua, const double* __restrict__ uw, int nu,
    int itm_only, const double* __restrict__ cash, const unsigned* __restrict__ cash_date,
    const double* __restrict__ discount, unsigned date, const unsigned char* __restrict__ alive,
    const unsigned* __restrict__ counts, const int* __restrict__ beta_slot,
    double* __restrict__ mean) {
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= c) return;
    if (!alive[l] || counts[l] == 0 || beta_slot[l] >= 0) return;
    double sum = 0.0;
    for (int mm = 0; mm < m; ++mm) {
        const long long t = l * m + mm;
        if (!itm_only ||
            engine_payoff(states + l * stride + (long long)mm * d, kind, put, strike, ua, uw, nu) >
                0.0)
            sum = sum + cash[t] * discount[cash_date[t] - date];
    }
    mean[l] = sum / (double)counts[l];
}

// The exercise update at exercise date `date`, one thread per inner path (l, mm) of the
// outer paths that are alive with counts > 0: where the payoff is positive and at least
// the continuation estimate (psi . beta with beta = x[beta_slot[l] * n ..] converted to
// double, or mean[l] where beta_slot[l] < 0), the cash flow becomes the payoff, paid at
// `date`.
template <typename real>
__device__ __forceinline__ void engine_exercise_impl(
    const double* __restrict__ states, long long stride, long long c, int m, int d, int kind,
    int put, double strike, const int* __restrict__ ua, const double* __restrict__ uw, int nu,
    int n, const int* __restrict__ parent, const int* __restrict__ var_asset,
    const double* __restrict__ var_inv, const real* __restrict__ x,
    const int* __restrict__ beta_slot, const unsigned char* __restrict__ alive,
    const unsigned* __restrict__ counts, const double* __restrict__ mean, unsigned date,
    double* __restrict__ cash, unsigned* __restrict__ cash_date) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= c * m) return;
    const long long l = t / m;
    const long long mm = t - l * m;
    if (!alive[l] || counts[l] == 0) return;
    const double* s = states + l * stride + mm * d;
    const double payoff = engine_payoff(s, kind, put, strike, ua, uw, nu);
    if (payoff <= 0.0) return;
    const int slot = beta_slot[l];
    double continuation;
    if (slot >= 0) {
        const real* beta = x + (long long)slot * n;
        double psi[ENGINE_MAX_N];
        psi[0] = 1.0;
        continuation = 0.0;
        continuation = continuation + psi[0] * (double)beta[0];
        for (int k = 1; k < n; ++k) {
            psi[k] = psi[parent[k]] * (s[var_asset[k]] * var_inv[k]);
            continuation = continuation + psi[k] * (double)beta[k];
        }
    } else {
        continuation = mean[l];
    }
    if (payoff >= continuation) {
        cash[t] = payoff;
        cash_date[t] = date;
    }
}

#define ENGINE_EXERCISE(name, real)                                                              \
    extern "C" __global__ void name(                                                             \
        const double* __restrict__ states, long long stride, long long c, int m, int d,         \
        int kind, int put, double strike, const int* __restrict__ ua,                           \
        const double* __restrict__ uw, int nu, int n, const int* __restrict__ parent,           \
        const int* __restrict__ var_asset, const double* __restrict__ var_inv,                  \
        const real* __restrict__ x, const int* __restrict__ beta_slot,                          \
        const unsigned char* __restrict__ alive, const unsigned* __restrict__ counts,           \
        const double* __restrict__ mean, unsigned date, double* __restrict__ cash,              \
        unsigned* __restrict__ cash_date) {                                                     \
        engine_exercise_impl<real>(states, stride, c, m, d, kind, put, strike, ua, uw, nu, n,   \
                                   parent, var_asset, var_inv, x, beta_slot, alive, counts,     \
                                   mean, date, cash, cash_date);                                \
    }
ENGINE_EXERCISE(engine_exercise_f64, double)
ENGINE_EXERCISE(engine_exercise_f32, float)

// Gathers the systems idx[0..batch) of a full batch: a_out[s] = a[idx[s]] (n x n),
// b_out[s] = b[idx[s]] (n), one thread per element of a_out.
template <typename real>
__device__ __forceinline__ void engine_gather_impl(const real* __restrict__ a,
                                                   const real* __restrict__ b,
                                                   const unsigned* __restrict__ idx,
                                                   long long batch, int n,
                                                   real* __restrict__ a_out,
                                                   real* __restrict__ b_out) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nn = (long long)n * n;
    if (t >= batch * nn) return;
    const long long s = t / nn;
    const long long r = t - s * nn;
    const long long src = idx[s];
    a_out[t] = a[src * nn + r];
    if (r < n) b_out[s * n + r] = b[src * n + r];
}

extern "C" __global__ void engine_gather_f64(const double* __restrict__ a,
                                             const double* __restrict__ b,
                                             const unsigned* __restrict__ idx, long long batch,
                                             int n, double* __restrict__ a_out,
                                             double* __restrict__ b_out) {
    engine_gather_impl<double>(a, b, idx, batch, n, a_out, b_out);
}

extern "C" __global__ void engine_gather_f32(const float* __restrict__ a,
                                             const float* __restrict__ b,
                                             const unsigned* __restrict__ idx, long long batch,
                                             int n, float* __restrict__ a_out,
                                             float* __restrict__ b_out) {
    engine_gather_impl<float>(a, b, idx, batch, n, a_out, b_out);
}
