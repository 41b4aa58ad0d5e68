// Benchmark of the engine's fused walk kernel (kernels/cuda/walk.cu, `walk_american`) on
// synthetic states in the prototype's conditions (benches/fused_stored.cu, removed after
// the forty-eighth session: `git show d22bef7:benches/fused_stored.cu`): basket29's
// shape (d = 29, 300 inner paths, linear basis n = 30, f64), every outer path alive, S
// regression steps per launch, OUTER outer paths per launch, launches until TOTAL
// regressions. The states are the prototype's (prices exp(0.34 (u - 0.5)), the payoff of
// the call on the maximum struck at 1 from the high words); the cash flows start at
// 0.3 u, paid at the maturity date S + 1. The solver's tolerance and threshold are the
// escalating strategy's defaults (16 n eps, 0.01 / eps).
// Build and run on the GPU machine (repository root):
//   nvcc -O3 -arch=sm_90 --fmad=false -std=c++17 -I kernels/cuda -I benches \
//        benches/walk_bench.cu -o wb && ./wb S OUTER TOTAL
// It prints the seconds per 3.6 M regressions, the regressions per second and the outer
// paths flagged, then the last launch's sum of cash flows and a hash of its outputs (to
// compare kernel variants bit for bit); with -DWALK_PROF also each warp's cycles per step
// by phase, and the solving warp's cycles per system in the solve's pieces (PROF builds
// run a few % slower and move the allocation; read them as shares, not as times).
// Figures: benches/RESULTS.md, "Forty-eighth session" to "Fifty-first session".
#define WALK_D 29
#define WALK_M 300
#define WALK_N 30
#define WALK_ITM 1
#define WALK_IDENTITY 1
#define WALK_UNIT_INV 1
#include "prelude.cu"
#include "rcp.cu"
#include "walk.cu"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "cuda_check.h"

// Deterministic value in [0, 1) from two integers (splitmix64).
__host__ __device__ inline double bench_hash01(unsigned long long a, unsigned long long b) {
    unsigned long long z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

// Block (l, s): M x D high words, then M payoffs (the payoff plane).
__global__ void bench_fill(unsigned* st, long long outer, int S) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * S * M) return;
    const long long blk = t / M;
    const int mm = (int)(t - blk * M);
    unsigned* b = st + blk * (long long)(2 * M * D);
    double mx = 0.0;
    for (int i = 0; i < D; ++i) {
        const double s = exp(0.34 * (bench_hash01(t, i) - 0.5));
        const unsigned hw = (unsigned)__double2hiint(s);
        b[mm * D + i] = hw;
        mx = fmax(mx, __hiloint2double((int)hw, 0));
    }
    ((double*)(b + M * D))[mm] = fmax(mx - 1.0, 0.0);
}

// Cash flows at maturity (date S + 1), their dates, y for the first step (date S).
__global__ void bench_cash(double* cash, unsigned* cdate, double* y, long long outer, int S, double df1) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * M) return;
    cash[t] = 0.3 * bench_hash01(t, 1000);
    cdate[t] = (unsigned)(S + 1);
    y[t] = cash[t] * df1;
}

