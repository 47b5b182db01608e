// Reference solution: AdamW over a whole list of tensors in one launch ("multi-tensor apply").
//
// Every tensor is cut into chunks of kChunk elements. Each block first computes, from the sizes
// on the device, the running sum of chunk counts over the tensors into shared memory (a block-wide
// scan; a few hundred tensors cost a few microseconds), then takes chunks blockIdx.x,
// blockIdx.x + gridDim.x, ... and finds the tensor of each with a binary search. Inside a chunk the
// update is adamw.cu's: float4 accesses, four of each array in flight per thread. Big tensors get as
// many blocks as they have chunks; a list of 500 tiny tensors costs one launch, not 500.
#include <stdint.h>

#include "adamw_step.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 4 * 4 * kThreads;         // elements per chunk: four float4 per thread
constexpr int kMaxTensors = 2048;                // per launch: the scan lives in 16 KB of shared memory

__device__ __forceinline__ int64_t warp_inclusive_scan(int64_t x) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const int64_t y = __shfl_up_sync(0xffffffffu, x, offset);
        if (lane >= offset) x += y;
    }
    return x;
}

// The exclusive prefix sum of x over the block.
__device__ int64_t block_exclusive_scan(int64_t x) {
    __shared__ int64_t warp_totals[kThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t inclusive = warp_inclusive_scan(x);
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        int64_t total = lane < kThreads / 32 ? warp_totals[lane] : 0;
        total = warp_inclusive_scan(total);
        if (lane < kThreads / 32) warp_totals[lane] = total;
    }
    __syncthreads();
    return inclusive - x + (warp > 0 ? warp_totals[warp - 1] : 0);
}

__device__ __forceinline__ int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

__device__ void chunk_update(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t len, const AdamHyper& h) {
    int64_t done = 0;
    const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) |
                           reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
    if (aligned) {
        float4* p4 = reinterpret_cast<float4*>(p);
        const float4* g4 = reinterpret_cast<const float4*>(g);
        float4* m4 = reinterpret_cast<float4*>(m);
        float4* v4 = reinterpret_cast<float4*>(v);
        const int64_t n4 = len / 4;
        float4 pv[4], gv[4], mv[4], vv[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int64_t i = threadIdx.x + u * kThreads;
            if (i < n4) { pv[u] = p4[i]; gv[u] = g4[i]; mv[u] = m4[i]; vv[u] = v4[i]; }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int64_t i = threadIdx.x + u * kThreads;
            if (i < n4) {
                adam_update4(pv[u], gv[u], mv[u], vv[u], h);
                p4[i] = pv[u];
                m4[i] = mv[u];
                v4[i] = vv[u];
            }
        }
        done = n4 * 4;
    }
    for (int64_t i = done + threadIdx.x; i < len; i += kThreads) {
        float pi = p[i], mi = m[i], vi = v[i];
        adam_update(pi, g[i], mi, vi, h);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

__global__ void __launch_bounds__(kThreads)
adamw_chunks(float* const* p, const float* const* g, float* const* m, float* const* v, const int64_t* sizes,
             int count, AdamHyper h) {
    __shared__ int64_t chunk_end[kMaxTensors];      // chunks of tensors 0..t, inclusive
    const int per_thread = (count + kThreads - 1) / kThreads;
    const int first = threadIdx.x * per_thread;
    const int last = min(first + per_thread, count);
    int64_t mine = 0;
    for (int t = first; t < last; ++t) mine += chunks_of(sizes[t]);
    int64_t running = block_exclusive_scan(mine);
    for (int t = first; t < last; ++t) {
        running += chunks_of(sizes[t]);
        chunk_end[t] = running;
    }
    __syncthreads();
    const int64_t total = chunk_end[count - 1];
    for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
        int lo = 0, hi = count - 1;                 // the first tensor whose chunks end after c
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            if (chunk_end[mid] > c) hi = mid; else lo = mid + 1;
        }
        const int64_t begin = (c - (lo > 0 ? chunk_end[lo - 1] : 0)) * kChunk;
        const int64_t len = min((int64_t)kChunk, sizes[lo] - begin);
        chunk_update(p[lo] + begin, g[lo] + begin, m[lo] + begin, v[lo] + begin, len, h);
    }
}

int grid_size() {
    static int blocks = 0;
    if (blocks == 0) {
        int device = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, adamw_chunks, kThreads, 0);
        blocks = sms * (per_sm > 0 ? per_sm : 1);
    }
    return blocks;
}

}  // namespace

extern "C" void adamw_multi(float* const* p, const float* const* g, float* const* m, float* const* v,
                            const int64_t* sizes, int count, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int step) {
    const AdamHyper h = adam_hyper(lr, beta1, beta2, eps, weight_decay, step);
    for (int first = 0; first < count; first += kMaxTensors) {
        const int batch = count - first < kMaxTensors ? count - first : kMaxTensors;
        adamw_chunks<<<grid_size(), kThreads>>>(p + first, g + first, m + first, v + first, sizes + first, batch, h);
    }
}
