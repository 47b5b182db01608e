// What quantize_int8.cu and quantize_fp8.cu share: per-row symmetric quantization, written once for
// any codec (what is read, what is stored, the largest code, the conversion).
//
//   * rows up to kWarpRowMax elements: a warp per row (8 rows per block of 256 threads);
//   * rows of whole vectors up to kThreads * kVec * 8 elements: a block per row that holds its row
//     in registers between the reduction and the conversion, so x is read once;
//   * longer rows: a block per row, two passes (the second reads the row again, from L2).
//
// A codec C provides: In, Out (element types), InVec, OutVec (one 16-byte load, its stored form),
// kVec (elements per InVec), kTop (the largest code: 127, 448), to_float(In), encode(float v,
// float inv) -> Out (v * inv, rounded to nearest even, saturated), encode_vec(InVec, inv) -> OutVec
// and vec_amax(InVec).
#pragma once

namespace quant {

constexpr int kThreads = 256;
constexpr int kWarpRowMax = 2048;

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float block_max(float v) {
    __shared__ float partial[kThreads / 32];
    v = warp_max(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_max(lane < kThreads / 32 ? partial[lane] : 0.0f);     // every thread has the maximum
}

__device__ __forceinline__ float scale_of(float amax, float top) { return amax > 0.0f ? amax / top : 1.0f; }

// The largest |x| of one row, read by `lanes` threads starting at `lane`, then encode it: the two
// passes of a warp (lanes = 32) or of a block (lanes = kThreads), `reduce` combining the threads.
template <class C, int kLanes, class Reduce>
__device__ __forceinline__ void two_passes(const typename C::In* row, typename C::Out* out, float* scale,
                                           int cols, bool vec, int lane, Reduce reduce) {
    float m = 0.0f;
    if (vec) {
        const typename C::InVec* v = reinterpret_cast<const typename C::InVec*>(row);
        for (int i = lane; i < cols / C::kVec; i += kLanes) m = fmaxf(m, C::vec_amax(v[i]));
    } else {
        for (int c = lane; c < cols; c += kLanes) m = fmaxf(m, fabsf(C::to_float(row[c])));
    }
    const float s = scale_of(reduce(m), C::kTop);
    const float inv = 1.0f / s;
    if (lane == 0) *scale = s;
    if (vec) {
        const typename C::InVec* v = reinterpret_cast<const typename C::InVec*>(row);
        typename C::OutVec* o = reinterpret_cast<typename C::OutVec*>(out);
        for (int i = lane; i < cols / C::kVec; i += kLanes) o[i] = C::encode_vec(v[i], inv);
    } else {
        for (int c = lane; c < cols; c += kLanes) out[c] = C::encode(C::to_float(row[c]), inv);
    }
}

template <class C>
__global__ void __launch_bounds__(kThreads) rows_by_block(const typename C::In* __restrict__ x,
                                                          typename C::Out* __restrict__ q,
                                                          float* __restrict__ scale, int cols, bool vec) {
    const size_t r = blockIdx.x;
    two_passes<C, kThreads>(x + r * cols, q + r * cols, scale + r, cols, vec, threadIdx.x,
                            [](float m) { return block_max(m); });
}

template <class C>
__global__ void __launch_bounds__(kThreads) rows_by_warp(const typename C::In* __restrict__ x,
                                                         typename C::Out* __restrict__ q,
                                                         float* __restrict__ scale, int rows, int cols, bool vec) {
    const int r = (blockIdx.x * kThreads + threadIdx.x) >> 5;
    if (r >= rows) return;                 // whole warps leave together: 32 threads share a row
    two_passes<C, 32>(x + (size_t)r * cols, q + (size_t)r * cols, scale + r, cols, vec, threadIdx.x & 31,
                      [](float m) { return warp_max(m); });
}

// One pass: each thread keeps its NV vectors of the row in registers.
template <class C, int NV>
__global__ void __launch_bounds__(kThreads) rows_held(const typename C::In* __restrict__ x,
                                                      typename C::Out* __restrict__ q,
                                                      float* __restrict__ scale, int cols) {
    const size_t r = blockIdx.x;
    const typename C::InVec* v = reinterpret_cast<const typename C::InVec*>(x + r * cols);
    typename C::OutVec* o = reinterpret_cast<typename C::OutVec*>(q + r * cols);
    const int n = cols / C::kVec;
    typename C::InVec e[NV];
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = threadIdx.x + j * kThreads;
        if (i < n) {
            e[j] = v[i];
            m = fmaxf(m, C::vec_amax(e[j]));
        }
    }
    const float s = scale_of(block_max(m), C::kTop);
    const float inv = 1.0f / s;
    if (threadIdx.x == 0) scale[r] = s;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = threadIdx.x + j * kThreads;
        if (i < n) o[i] = C::encode_vec(e[j], inv);
    }
}

template <class C>
void quantize(const typename C::In* x, typename C::Out* q, float* scale, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec = cols % C::kVec == 0 && reinterpret_cast<size_t>(x) % sizeof(typename C::InVec) == 0 &&
                     reinterpret_cast<size_t>(q) % sizeof(typename C::OutVec) == 0;
    if (cols <= kWarpRowMax) {
        const int per_block = kThreads / 32;
        rows_by_warp<C><<<(rows + per_block - 1) / per_block, kThreads>>>(x, q, scale, rows, cols, vec);
    } else if (vec && cols <= kThreads * C::kVec * 4) {
        rows_held<C, 4><<<rows, kThreads>>>(x, q, scale, cols);
    } else if (vec && cols <= kThreads * C::kVec * 8) {
        rows_held<C, 8><<<rows, kThreads>>>(x, q, scale, cols);
    } else {
        rows_by_block<C><<<rows, kThreads>>>(x, q, scale, cols, vec);
    }
}

}  // namespace quant
