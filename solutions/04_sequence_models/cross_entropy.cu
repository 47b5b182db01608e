// Reference solution: the cross-entropy loss and its gradient reading the logits once and
// writing dlogits once, 8 bytes a logit.
//
// A row's statistics (its maximum m and s = sum exp(x - m)) must be complete before the first
// element of dlogits can be written, so the row must stay on chip in between, or be read
// twice. A row is held in registers:
//   cols <= 1024      a warp per row, up to 32 values a lane; shuffles only.
//   cols <= 131072    a thread block cluster per row: C blocks of 512 threads (C = 1, 2, 4 or
//                     8), each holding a contiguous piece of up to 16,384 logits, 32 a thread.
//                     Each block reduces its piece to a partial (m, s) and puts it in its
//                     shared memory; after a cluster barrier every block reads the C partials
//                     through distributed shared memory (Hopper's thread block clusters) and
//                     merges them in rank order, so every block gets the same row statistics.
//                     GPT-2's 50,257 logits (201 KB) take a cluster of 4; two clusters' blocks
//                     fit on an SM, so one row's loads overlap another's writes.
//   larger            a block per row reads it twice: (m, s) online, then dlogits, walking the
//                     row backwards so that the part read last, still in L2, is read first.
// Partial statistics merge exactly (the online softmax):
//   (m1, s1) + (m2, s2) = (m, s1 exp(m1 - m) + s2 exp(m2 - m)),   m = max(m1, m2).
// loss = (m - x_target) + log s: when the target is the maximum and the rest is far below,
// the loss is tiny, and (m + log s) - x_target would lose it in the rounding of a large m.
// dlogits = exp(x - m) / (s * rows) - [c == target] / rows, each exponential computed once.

#include <cmath>
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;
constexpr int kClusterThreads = 512;
constexpr int kWarpBlock = 256;
constexpr int kStreamThreads = 1024;

__device__ __forceinline__ float exp_of(float x) { return exp2f(x * kLog2e); }

struct MaxSum {
    float max;
    float sum;  // sum of exp(x - max)
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return {m, 0.0f};  // both empty: no (-inf) - (-inf)
    return {m, a.sum * exp_of(a.max - m) + b.sum * exp_of(b.max - m)};
}

__device__ __forceinline__ MaxSum warp_reduce(MaxSum p) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        p = combine(p, {__shfl_xor_sync(kFullMask, p.max, offset), __shfl_xor_sync(kFullMask, p.sum, offset)});
    }
    return p;
}

// Over a block of TPB threads; every thread gets the total. Used once per block.
template <int TPB>
__device__ __forceinline__ MaxSum block_reduce(MaxSum p) {
    __shared__ MaxSum partial[TPB / kWarp];
    p = warp_reduce(p);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    if (lane == 0) partial[warp] = p;
    __syncthreads();
    p = lane < TPB / kWarp ? partial[lane] : MaxSum{-INFINITY, 0.0f};
    return warp_reduce(p);
}

// The N values a thread holds become exp(v - its own max); returns (its max, its sum).
template <int N>
__device__ __forceinline__ MaxSum exponentiate(float (&v)[N]) {
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < N; ++j) m = fmaxf(m, v[j]);
    const float shift = m == -INFINITY ? 0.0f : m;   // a thread past the end holds only -inf
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        v[j] = exp_of(v[j] - shift);
        s += v[j];
    }
    return {m, s};
}

// Load N values, VEC at a time, from piece[0, len): element j of thread t is at
// ((j / VEC) * TPB + t) * VEC + j % VEC. Past len: -inf.
template <int TPB, int N, int VEC>
__device__ __forceinline__ void load(float (&v)[N], const float* __restrict__ piece, int t, int len) {
#pragma unroll
    for (int i = 0; i < N / VEC; ++i) {
        const int c = (i * TPB + t) * VEC;
        if constexpr (VEC == 4) {
            if (c < len) {
                const float4 q = __ldg(reinterpret_cast<const float4*>(piece + c));
                v[4 * i] = q.x;
                v[4 * i + 1] = q.y;
                v[4 * i + 2] = q.z;
                v[4 * i + 3] = q.w;
            } else {
                v[4 * i] = v[4 * i + 1] = v[4 * i + 2] = v[4 * i + 3] = -INFINITY;
            }
        } else {
            v[i] = c < len ? __ldg(piece + c) : -INFINITY;
        }
    }
}

