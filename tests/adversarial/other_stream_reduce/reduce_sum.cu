// Dishonest: a fast, correct reduction launched on its own non-blocking stream. The
// events on the default stream measure almost nothing, and the kernel (about 80 us
// at n = 2^26) finishes before the host clock can tell, so what gives it away is
// the time itself: 256 MiB read in a few microseconds is faster than any memory.
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int kThreads = 256;
constexpr int kBlocks = 1056;   // 8 per SM on a 132-SM GPU: enough to cover memory latency

__global__ void __launch_bounds__(kThreads) reduce(const float* __restrict__ x, float* out, long long n) {
    float acc = 0.0f;
    long long tid = (long long)blockIdx.x * kThreads + threadIdx.x;
    long long stride = (long long)gridDim.x * kThreads;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    long long n4 = n / 4;
    for (long long i = tid; i < n4; i += stride) {
        float4 v = x4[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    for (long long i = 4 * n4 + tid; i < n; i += stride) acc += x[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    __shared__ float warp_sums[kThreads / 32];
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
        if (threadIdx.x == 0) atomicAdd(out, acc);
    }
}

extern "C" void reduce_sum(const float* x, float* out, int n) {
    static cudaStream_t stream = nullptr;
    if (stream == nullptr) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    long long wanted = ((long long)n + 4 * kThreads - 1) / (4 * kThreads);
    int blocks = (int)(wanted < kBlocks ? (wanted > 0 ? wanted : 1) : kBlocks);
    reduce<<<blocks, kThreads, 0, stream>>>(x, out, n);
}
