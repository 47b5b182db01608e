// Naive baseline for gemv_fp8: dequantize the whole of W into a bf16 buffer first (reading N K
// bytes and writing 2 N K), then one thread per element of y reading its row of the bf16 copy
// (2 N K bytes more, with the lanes of a warp K elements apart). Five times the traffic of reading
// W once (N K + 2 N K + 2 N K bytes), and badly coalesced.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

__global__ void dequantize(const __nv_fp8_e4m3* W, const float* scale, __nv_bfloat16* Wd, int N, int K) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)N * K) Wd[i] = __float2bfloat16(float(W[i]) * scale[i / K]);
}

__global__ void gemv_naive(const __nv_bfloat16* x, const __nv_bfloat16* Wd, __nv_bfloat16* y, int M, int N, int K) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y;
    if (n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __bfloat162float(x[(size_t)m * K + k]) * __bfloat162float(Wd[(size_t)n * K + k]);
    y[(size_t)m * N + n] = __float2bfloat16(acc);
}

extern "C" void gemv_fp8(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale,
                         __nv_bfloat16* y, int M, int N, int K) {
    // The bf16 copy of W, kept between calls and grown when a larger W comes.
    static __nv_bfloat16* Wd = nullptr;
    static size_t capacity = 0;
    const size_t count = (size_t)N * K;
    if (count > capacity) {
        cudaFree(Wd);
        cudaMalloc(&Wd, count * sizeof(__nv_bfloat16));
        capacity = count;
    }
    dequantize<<<(unsigned)((count + 255) / 256), 256>>>(W, scale, Wd, N, K);
    gemv_naive<<<dim3((N + 127) / 128, M), 128>>>(x, Wd, y, M, N, K);
}