// dlogits of the N values (already exp(v - own max)): v * factor, minus 1 / rows at the target.
template <int TPB, int N, int VEC>
__device__ __forceinline__ void store(const float (&v)[N], float* __restrict__ piece, int t, int len, float factor,
                                      int target_here, float inv_rows) {
#pragma unroll
    for (int i = 0; i < N / VEC; ++i) {
        const int c = (i * TPB + t) * VEC;
        if (c < len) {
            float d[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) d[e] = v[VEC * i + e] * factor - (c + e == target_here ? inv_rows : 0.0f);
            if constexpr (VEC == 4) {
                *reinterpret_cast<float4*>(piece + c) = make_float4(d[0], d[1], d[2], d[3]);
            } else {
                piece[c] = d[0];
            }
        }
    }
}

// Short rows: a warp per row.
template <int N, int VEC>
__global__ void __launch_bounds__(kWarpBlock)
    cross_entropy_warp_kernel(const float* __restrict__ logits, const int* __restrict__ targets,
                              float* __restrict__ loss, float* __restrict__ dlogits, int rows, int cols) {
    const int lane = threadIdx.x % kWarp;
    const int r = blockIdx.x * (kWarpBlock / kWarp) + threadIdx.x / kWarp;
    if (r >= rows) return;   // uniform per warp
    const size_t base = static_cast<size_t>(r) * cols;
    float v[N];
    load<kWarp, N, VEC>(v, logits + base, lane, cols);
    const MaxSum own = exponentiate(v);
    const MaxSum row = warp_reduce(own);
    const int target = __ldg(targets + r);
    const float inv_rows = 1.0f / rows;
    if (lane == 0) loss[r] = (row.max - __ldg(logits + base + target)) + logf(row.sum);
    store<kWarp, N, VEC>(v, dlogits + base, lane, cols, exp_of(own.max - row.max) / row.sum * inv_rows, target,
                         inv_rows);
}

// Long rows: a cluster of C blocks per row, each block a piece of chunk = 512 * N logits.
template <int N, int VEC, int C>
__global__ void __launch_bounds__(kClusterThreads, 2)
    cross_entropy_cluster_kernel(const float* __restrict__ logits, const int* __restrict__ targets,
                                 float* __restrict__ loss, float* __restrict__ dlogits, int rows, int cols) {
    constexpr int kChunk = kClusterThreads * N;
    __shared__ MaxSum piece_stats;
    const int rank = C > 1 ? static_cast<int>(cg::this_cluster().block_rank()) : 0;
    const int r = blockIdx.x / C;   // the cluster's row: clusters are C consecutive blocks
    const int t = threadIdx.x;
    const int first = rank * kChunk;
    const int len = cols - first < kChunk ? cols - first : kChunk;   // may be <= 0: an idle piece
    const size_t base = static_cast<size_t>(r) * cols + first;

    float v[N];
    load<kClusterThreads, N, VEC>(v, logits + base, t, len);
    const MaxSum own = exponentiate(v);
    MaxSum row = block_reduce<kClusterThreads>(own);
    if constexpr (C > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        if (t == 0) piece_stats = row;
        cluster.sync();   // every block's partial is in its shared memory
        row = {-INFINITY, 0.0f};
#pragma unroll
        for (int k = 0; k < C; ++k) row = combine(row, *cluster.map_shared_rank(&piece_stats, k));
    }
    const int target = __ldg(targets + r);
    const float inv_rows = 1.0f / rows;
    if (rank == 0 && t == 0) loss[r] = (row.max - __ldg(logits + static_cast<size_t>(r) * cols + target)) + logf(row.sum);
    store<kClusterThreads, N, VEC>(v, dlogits + base, t, len, exp_of(own.max - row.max) / row.sum * inv_rows,
                                   target - first, inv_rows);
    if constexpr (C > 1) cg::this_cluster().sync();   // no block leaves while others may read its partial
}

