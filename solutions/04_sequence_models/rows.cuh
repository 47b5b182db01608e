// What the row-wise solutions of exercise 04 (layernorm_forward, layernorm_backward) share: a
// row held in registers by a group of threads (a warp, or a whole block), loaded once,
// coalesced, 16 bytes at a time where the row length and the pointers allow it; and sums over
// such a group.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace rows {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
    return v;
}

// Sum over the TPR threads that share a row; every one of them gets the total. With TPR > 32
// the row is the whole block: one round through shared memory, and a second barrier so that
// the next call may reuse the slots.
template <int TPR>
__device__ __forceinline__ float group_sum(float v) {
    v = warp_sum(v);
    if constexpr (TPR > kWarp) {
        __shared__ float partial[TPR / kWarp];
        const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        v = lane < TPR / kWarp ? partial[lane] : 0.0f;
        v = warp_sum(v);
        __syncthreads();
    }
    return v;
}

// The columns of a row that thread t of its group owns: element j of its registers is column
// col(i, t, j) with i = j / VEC; consecutive threads own consecutive 4-byte or 16-byte pieces.
template <int TPR, int VEC>
__device__ __forceinline__ int col(int j, int t) {
    return ((j / VEC) * TPR + t) * VEC + j % VEC;
}

// Load N values of a row into v (VEC = 4 requires cols % 4 == 0 and a 16-byte aligned row);
// columns past the end read as `fill`.
template <int TPR, int N, int VEC>
__device__ __forceinline__ void load(float (&v)[N], const float* __restrict__ row, int t, int cols, float fill) {
#pragma unroll
    for (int i = 0; i < N / VEC; ++i) {
        const int c = (i * TPR + t) * VEC;
        if (c < cols) {
            if constexpr (VEC == 4) {
                const float4 q = __ldg(reinterpret_cast<const float4*>(row + c));
                v[4 * i] = q.x;
                v[4 * i + 1] = q.y;
                v[4 * i + 2] = q.z;
                v[4 * i + 3] = q.w;
            } else {
                v[i] = __ldg(row + c);
            }
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[VEC * i + j] = fill;
        }
    }
}

template <int TPR, int N, int VEC>
__device__ __forceinline__ void store(const float (&v)[N], float* __restrict__ row, int t, int cols) {
#pragma unroll
    for (int i = 0; i < N / VEC; ++i) {
        const int c = (i * TPR + t) * VEC;
        if (c < cols) {
            if constexpr (VEC == 4) {
                *reinterpret_cast<float4*>(row + c) = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
            } else {
                row[c] = v[i];
            }
        }
    }
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace rows
