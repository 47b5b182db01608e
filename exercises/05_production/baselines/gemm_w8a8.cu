// Naive baseline for gemm_w8a8: no tensor cores. One thread per element of Y, four products at a
// time with __dp4a where the rows are 4-byte aligned. The lanes of a warp take consecutive n, so
// they read rows of B K bytes apart: 32 cache lines per load, nothing reused from shared memory.
#include <cstdint>
#include <cuda_bf16.h>

__global__ void w8a8_naive(const int8_t* A, const int8_t* B, const float* sA, const float* sB,
                           const float* bias, __nv_bfloat16* Y, int M, int N, int K) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y;
    if (n >= N) return;
    const int8_t* a = A + (size_t)m * K;
    const int8_t* b = B + (size_t)n * K;
    int acc = 0;
    int k = 0;
    if (K % 4 == 0) {
        for (; k < K; k += 4)
            acc = __dp4a(*reinterpret_cast<const int*>(a + k), *reinterpret_cast<const int*>(b + k), acc);
    }
    for (; k < K; ++k) acc += (int)a[k] * (int)b[k];
    Y[(size_t)m * N + n] = __float2bfloat16((float)acc * sA[m] * sB[n] + bias[n]);
}

extern "C" void gemm_w8a8(const int8_t* A, const int8_t* B, const float* sA, const float* sB,
                          const float* bias, __nv_bfloat16* Y, int M, int N, int K) {
    dim3 grid((N + 127) / 128, M);
    w8a8_naive<<<grid, 128>>>(A, B, sA, sB, bias, Y, M, N, K);
}
