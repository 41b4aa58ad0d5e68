// Timing microbenchmark, not part of `cva` (issue 5; benches/RESULTS.md, "Forty-sixth
// session"): the issue rate and latency of the 8-bit integer MMA (mma.sync m16n8k32
// u8 x u8 -> s32) against the FP64 one (m16n8k8) on this GPU, and a check of the integer
// fragments' layout on a small Gram, X^T X for 32 rows of bytes over 32 columns (k).
// Build and run on the GPU machine (repository root):
//   nvcc -O3 -arch=sm_90 -std=c++17 -I kernels/cuda benches/mma_rates.cu -o mr && ./mr
#include <vector>

#include "cuda_check.h"
#include "mma_u8.cuh"
#include "prelude.cu"  // mma_m16n8k8_f64

// The two MMAs measured, each with its accumulator type and fixed operands.
struct Imma {
    using Acc = int;
    static constexpr long long kFlops = 2LL * 16 * 8 * 32;
    static __device__ void step(int (&d)[4], unsigned lane, int c) {
        const unsigned a = 0x01010101u * (lane + 1), b = 0x02020202u ^ lane;
        mma_u8(d, a, a + c, a ^ c, a, b, b + c);
    }
};
struct Dmma {
    using Acc = double;
    static constexpr long long kFlops = 2LL * 16 * 8 * 8;
    static __device__ void step(double (&d)[4], unsigned lane, int) {
        const double a = 1.0 + lane * 1e-3, b = 1.0 - lane * 1e-3;
#ifdef __CUDA_ARCH__
        mma_m16n8k8_f64(d, a, a, a, a, b, b);
#endif
    }
};

// The other FP64 shapes (forty-seventh session): m8n8k4 (256 multiply-adds, d[0..1]),
// m16n8k4 (512) and m16n8k16 (2,048).
struct Dmma884 {
    using Acc = double;
    static constexpr long long kFlops = 2LL * 8 * 8 * 4;
    static __device__ void step(double (&d)[4], unsigned lane, int) {
        const double a = 1.0 + lane * 1e-3, b = 1.0 - lane * 1e-3;
        asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
            : "+d"(d[0]), "+d"(d[1])
            : "d"(a), "d"(b));
    }
};
struct Dmma1684 {
    using Acc = double;
    static constexpr long long kFlops = 2LL * 16 * 8 * 4;
    static __device__ void step(double (&d)[4], unsigned lane, int) {
        const double a = 1.0 + lane * 1e-3, b = 1.0 - lane * 1e-3;
        asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a), "d"(a), "d"(b));
    }
};
struct Dmma16816 {
    using Acc = double;
    static constexpr long long kFlops = 2LL * 16 * 8 * 16;
    static __device__ void step(double (&d)[4], unsigned lane, int) {
        const double a = 1.0 + lane * 1e-3, b = 1.0 - lane * 1e-3;
        asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, "
            "%11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a), "d"(a), "d"(a), "d"(a), "d"(a), "d"(a), "d"(a), "d"(a), "d"(b), "d"(b), "d"(b), "d"(b));
    }
};

// A plain FP64 FMA (one per lane: 32 multiply-adds per warp instruction), for its latency
// and issue rate next to the MMAs'.
struct Dfma {
    using Acc = double;
    static constexpr long long kFlops = 2LL * 32;
    static __device__ void step(double (&d)[4], unsigned lane, int) {
        const double a = 1.0 - lane * 1e-9, b = lane * 1e-12;
        d[0] = fma(d[0], a, b);
    }
};

