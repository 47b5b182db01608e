// Reference solution: reduce_sum in one launch at close to the device's read bandwidth.
//
// One persistent-style grid (a few blocks per SM). Each thread sums its share of
// x in registers with 16-byte loads, four independent float4 loads in flight per
// iteration; the warp combines with shuffles, the block through shared memory, and
// each block writes one partial sum. The last block to finish (an atomic ticket
// after a __threadfence) adds the partial sums in a fixed order, so the result is
// deterministic, and writes *out. No memset, no second launch, no host sync.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 1024;

__device__ float g_partials[kMaxBlocks];
__device__ unsigned int g_ticket = 0;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// Sum over the block; the result is valid in thread 0.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[kThreads / 32];
    v = warp_sum(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    return v;
}

__global__ void __launch_bounds__(kThreads)
reduce_kernel(const float* __restrict__ x, float* __restrict__ out, long long n, bool vec) {
    float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
    long long tid = (long long)blockIdx.x * kThreads + threadIdx.x;
    long long nthreads = (long long)gridDim.x * kThreads;
    long long tail_begin = 0;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        long long n4 = n / 4;
        long long i = tid;
        for (; i + 3 * nthreads < n4; i += 4 * nthreads) {
            float4 p = x4[i], q = x4[i + nthreads];
            float4 r = x4[i + 2 * nthreads], s = x4[i + 3 * nthreads];
            acc0 += (p.x + p.y) + (p.z + p.w);
            acc1 += (q.x + q.y) + (q.z + q.w);
            acc2 += (r.x + r.y) + (r.z + r.w);
            acc3 += (s.x + s.y) + (s.z + s.w);
        }
        for (; i < n4; i += nthreads) {
            float4 p = x4[i];
            acc0 += (p.x + p.y) + (p.z + p.w);
        }
        tail_begin = n4 * 4;
    }
    for (long long i = tail_begin + tid; i < n; i += nthreads) acc1 += x[i];

    float block = block_sum((acc0 + acc1) + (acc2 + acc3));
    __shared__ bool last;
    if (threadIdx.x == 0) {
        g_partials[blockIdx.x] = block;
        __threadfence();  // publish the partial before taking a ticket
        last = atomicAdd(&g_ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // see every other block's partial
    float v = 0.f;
    for (int i = threadIdx.x; i < gridDim.x; i += kThreads) v += __ldcg(&g_partials[i]);
    v = block_sum(v);
    if (threadIdx.x == 0) {
        *out = v;
        g_ticket = 0;  // ready for the next call
    }
}

int blocks_for(long long n) {
    static int max_blocks = 0;
    if (max_blocks == 0) {
        int device = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduce_kernel, kThreads, 0);
        max_blocks = sms * (per_sm > 0 ? per_sm : 1);
        if (max_blocks > kMaxBlocks) max_blocks = kMaxBlocks;
        if (max_blocks < 1) max_blocks = 1;
    }
    long long wanted = (n + 4LL * kThreads - 1) / (4LL * kThreads);
    return (int)(wanted < max_blocks ? (wanted > 0 ? wanted : 1) : max_blocks);
}

}  // namespace

extern "C" void reduce_sum(const float* x, float* out, int n) {
    if (n <= 0) {
        cudaMemsetAsync(out, 0, sizeof(float));
        return;
    }
    bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
    reduce_kernel<<<blocks_for(n), kThreads>>>(x, out, n, vec);
}
