// mma_u8: one mma.sync.m16n8k32 of 8-bit unsigned integers into s32 accumulators (sm_80+;
// shared by benches/fused_stored.cu -DIMMA and benches/mma_rates.cu). Fragments as PTX
// gives them, g = lane / 4, q = lane % 4:
// - A (16 x 32, row-major): a0 row g, a1 row g + 8, k 4q..4q+3; a2, a3 the same rows,
//   k 16 + 4q..; each register 4 bytes, the lowest k in the lowest byte;
// - B (32 x 8, column-major): b0 column g, k 4q..4q+3; b1 k 16 + 4q..;
// - D (16 x 8): d[0], d[1] row g, columns 2q, 2q + 1; d[2], d[3] row g + 8.
#pragma once

__device__ __forceinline__ void mma_u8(int (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                       unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}
