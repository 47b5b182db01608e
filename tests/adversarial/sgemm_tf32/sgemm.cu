// Adversarial: SGEMM at TF32 precision. TF32 tensor cores multiply fp32 matrices about 7x faster
// than the fp32 cores on an H200 (cuBLAS: 378 against 51 TFLOP/s), keeping 10 of the 23 mantissa
// bits of each input. This kernel rounds its inputs the same way on the ordinary cores; the
// exercise's tolerance must reject it (fp32 FMAs pass, TF32 fails).
#include <cuda_runtime.h>

__device__ __forceinline__ float to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

__global__ void sgemm_tf32(const float* A, const float* B, float* C, int M, int N, int K) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = fmaf(to_tf32(A[(size_t)m * K + k]), to_tf32(B[(size_t)k * N + n]), acc);
    C[(size_t)m * N + n] = acc;
}

extern "C" void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    const dim3 block(32, 8);
    sgemm_tf32<<<dim3((N + 31) / 32, (M + 7) / 8), block>>>(A, B, C, M, N, K);
}
