// Exercise 02, task 4 (challenge): GEMM on bf16 tensor cores.
//
//     C = A B^T     C[m][n] = sum over k of A[m][k] * B[n][k], accumulated in fp32, stored in bf16
//
// Layout: row-major __nv_bfloat16 (from <cuda_bf16.h>). A is M x K, B is N x K (both
// K-contiguous, as nn.Linear's X and W), C is M x N. Sizes as in sgemm, from 1 to 8192, odd ones
// included: when K is not a multiple of 8, rows are not 16-byte aligned, and a 16-byte copy
// there faults. Tolerance: 5e-3 of sum_k |A[m][k]| |B[n][k]| (bf16 keeps 8 significant bits);
// accumulate in fp32, round once when you store C. Keep the data bf16 all the way: some cases hold
// values of about 1e6 and 1e-7, which bf16 holds and fp16 does not (past 65504 it overflows, and
// at 1e-7 it keeps a bit or two), so the f16 forms of mma and wgmma are no way around bf16.
//
// What is measured: FLOP/s (2 M N K) at the four sizes of sgemm, against the bf16 tensor-core
// peak, against baselines/gemm_bf16.cu (no tensor cores) and against cuBLAS (torch.mm in bf16).
// This file is built for sm_90a on Hopper, so wgmma is available to you.
//
// The path (section 7 of the notebook, "Tensor cores"):
//  1. mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: one warp-wide instruction multiplies
//     a 16 x 16 tile of A by a 16 x 8 tile of B^T into a 16 x 8 fp32 tile held in registers,
//     4096 FLOPs. "row.col" is exactly this problem: A row-major, B^T column-major, i.e. B
//     K-contiguous. The PTX ISA manual ("Matrix Fragments for mma.m16n8k16 with floating point
//     type") shows which elements each lane holds; call it through inline asm("...").
//  2. Feed it from shared memory with ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8 x 8 tiles
//     straight into fragment layout, one 16-byte row address per lane. Pad each shared row by
//     16 bytes (or swizzle) so the eight rows of a matrix fall in different banks.
//  3. Tile as in sgemm, one level up: a block tile of 128 x 128 (or 128 x 256) with a K step of
//     32 or 64, each warp a 64 x 64 (or 64 x 32) piece of it, i.e. a grid of m16n8 accumulators.
//  4. Copy tiles with cp.async.cg.shared.global (16 bytes, no registers on the way) into a ring
//     of 3 or 4 stages, cp.async.wait_group before using one: the copies of the next tiles
//     overlap the mma of this one.
// On this H200, mma.sync peaks at about 600 TFLOP/s (`grade hardware`): that is the ceiling of
// this path, and a very good kernel on it reaches 70-80% of it. The rest of the way to cuBLAS
// (about 700) takes Hopper's own instructions: wgmma.mma_async, in which a warpgroup (4 warps)
// multiplies tiles up to 64 x 256 x 16 read straight from shared memory, fed by the Tensor
// Memory Accelerator (cp.async.bulk.tensor, a TMA descriptor made on the host) and an mbarrier
// pipeline. Check your build: `cuobjdump --dump-sass` should show HMMA (or HGMMA) instructions,
// and the grader's ptxas report "0 bytes spill stores".

#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                          int M, int N, int K) {
    // TODO: write your kernel above and launch it here.
    (void)A;
    (void)B;
    (void)C;
    (void)M;
    (void)N;
    (void)K;
}
