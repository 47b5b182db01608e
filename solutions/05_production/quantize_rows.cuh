// What quantize_int8.cu and quantize_fp8.cu share: one block per row (a warp per row for short
// rows), the row's largest magnitude by a reduction, then a second pass (the row is in L1 or L2 by
// then) that converts and writes. Loads and stores are vectors of kVec elements where the row allows.
#pragma once

namespace quant {

constexpr int kThreads = 256;

__device__ __forceinline__ float block_max(float v) {
    __shared__ float partial[kThreads / 32];
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < kThreads / 32 ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;     // every thread has the block's maximum
}

// Largest |x| of the row, vector loads of type V (kVec elements of T) when `vec`.
template <typename T, typename V, int kVec>
__device__ __forceinline__ float row_amax(const T* row, int cols, bool vec) {
    float m = 0.0f;
    if (vec) {
        const V* v = reinterpret_cast<const V*>(row);
        for (int i = threadIdx.x; i < cols / kVec; i += kThreads) {
            const V chunk = v[i];
            const T* e = reinterpret_cast<const T*>(&chunk);
#pragma unroll
            for (int j = 0; j < kVec; ++j) m = fmaxf(m, fabsf(static_cast<float>(e[j])));
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, fabsf(static_cast<float>(row[c])));
    }
    return block_max(m);
}

// Rows up to this long go a warp each (8 rows per block): a block of 256 threads on a row of 768
// elements would have 3 elements a thread, and spend its time in the reduction and the barrier.
constexpr int kWarpRowMax = 2048;

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Largest |x| of the row, read by the 32 lanes of one warp.
template <typename T, typename V, int kVec>
__device__ __forceinline__ float row_amax_warp(const T* row, int cols, bool vec, int lane) {
    float m = 0.0f;
    if (vec) {
        const V* v = reinterpret_cast<const V*>(row);
        for (int i = lane; i < cols / kVec; i += 32) {
            const V chunk = v[i];
            const T* e = reinterpret_cast<const T*>(&chunk);
#pragma unroll
            for (int j = 0; j < kVec; ++j) m = fmaxf(m, fabsf(static_cast<float>(e[j])));
        }
    } else {
        for (int c = lane; c < cols; c += 32) m = fmaxf(m, fabsf(static_cast<float>(row[c])));
    }
    return warp_max(m);
}

}  // namespace quant
