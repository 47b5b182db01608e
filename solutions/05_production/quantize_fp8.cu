// Per-row FP8 (e4m3) quantization at the copy bandwidth: one block per row, eight bf16 per load
// (16 bytes), eight e4m3 per store, converted two at a time by the hardware (round to nearest
// even, saturating at 448).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "quantize_rows.cuh"

__device__ __forceinline__ __nv_fp8x2_storage_t to_e4m3x2(float a, float b) {
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

// Eight bf16 (16 bytes) to eight e4m3 (8 bytes), times inv.
__device__ __forceinline__ uint2 convert8(const uint4 chunk, float inv) {
    const __nv_bfloat162* e = reinterpret_cast<const __nv_bfloat162*>(&chunk);
    unsigned short p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(e[j]);
        p[j] = to_e4m3x2(f.x * inv, f.y * inv);
    }
    return make_uint2(p[0] | ((unsigned)p[1] << 16), p[2] | ((unsigned)p[3] << 16));
}

__global__ void __launch_bounds__(quant::kThreads) quantize_fp8_rows(const __nv_bfloat16* __restrict__ x,
                                                                   __nv_fp8_e4m3* __restrict__ q,
                                                                   float* __restrict__ scale, int cols,
                                                                   bool vec) {
    const int r = blockIdx.x;
    const __nv_bfloat16* row = x + (size_t)r * cols;
    __nv_fp8_e4m3* out = q + (size_t)r * cols;
    const float amax = quant::row_amax<__nv_bfloat16, uint4, 8>(row, cols, vec);
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    const float inv = 1.0f / s;
    if (threadIdx.x == 0) scale[r] = s;
    if (vec) {
        const uint4* v = reinterpret_cast<const uint4*>(row);
        uint2* o = reinterpret_cast<uint2*>(out);
        for (int i = threadIdx.x; i < cols / 8; i += quant::kThreads) o[i] = convert8(v[i], inv);
    } else {
        for (int c = threadIdx.x; c < cols; c += quant::kThreads)
            out[c].__x = __nv_cvt_float_to_fp8(__bfloat162float(row[c]) * inv, __NV_SATFINITE, __NV_E4M3);
    }
}

// Rows of up to kThreads * 8 * NV bf16 that are whole 16-byte chunks: one pass, the row held in
// registers (as quantize_int8_held).
template <int NV>
__global__ void __launch_bounds__(quant::kThreads) quantize_fp8_held(const __nv_bfloat16* __restrict__ x,
                                                                   __nv_fp8_e4m3* __restrict__ q,
                                                                   float* __restrict__ scale, int cols) {
    const int r = blockIdx.x;
    const uint4* v = reinterpret_cast<const uint4*>(x + (size_t)r * cols);
    uint2* o = reinterpret_cast<uint2*>(q + (size_t)r * cols);
    const int n8 = cols / 8;
    uint4 e[NV];
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = threadIdx.x + j * quant::kThreads;
        e[j] = i < n8 ? v[i] : make_uint4(0, 0, 0, 0);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&e[j]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 f = __bfloat1622float2(h[k]);
            m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
    }
    const float amax = quant::block_max(m);
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    const float inv = 1.0f / s;
    if (threadIdx.x == 0) scale[r] = s;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int i = threadIdx.x + j * quant::kThreads;
        if (i < n8) o[i] = convert8(e[j], inv);
    }
}

// Short rows: a warp per row, the same two passes.
__global__ void __launch_bounds__(quant::kThreads) quantize_fp8_warps(const __nv_bfloat16* __restrict__ x,
                                                                    __nv_fp8_e4m3* __restrict__ q,
                                                                    float* __restrict__ scale, int rows,
                                                                    int cols, bool vec) {
    const int r = (blockIdx.x * quant::kThreads + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (r >= rows) return;
    const __nv_bfloat16* row = x + (size_t)r * cols;
    __nv_fp8_e4m3* out = q + (size_t)r * cols;
    const float amax = quant::row_amax_warp<__nv_bfloat16, uint4, 8>(row, cols, vec, lane);
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    const float inv = 1.0f / s;
    if (lane == 0) scale[r] = s;
    if (vec) {
        const uint4* v = reinterpret_cast<const uint4*>(row);
        uint2* o = reinterpret_cast<uint2*>(out);
        for (int i = lane; i < cols / 8; i += 32) o[i] = convert8(v[i], inv);
    } else {
        for (int c = lane; c < cols; c += 32)
            out[c].__x = __nv_cvt_float_to_fp8(__bfloat162float(row[c]) * inv, __NV_SATFINITE, __NV_E4M3);
    }
}

extern "C" void quantize_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec = cols % 8 == 0 && reinterpret_cast<size_t>(x) % 16 == 0 && reinterpret_cast<size_t>(q) % 8 == 0;
    if (cols <= quant::kWarpRowMax) {
        const int per_block = quant::kThreads / 32;
        quantize_fp8_warps<<<(rows + per_block - 1) / per_block, quant::kThreads>>>(x, q, scale, rows, cols, vec);
    } else if (vec && cols <= quant::kThreads * 8 * 4) {
        quantize_fp8_held<4><<<rows, quant::kThreads>>>(x, q, scale, cols);
    } else {
        quantize_fp8_rows<<<rows, quant::kThreads>>>(x, q, scale, cols, vec);
    }
}
