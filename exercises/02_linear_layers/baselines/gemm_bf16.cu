// Naive bf16 GEMM: the baseline your kernel is timed against.
//
// C = A B^T with one thread per element of C: the dot product of row m of A and row n of B,
// converted to fp32 on load, accumulated in fp32 on the ordinary cores and rounded to bf16 once
// at the end. Consecutive threads take consecutive n, so a warp's load of B[n..n+31][k] touches
// 32 rows K elements apart. The tensor cores, which multiply bf16 at over ten times the fp32
// rate, are not used at all.

#include <cuda_bf16.h>

namespace {

__global__ void gemm_bf16_naive(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                int M, int N, int K) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    const __nv_bfloat16* a = A + (size_t)m * K;
    const __nv_bfloat16* b = B + (size_t)n * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += __bfloat162float(a[k]) * __bfloat162float(b[k]);
    C[(size_t)m * N + n] = __float2bfloat16(acc);  // round to nearest
}

}  // namespace

extern "C" void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                          int M, int N, int K) {
    const dim3 block(32, 8);
    const dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    gemm_bf16_naive<<<grid, block>>>(A, B, C, M, N, K);
}
