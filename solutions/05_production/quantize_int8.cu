// Per-row INT8 quantization at the copy bandwidth: float4 loads, char4 stores. Rows up to 2048: a
// warp each; up to 8192 (whole float4s): a block each, the row held in registers; longer rows: a
// block each, two passes.
//
// Pass 1 reads the row for its largest |x| (a block reduction); pass 2 reads it again, from L2,
// and writes q. DRAM sees x once and q once: 5 bytes an element.
#include <cstdint>

#include "quantize_rows.cuh"

__device__ __forceinline__ int8_t to_int8(float v, float inv) {
    return (int8_t)max(-127, min(127, __float2int_rn(v * inv)));   // round to nearest even
}

__global__ void __launch_bounds__(quant::kThreads) quantize_int8_rows(const float* __restrict__ x,
                                                                    int8_t* __restrict__ q,
                                                                    float* __restrict__ scale, int cols,
                                                                    bool vec) {
    const int r = blockIdx.x;
    const float* row = x + (size_t)r * cols;
    int8_t* out = q + (size_t)r * cols;
    const float amax = quant::row_amax<float, float4, 4>(row, cols, vec);
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    const float inv = 1.0f / s;
    if (threadIdx.x == 0) scale[r] = s;
    if (vec) {
        const float4* v = reinterpret_cast<const float4*>(row);
        char4* o = reinterpret_cast<char4*>(out);
        for (int i = threadIdx.x; i < cols / 4; i += quant::kThreads) {
            const float4 e = v[i];
            o[i] = make_char4(to_int8(e.x, inv), to_int8(e.y, inv), to_int8(e.z, inv), to_int8(e.w, inv));
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += quant::kThreads) out[c] = to_int8(row[c], inv);
    }
}

// Rows of up to kThreads * 4 * NV floats that are whole float4s: one pass. Each thread keeps its
// NV float4 of the row in registers between the reduction and the conversion, so x is read from
// DRAM once and never again from L2 (the second pass of the kernel above is what keeps it at
// about 80% of copy on rows of 8192).
template <int NV>
__global__ void __launch_bounds__(quant::kThreads) quantize_int8_held(const float* __restrict__ x,
                                                                    int8_t* __restrict__ q,
                                                                    float* __restrict__ scale, int cols) {
    const int r = blockIdx.x;
    const float4* v = reinterpret_cast<const float4*>(x + (size_t)r * cols);
    char4* o = reinterpret_cast<char4*>(q + (size_t)r * cols);
    const int n4 = cols / 4;
    float4 e[NV];
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = threadIdx.x + j * quant::kThreads;
        e[j] = i < n4 ? v[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(e[j].x), fabsf(e[j].y)), fmaxf(fabsf(e[j].z), fabsf(e[j].w))));
    }
    const float amax = quant::block_max(m);
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    const float inv = 1.0f / s;
    if (threadIdx.x == 0) scale[r] = s;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = threadIdx.x + j * quant::kThreads;
        if (i < n4) o[i] = make_char4(to_int8(e[j].x, inv), to_int8(e[j].y, inv), to_int8(e[j].z, inv),
                                      to_int8(e[j].w, inv));
    }
}

// Short rows: a warp per row, the same two passes.
__global__ void __launch_bounds__(quant::kThreads) quantize_int8_warps(const float* __restrict__ x,
                                                                     int8_t* __restrict__ q,
                                                                     float* __restrict__ scale, int rows,
                                                                     int cols, bool vec) {
    const int r = (blockIdx.x * quant::kThreads + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float* row = x + (size_t)r * cols;
    int8_t* out = q + (size_t)r * cols;
    const float amax = quant::row_amax_warp<float, float4, 4>(row, cols, vec, lane);
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    const float inv = 1.0f / s;
    if (lane == 0) scale[r] = s;
    if (vec) {
        const float4* v = reinterpret_cast<const float4*>(row);
        char4* o = reinterpret_cast<char4*>(out);
        for (int i = lane; i < cols / 4; i += 32) {
            const float4 e = v[i];
            o[i] = make_char4(to_int8(e.x, inv), to_int8(e.y, inv), to_int8(e.z, inv), to_int8(e.w, inv));
        }
    } else {
        for (int c = lane; c < cols; c += 32) out[c] = to_int8(row[c], inv);
    }
}

extern "C" void quantize_int8(const float* x, int8_t* q, float* scale, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec = cols % 4 == 0 && reinterpret_cast<size_t>(x) % 16 == 0 && reinterpret_cast<size_t>(q) % 4 == 0;
    if (cols <= quant::kWarpRowMax) {
        const int per_block = quant::kThreads / 32;
        quantize_int8_warps<<<(rows + per_block - 1) / per_block, quant::kThreads>>>(x, q, scale, rows, cols, vec);
    } else if (vec && cols <= quant::kThreads * 4 * 4) {
        quantize_int8_held<4><<<rows, quant::kThreads>>>(x, q, scale, cols);
    } else if (vec && cols <= quant::kThreads * 4 * 8) {
        quantize_int8_held<8><<<rows, quant::kThreads>>>(x, q, scale, cols);
    } else {
        quantize_int8_rows<<<rows, quant::kThreads>>>(x, q, scale, cols, vec);
    }
}