// Rows beyond a cluster's registers: a block per row, two passes.
__global__ void __launch_bounds__(kStreamThreads)
    cross_entropy_stream_kernel(const float* __restrict__ logits, const int* __restrict__ targets,
                                float* __restrict__ loss, float* __restrict__ dlogits, int rows, int cols) {
    const int r = blockIdx.x;
    const float* x = logits + static_cast<size_t>(r) * cols;
    float* d = dlogits + static_cast<size_t>(r) * cols;
    MaxSum p{-INFINITY, 0.0f};
    for (int c = threadIdx.x; c < cols; c += kStreamThreads) p = combine(p, {__ldg(x + c), 1.0f});
    const MaxSum row = block_reduce<kStreamThreads>(p);
    const int target = __ldg(targets + r);
    const float inv_rows = 1.0f / rows;
    const float scale = 1.0f / row.sum * inv_rows;
    if (threadIdx.x == 0) loss[r] = (row.max - __ldg(x + target)) + logf(row.sum);
    const int last = (cols - 1) / kStreamThreads * kStreamThreads;
    for (int c0 = last; c0 >= 0; c0 -= kStreamThreads) {   // backwards: the tail is still in L2
        const int c = c0 + threadIdx.x;
        if (c < cols) d[c] = exp_of(__ldg(x + c) - row.max) * scale - (c == target ? inv_rows : 0.0f);
    }
}

template <int N, int VEC>
void warp_rows(const float* logits, const int* targets, float* loss, float* dlogits, int rows, int cols) {
    const int per_block = kWarpBlock / kWarp;
    cross_entropy_warp_kernel<N, VEC><<<(rows + per_block - 1) / per_block, kWarpBlock>>>(logits, targets, loss,
                                                                                         dlogits, rows, cols);
}

template <int N>
void warp_rows(const float* logits, const int* targets, float* loss, float* dlogits, int rows, int cols, bool vec4) {
    if constexpr (N % 4 == 0) {
        if (vec4) return warp_rows<N, 4>(logits, targets, loss, dlogits, rows, cols);
    }
    warp_rows<N, 1>(logits, targets, loss, dlogits, rows, cols);
}

template <int N, int VEC, int C>
void cluster_rows(const float* logits, const int* targets, float* loss, float* dlogits, int rows, int cols) {
    const auto kernel = cross_entropy_cluster_kernel<N, VEC, C>;
    if constexpr (C == 1) {
        kernel<<<rows, kClusterThreads>>>(logits, targets, loss, dlogits, rows, cols);
    } else {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(static_cast<unsigned>(rows) * C);
        config.blockDim = dim3(kClusterThreads);
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeClusterDimension;
        attribute[0].val.clusterDim.x = C;
        attribute[0].val.clusterDim.y = 1;
        attribute[0].val.clusterDim.z = 1;
        config.attrs = attribute;
        config.numAttrs = 1;
        cudaLaunchKernelEx(&config, kernel, logits, targets, loss, dlogits, rows, cols);
    }
}

// The smallest cluster whose registers (32 values a thread) hold the row, then the fewest values a
// thread that still cover it. Pieces are multiples of 4 logits, so float4 needs only an aligned row.
template <int C>
void cluster_rows(const float* logits, const int* targets, float* loss, float* dlogits, int rows, int cols,
                  bool vec4) {
    const int per_value = C * kClusterThreads;
    if (cols <= per_value * 8) {
        vec4 ? cluster_rows<8, 4, C>(logits, targets, loss, dlogits, rows, cols)
             : cluster_rows<8, 1, C>(logits, targets, loss, dlogits, rows, cols);
    } else if (cols <= per_value * 16) {
        vec4 ? cluster_rows<16, 4, C>(logits, targets, loss, dlogits, rows, cols)
             : cluster_rows<16, 1, C>(logits, targets, loss, dlogits, rows, cols);
    } else {
        vec4 ? cluster_rows<32, 4, C>(logits, targets, loss, dlogits, rows, cols)
             : cluster_rows<32, 1, C>(logits, targets, loss, dlogits, rows, cols);
    }
}

}  // namespace

extern "C" void cross_entropy(const float* logits, const int* targets, float* loss,
                              float* dlogits, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec4 = cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(dlogits) % 16 == 0;
    constexpr int kHeld = kClusterThreads * 32;   // logits one block holds
    if (cols <= kWarp) {
        warp_rows<1>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 2 * kWarp) {
        warp_rows<2>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 4 * kWarp) {
        warp_rows<4>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 8 * kWarp) {
        warp_rows<8>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 16 * kWarp) {
        warp_rows<16>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 32 * kWarp) {
        warp_rows<32>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= kHeld) {
        cluster_rows<1>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 2 * kHeld) {
        cluster_rows<2>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 4 * kHeld) {
        cluster_rows<4>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else if (cols <= 8 * kHeld) {
        cluster_rows<8>(logits, targets, loss, dlogits, rows, cols, vec4);
    } else {
        cross_entropy_stream_kernel<<<rows, kStreamThreads>>>(logits, targets, loss, dlogits, rows, cols);
    }
}
