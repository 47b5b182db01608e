// What quantize_int8.cu and quantize_fp8.cu share: per-row symmetric quantization, written once for
// any codec (what is read, what is stored, the largest code, the conversion).
//
//   * rows up to kWarpRowMax elements: a warp per row (8 rows per block of 256 threads);
//   * longer rows of whole vectors, up to kThreads * kVec * 8 elements: a block per row;
//   * longer rows still: a block per row, two passes (the second reads the row again, from L2).
// Rows of whole 16-byte vectors are held in registers between their maximum and their conversion:
// x is read once, and every load of a row is in flight at the same time (a short row read in two
// passes would wait for DRAM twice, with few bytes in flight). Other rows take two passes.
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

// Short rows that are not whole 16-byte vectors (those are held in registers: rows_held).
template <class C>
__global__ void __launch_bounds__(kThreads) rows_by_warp(const typename C::In* __restrict__ x,
                                                         typename C::Out* __restrict__ q,
                                                         float* __restrict__ scale, int rows, int cols) {
    const int r = (blockIdx.x * kThreads + threadIdx.x) >> 5;
    if (r >= rows) return;                 // whole warps leave together: 32 threads share a row
    two_passes<C, 32>(x + (size_t)r * cols, q + (size_t)r * cols, scale + r, cols, false, threadIdx.x & 31,
                      [](float m) { return warp_max(m); });
}

// One pass: each of the kLanes threads of a row (a warp's or a block's) keeps its NV vectors of the
// row in registers. Two blocks a multiprocessor at least (128 registers a thread at most): with no
// such bound ptxas trades one register of the longest rows for a spill to local memory.
template <class C, int NV, int kLanes>
__global__ void __launch_bounds__(kThreads, 2) rows_held(const typename C::In* __restrict__ x,
                                                      typename C::Out* __restrict__ q,
                                                      float* __restrict__ scale, int rows, int cols) {
    const size_t r = kLanes == kThreads ? blockIdx.x : (blockIdx.x * kThreads + threadIdx.x) / kLanes;
    const int lane = threadIdx.x % kLanes;
    if (r >= (size_t)rows) return;         // whole warps leave together: a warp shares a row
    const typename C::InVec* v = reinterpret_cast<const typename C::InVec*>(x + r * cols);
    typename C::OutVec* o = reinterpret_cast<typename C::OutVec*>(q + r * cols);
    const int n = cols / C::kVec;
    // Every load first, then the arithmetic: zeros past the row end keep the code free of branches
    // (a branch between two loads makes the second wait for the first).
    typename C::InVec e[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = lane + j * kLanes;
        e[j] = i < n ? v[i] : typename C::InVec{};
    }
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) m = fmaxf(m, C::vec_amax(e[j]));
    const float s = scale_of(kLanes == kThreads ? block_max(m) : warp_max(m), C::kTop);
    const float inv = 1.0f / s;
    if (lane == 0) scale[r] = s;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = lane + j * kLanes;
        if (i < n) o[i] = C::encode_vec(e[j], inv);
    }
}

// Rows of whole vectors, at most NV per thread of kLanes: held in registers.
template <class C, int NV, int kLanes>
void launch_held(const typename C::In* x, typename C::Out* q, float* scale, int rows, int cols) {
    const int per_block = kThreads / kLanes;
    rows_held<C, NV, kLanes><<<(rows + per_block - 1) / per_block, kThreads>>>(x, q, scale, rows, cols);
}

template <class C>
void quantize(const typename C::In* x, typename C::Out* q, float* scale, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec = cols % C::kVec == 0 && reinterpret_cast<size_t>(x) % sizeof(typename C::InVec) == 0 &&
                     reinterpret_cast<size_t>(q) % sizeof(typename C::OutVec) == 0;
    const int vecs = cols / C::kVec;                  // 16-byte vectors a row
    constexpr int kWarpNV = kWarpRowMax / (32 * C::kVec);   // vectors a lane, for the longest warp row
    if (vec && cols <= kWarpRowMax) {
        if (vecs <= 32 * 2) launch_held<C, 2, 32>(x, q, scale, rows, cols);
        else if (vecs <= 32 * 4) launch_held<C, 4, 32>(x, q, scale, rows, cols);
        else if (vecs <= 32 * 8 || kWarpNV <= 8) launch_held<C, 8, 32>(x, q, scale, rows, cols);
        else launch_held<C, kWarpNV, 32>(x, q, scale, rows, cols);
    } else if (cols <= kWarpRowMax) {
        const int per_block = kThreads / 32;
        rows_by_warp<C><<<(rows + per_block - 1) / per_block, kThreads>>>(x, q, scale, rows, cols);
    } else if (vec && vecs <= kThreads * 4) {
        launch_held<C, 4, kThreads>(x, q, scale, rows, cols);
    } else if (vec && vecs <= kThreads * 8) {
        launch_held<C, 8, kThreads>(x, q, scale, rows, cols);
    } else {
        rows_by_block<C><<<rows, kThreads>>>(x, q, scale, cols, vec);
    }
}

}  // namespace quant
