// Reference solution: the norm in one pass, the scaling in a second, 12 bytes per element.
//
// Kernel 1 sums the squares: a persistent grid, four float4 loads in flight per thread, warp
// shuffles and shared memory within a block, one partial per block; the last block to finish (a
// ticket taken after __threadfence) adds the partials in double, in a fixed order, and writes
// the norm. Kernel 2 reads the norm, scales, and walks the vector from its end: kernel 1 read the
// end last, so the first blocks of kernel 2 still find it in the 60 MB L2.
#include <stdint.h>

namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 1024;
constexpr int kScaleThreads = 256;
constexpr int kScaleUnroll = 4;

__device__ double g_partials[kMaxBlocks];
__device__ unsigned int g_ticket = 0;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
    return x;
}

// Sum over the block; the result is valid in thread 0.
template <typename T>
__device__ __forceinline__ T block_sum(T x) {
    __shared__ T warp_sums[kThreads / 32];
    x = warp_sum(x);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = x;
    __syncthreads();
    x = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : T(0);
    if (warp == 0) x = warp_sum(x);
    return x;
}

__device__ __forceinline__ float squares(float4 a) { return fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, a.w * a.w))); }

__global__ void __launch_bounds__(kThreads)
norm_kernel(const float* __restrict__ g, int64_t n, bool vec, float* __restrict__ total_norm) {
    float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
    const int64_t tid = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    const int64_t threads = (int64_t)gridDim.x * kThreads;
    int64_t tail = 0;
    if (vec) {
        const float4* g4 = reinterpret_cast<const float4*>(g);
        const int64_t n4 = n / 4;
        int64_t i = tid;
        for (; i + 3 * threads < n4; i += 4 * threads) {
            const float4 a = g4[i], b = g4[i + threads], c = g4[i + 2 * threads], d = g4[i + 3 * threads];
            acc0 += squares(a);
            acc1 += squares(b);
            acc2 += squares(c);
            acc3 += squares(d);
        }
        for (; i < n4; i += threads) acc0 += squares(g4[i]);
        tail = n4 * 4;
    }
    for (int64_t i = tail + tid; i < n; i += threads) acc1 = fmaf(g[i], g[i], acc1);

    const double block = (double)block_sum((acc0 + acc1) + (acc2 + acc3));
    __shared__ bool last;
    if (threadIdx.x == 0) {
        g_partials[blockIdx.x] = block;
        __threadfence();                         // publish the partial before taking a ticket
        last = atomicAdd(&g_ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();                             // see every other block's partial
    double sum = 0.0;
    for (int i = threadIdx.x; i < gridDim.x; i += kThreads) sum += __ldcg(&g_partials[i]);
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
        *total_norm = (float)sqrt(sum);
        g_ticket = 0;                            // ready for the next call
    }
}

__global__ void __launch_bounds__(kScaleThreads)
scale_vec4(float4* __restrict__ g, int64_t n4, float max_norm, const float* __restrict__ total_norm) {
    const float coef = fminf(1.0f, max_norm / (*total_norm + 1e-6f));
    const int64_t block = gridDim.x - 1 - blockIdx.x;             // the end of the vector first
    const int64_t base = block * (kScaleThreads * kScaleUnroll) + threadIdx.x;
    float4 x[kScaleUnroll];
#pragma unroll
    for (int u = 0; u < kScaleUnroll; ++u) {
        const int64_t i = base + (int64_t)u * kScaleThreads;
        if (i < n4) x[u] = g[i];
    }
#pragma unroll
    for (int u = 0; u < kScaleUnroll; ++u) {
        const int64_t i = base + (int64_t)u * kScaleThreads;
        if (i < n4) g[i] = make_float4(x[u].x * coef, x[u].y * coef, x[u].z * coef, x[u].w * coef);
    }
}

__global__ void scale_scalar(float* __restrict__ g, int64_t begin, int64_t n, float max_norm,
                             const float* __restrict__ total_norm) {
    const float coef = fminf(1.0f, max_norm / (*total_norm + 1e-6f));
    for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        g[i] *= coef;
}

int norm_blocks(int64_t n) {
    static int max_blocks = 0;
    if (max_blocks == 0) {
        int device = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_kernel, kThreads, 0);
        max_blocks = sms * (per_sm > 0 ? per_sm : 1);
        if (max_blocks > kMaxBlocks) max_blocks = kMaxBlocks;
    }
    const int64_t wanted = (n + 4LL * kThreads - 1) / (4LL * kThreads);
    return (int)(wanted < max_blocks ? (wanted > 0 ? wanted : 1) : max_blocks);
}

}  // namespace

extern "C" void clip_grad_norm(float* g, int64_t n, float max_norm, float* total_norm) {
    if (n <= 0) {
        cudaMemsetAsync(total_norm, 0, sizeof(float));
        return;
    }
    const bool vec = (reinterpret_cast<uintptr_t>(g) & 15) == 0;
    norm_kernel<<<norm_blocks(n), kThreads>>>(g, n, vec, total_norm);
    const int64_t n4 = vec ? n / 4 : 0;
    if (n4 > 0) {
        const int64_t per_block = (int64_t)kScaleThreads * kScaleUnroll;
        scale_vec4<<<(unsigned)((n4 + per_block - 1) / per_block), kScaleThreads>>>(
            reinterpret_cast<float4*>(g), n4, max_norm, total_norm);
    }
    if (n4 * 4 < n) {
        const int64_t rest = n - n4 * 4;
        const int64_t blocks = (rest + 255) / 256;
        scale_scalar<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(g, n4 * 4, n, max_norm, total_norm);
    }
}