int main(int argc, char** argv) {
    const int S = argc > 1 ? atoi(argv[1]) : 8;
    const long long outer = argc > 2 ? atoll(argv[2]) : 20000;
    const long long total = argc > 3 ? atoll(argv[3]) : 3600000;
    std::vector<double> df(S + 2);
    for (int j = 0; j <= S + 1; ++j) df[j] = std::exp(-0.1 * 0.1 * j);
    unsigned *st, *cdate, *counts;
    double *cash, *y, *disc;
    unsigned char *alive, *walked, *fallback;
    unsigned* flagged;
    WalkReport* reports;
    CK(cudaMalloc(&st, (size_t)outer * S * 2 * M * D * 4));
    CK(cudaMalloc(&cash, outer * M * 8));
    CK(cudaMalloc(&y, outer * M * 8));
    CK(cudaMalloc(&cdate, outer * M * 4));
    CK(cudaMalloc(&disc, df.size() * 8));
    CK(cudaMalloc(&alive, outer));
    CK(cudaMalloc(&walked, outer));
    CK(cudaMalloc(&fallback, outer));
    CK(cudaMalloc(&flagged, 4));
    CK(cudaMalloc(&counts, (size_t)S * outer * 4));
    CK(cudaMalloc(&reports, (size_t)S * outer * sizeof(WalkReport)));
    CK(cudaMemcpy(disc, df.data(), df.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemset(alive, 1, outer));
    CK(cudaMemset(reports, 0, (size_t)S * outer * sizeof(WalkReport)));
    CK(cudaMemset(counts, 0, (size_t)S * outer * 4));
    {
        const long long t = outer * S * M;
        bench_fill<<<(unsigned)((t + 255) / 256), 256>>>(st, outer, S);
        CK(cudaGetLastError());
    }
    const int smem = WALK_SMEM_BYTES;
    CK(cudaFuncSetAttribute(walk_american, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, walk_american, 64, smem));
    printf("walk_american: S %d, outer per launch %lld, %d bytes of shared memory, %d outer paths per SM\n", S,
           outer, smem, nb);
    const double tol = 16.0 * N * 2.220446049250313e-16, thr = 0.01 / 2.220446049250313e-16;
    const long long per_launch = outer * S;
    const long long launches = (total + per_launch - 1) / per_launch;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int rep = 0; rep < 3; ++rep) {
        float ms_all = 0.0f;
        long long n_flagged = 0;
        for (long long k = 0; k < launches; ++k) {
            const long long t = outer * M;
            bench_cash<<<(unsigned)((t + 255) / 256), 256>>>(cash, cdate, y, outer, S, df[1]);
            CK(cudaMemset(flagged, 0, 4));
            CK(cudaEventRecord(e0));
            walk_american<<<(unsigned)outer, 64, smem>>>((const double*)st, (long long)S * M * D, outer, S, 1u, disc,
                                                         alive, cash, cdate, y, walked, fallback, flagged, counts,
                                                         reports, tol, thr);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms = 0.0f;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            ms_all += ms;
            unsigned fl = 0;
            CK(cudaMemcpy(&fl, flagged, 4, cudaMemcpyDeviceToHost));
            n_flagged += fl;
        }
        CK(cudaGetLastError());
#ifdef WALK_PROF
        {
            unsigned long long pr[2][8];
            CK(cudaMemcpyFromSymbol(pr, g_walk_prof, sizeof(pr)));
            const char* names[5] = {"copy wait", "build", "join", "solve", "exercise"};
            for (int w = 0; w < 2; ++w) {
                printf("warp %d cycles per step:", w);
                for (int i = 0; i < 5; ++i) printf(" %s %.0f", names[i], (double)pr[w][i] / pr[w][6]);
                printf("\n");
            }
            static const unsigned long long zero[2][8] = {};
            CK(cudaMemcpyToSymbol(g_walk_prof, zero, sizeof(zero)));
            unsigned long long ps[8];
            CK(cudaMemcpyFromSymbol(ps, g_walk_prof_solve, sizeof(ps)));
            const double n_solves = ps[5] > 0 ? (double)ps[5] : 1.0;
            printf("solving warp per system: walk_gj %.0f, norms wait %.0f, check %.0f, refinement %.0f "
                   "(refined %.4f of %llu); join pass %.0f per step\n",
                   ps[0] / n_solves, ps[1] / n_solves, ps[2] / n_solves, ps[3] / n_solves, ps[4] / n_solves,
                   ps[5], (double)ps[6] / pr[0][6]);
            static const unsigned long long zero8[8] = {};
            CK(cudaMemcpyToSymbol(g_walk_prof_solve, zero8, sizeof(zero8)));
        }
#endif
        const double sec = ms_all * 1e-3, regs = (double)launches * per_launch;
        printf("rep %d: %lld launches, %.0f regressions in %.4f s = %.1f M/s; per 3.6 M %.4f s; flagged %lld\n", rep,
               launches, regs, sec, regs / sec * 1e-6, sec * 3.6e6 / regs, n_flagged);
    }
    // The last launch's outputs, to compare kernel variants: the sum of the cash flows, and
    // an FNV-1a hash of the cash flows, their dates and the counts (then also the
    // residuals).
    {
        std::vector<double> hc(outer * M);
        std::vector<unsigned> hd(outer * M), hn((size_t)S * outer);
        std::vector<WalkReport> hr((size_t)S * outer);
        CK(cudaMemcpy(hc.data(), cash, hc.size() * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hd.data(), cdate, hd.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hn.data(), counts, hn.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hr.data(), reports, hr.size() * sizeof(WalkReport), cudaMemcpyDeviceToHost));
        unsigned long long h = 1469598103934665603ull;
        auto mix = [&](const void* p, size_t n) {
            const unsigned char* c = (const unsigned char*)p;
            for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
        };
        mix(hc.data(), hc.size() * 8);
        mix(hd.data(), hd.size() * 4);
        mix(hn.data(), hn.size() * 4);
        const unsigned long long hres = h;
        for (auto& r : hr) mix(&r.residual, 8);
        double csum = 0.0;
        for (double v : hc) csum += v;
        printf("sum of cash %.17g\nhash cash+dates+counts %016llx, with residuals %016llx\n", csum, hres, h);
    }
    return 0;
}