// CH independent accumulators per warp, ITER rounds of Op's MMA; the sum goes out so that
// nothing is dead. cyc[warp] = the warp's clock64 span.
template <class Op, int CH>
__global__ void mma_run(int iter, typename Op::Acc* out, long long* cyc) {
    const unsigned lane = threadIdx.x & 31;
    typename Op::Acc acc[CH][4] = {};
    const long long t0 = clock64();
    for (int i = 0; i < iter; ++i)
#pragma unroll
        for (int c = 0; c < CH; ++c) Op::step(acc[c], lane, c);
    const long long t1 = clock64();
    typename Op::Acc s = 0;
#pragma unroll
    for (int c = 0; c < CH; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (lane == 0) cyc[(blockIdx.x * blockDim.x + threadIdx.x) >> 5] = t1 - t0;
}

// Layout check: x is 32 rows (features) x 32 columns (k) of bytes, row-major. The Gram
// G = x x^T (32 x 32, s32) from 8 tiles of m16n8k32, with the B fragment of columns
// 8J..8J+7 taken from the A-layout registers of rows 8J + g.
__global__ void imma_gram(const unsigned char* x, int* g) {
    const int lane = threadIdx.x, gi = lane >> 2, q = lane & 3;
    // r[o][h]: row 8o + gi, k = 16h + 4q .. +3 (4 bytes, the lowest k in the lowest byte).
    unsigned r[4][2];
    for (int o = 0; o < 4; ++o)
        for (int h = 0; h < 2; ++h) r[o][h] = *(const unsigned*)(x + (8 * o + gi) * 32 + 16 * h + 4 * q);
    for (int R = 0; R < 2; ++R)
        for (int J = 0; J < 4; ++J) {
            int acc[4] = {0, 0, 0, 0};
            mma_u8(acc, r[2 * R][0], r[2 * R + 1][0], r[2 * R][1], r[2 * R + 1][1], r[J][0], r[J][1]);
            const int row = 16 * R + gi, col = 8 * J + 2 * q;
            g[row * 32 + col] = acc[0];
            g[row * 32 + col + 1] = acc[1];
            g[(row + 8) * 32 + col] = acc[2];
            g[(row + 8) * 32 + col + 1] = acc[3];
        }
}

template <class Op, int CH>
static void timeit(const char* name, int blocks, int threads, int iter, void* out, long long* cyc) {
    auto kern = mma_run<Op, CH>;
    typename Op::Acc* o = (typename Op::Acc*)out;
    kern<<<blocks, threads>>>(iter, o, cyc);  // warm-up
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    kern<<<blocks, threads>>>(iter, o, cyc);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const int warps = blocks * threads / 32;
    std::vector<long long> c(warps);
    CK(cudaMemcpy(c.data(), cyc, warps * sizeof(long long), cudaMemcpyDeviceToHost));
    long long mx = 0;
    for (long long v : c) mx = v > mx ? v : mx;
    const double mmas = (double)warps * iter * CH;
    printf("%-6s blocks %4d warps/block %2d chains %2d: %.3f ms, %.1f T(FL)OP/s, %.2f cycles per MMA per warp (max span)\n",
           name, blocks, threads / 32, CH, ms, mmas * Op::kFlops / (ms * 1e-3) / 1e12, (double)mx / (iter * CH));
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("%s, %d SMs\n", p.name, sms);

    // Layout check on random bytes.
    std::vector<unsigned char> hx(32 * 32);
    srand(7);
    for (auto& v : hx) v = (unsigned char)(rand() & 255);
    unsigned char* dx;
    int* dg;
    CK(cudaMalloc(&dx, hx.size()));
    CK(cudaMalloc(&dg, 32 * 32 * sizeof(int)));
    CK(cudaMemcpy(dx, hx.data(), hx.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dg, 0xff, 32 * 32 * sizeof(int)));
    imma_gram<<<1, 32>>>(dx, dg);
    CK(cudaDeviceSynchronize());
    std::vector<int> hg(32 * 32);
    CK(cudaMemcpy(hg.data(), dg, hg.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) {
            int s = 0;
            for (int k = 0; k < 32; ++k) s += hx[i * 32 + k] * hx[j * 32 + k];
            bad += s != hg[i * 32 + j];
        }
    printf("layout check: %d of 1024 Gram entries differ from the host's\n", bad);

    const int maxw = 64 * sms;
    void* out;
    long long* cyc;
    CK(cudaMalloc(&out, (size_t)maxw * 32 * 8));
    CK(cudaMalloc(&cyc, (size_t)maxw * 8));
    const int it = 4096;
    // Latency: one warp, one chain. Throughput: 1-16 warps per SM with 8 chains, and 8 with 4.
    timeit<Imma, 1>("imma", 1, 32, it, out, cyc);
    timeit<Dmma, 1>("dmma", 1, 32, it, out, cyc);
    for (int w : {1, 2, 4, 8, 16}) {
        timeit<Imma, 8>("imma", sms, 32 * w, it, out, cyc);
        timeit<Dmma, 8>("dmma", sms, 32 * w, it, out, cyc);
    }
    timeit<Imma, 4>("imma", sms, 32 * 8, it, out, cyc);
    timeit<Dmma, 4>("dmma", sms, 32 * 8, it, out, cyc);
    timeit<Dmma884, 1>("d884", 1, 32, it, out, cyc);
    timeit<Dmma1684, 1>("d1684", 1, 32, it, out, cyc);
    timeit<Dmma16816, 1>("d16816", 1, 32, it, out, cyc);
    timeit<Dfma, 1>("dfma", 1, 32, it, out, cyc);
    for (int w : {1, 2, 4, 8}) timeit<Dfma, 8>("dfma", sms, 32 * w, it, out, cyc);
    for (int w : {1, 2, 8}) {
        timeit<Dmma884, 8>("d884", sms, 32 * w, it, out, cyc);
        timeit<Dmma1684, 8>("d1684", sms, 32 * w, it, out, cyc);
        timeit<Dmma16816, 8>("d16816", sms, 32 * w, it, out, cyc);
    }
    return bad != 0;
}
