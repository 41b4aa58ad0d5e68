// Microbenchmark of the twenty-fifth session (benches/RESULTS.md, "Twenty-fifth session,
// round 3"): can one warp per outer path read an outer path's inner states once from DRAM
// (the regression build: both planes of words, 300 x 29 x 8 B = 69.6 KB at basket29) and
// then re-read their high words (the exercise: 34.8 KB) from L2, at a few warps per SM?
// The premise of a fused build -> solve -> exercise kernel that reads the states once.
// Not part of the build. On a CUDA machine:
//   nvcc -O3 -arch=sm_90 benches/l2_reread.cu -o l2_reread && ./l2_reread
// Modes (per outer path l, warp gw takes l = gw, gw + warps, ...):
//   0 once     both planes of l                      (69.6 KB per outer path)
//   1 again    both planes, then l's high words      (the re-read, latest pieces first)
//   2 solve    as 1 with `spin` cycles between       (a one-warp solve's latency)
//   3 far      both planes, then the high words of another outer path (no reuse possible)
//   4 spin     as 0 with the spin                    (the spin's cost without the re-read)
//   5 againF, 6 farF: 1 and 3 with the re-read in increasing order
// 16 loads per lane are issued before any is used. Loads are ld.global.cg (L2 only, not L1: the fused kernel's shared memory leaves
// little L1). With `writer`, a kernel on a second stream writes a 4 GiB buffer meanwhile
// (the path kernel's stores on the other stream), on 2 blocks per SM.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));               \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

constexpr int ROWS = 300, D = 29;
constexpr int PLANE = ROWS * D;                // words per plane
constexpr int PIECES = 2 * PLANE / 4;          // 16-byte pieces of both planes (4350)
constexpr int HI_PIECES = PLANE / 4;           // of the high words (2175)

__device__ __forceinline__ void add(uint4& a, uint4 v) {
    a.x ^= v.x;
    a.y += v.y;
    a.z ^= v.z;
    a.w += v.w;
}

// Reads pieces [0, n) of p (latest first when `reverse`), U = 16 loads per lane issued
// before any is used: 8 KB per warp in flight.
constexpr int U = 16;
__device__ __forceinline__ void read_range(const uint4* __restrict__ p, int n, bool reverse, int lane,
                                           uint4& acc) {
    for (int k0 = 0; k0 < n; k0 += 32 * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = k0 + lane + 32 * u;
            v[u] = k < n ? __ldcg(p + (reverse ? n - 1 - k : k)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) add(acc, v[u]);
    }
}

// Modes 5 and 6: `again` with the re-read in increasing order, and `far` likewise.
template <int MODE>
__global__ void reader(const uint4* __restrict__ s, long long outer, long long spin, uint4* out) {
    const int lane = threadIdx.x & 31;
    const long long gw = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (long long l = gw; l < outer; l += nw) {
        const uint4* p = s + l * PIECES;
        read_range(p, PIECES, false, lane, acc);
        if (MODE == 2 || MODE == 4) {
            const long long t0 = clock64();
            while (clock64() - t0 < spin) {
            }
        }
        if (MODE != 0 && MODE != 4) {
            const bool far = MODE == 3 || MODE == 6;
            const uint4* q = far ? s + ((l + outer / 2) % outer) * PIECES : p;
            read_range(q, HI_PIECES, MODE <= 3, lane, acc);
        }
    }
    if (acc.x == 0x12345678u && acc.y == 7u) out[0] = acc;  // keeps the loads
}

__global__ void writer(uint4* w, long long n, int rounds) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nt = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < rounds; ++r)
        for (long long i = t; i < n; i += nt) w[i] = make_uint4((unsigned)i, r, 0, 0);
}

int main() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const long long outer = 50000;
    const size_t bytes = (size_t)outer * PIECES * 16;
    uint4 *s, *out, *w;
    CHECK(cudaMalloc(&s, bytes));
    CHECK(cudaMemset(s, 1, bytes));
    CHECK(cudaMalloc(&out, 16));
    const long long wn = (4ll << 30) / 16;
    CHECK(cudaMalloc(&w, wn * 16));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    const char* names[] = {"once", "again", "solve", "far", "spin", "againF", "farF"};
    const long long spin = 12000;
    printf("outer %lld, %.2f GB of states, spin %lld cycles\n", outer, bytes / 1e9, spin);
    printf("%-6s %-6s %4s %9s %9s\n", "writer", "mode", "w/SM", "ms", "DRAM-GB/s");
    for (int wr = 0; wr < 2; ++wr)
        for (int wps : {2, 4, 8, 16, 24}) {
            for (int mode = 0; mode < 7; ++mode) {
                float best = 1e30f;
                for (int rep = 0; rep < 3; ++rep) {
                    if (wr) writer<<<sms * 2, 256, 0, s2>>>(w, wn, 2);
                    CHECK(cudaEventRecord(e0, s1));
                    const int grid = sms * wps;  // one warp per block: even spread
                    switch (mode) {
                        case 0: reader<0><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                        case 1: reader<1><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                        case 2: reader<2><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                        case 3: reader<3><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                        case 5: reader<5><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                        case 6: reader<6><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                        default: reader<4><<<grid, 32, 0, s1>>>(s, outer, spin, out); break;
                    }
                    CHECK(cudaEventRecord(e1, s1));
                    CHECK(cudaDeviceSynchronize());
                    CHECK(cudaGetLastError());
                    float ms;
                    CHECK(cudaEventElapsedTime(&ms, e0, e1));
                    if (ms < best) best = ms;
                }
                // Bytes that must come from DRAM if nothing is reused: once and spin read
                // both planes; the others add the high words.
                const double b = (double)outer * 16 *
                                 (PIECES + ((mode != 0 && mode != 4) ? HI_PIECES : 0));
                printf("%-6d %-6s %4d %9.3f %9.0f\n", wr, names[mode], wps, best, b / best / 1e6);
            }
        }
    return 0;
}
