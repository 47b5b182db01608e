// Per-row FP8 (e4m3) quantization at the copy bandwidth: 16-byte loads of x (eight bf16), 8-byte
// stores of q, converted two at a time by the hardware (round to nearest even, saturating at 448).
// The kernels, shared with quantize_int8, are in quantize_rows.cuh.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "quantize_rows.cuh"

struct Fp8Codec {
    using In = __nv_bfloat16;
    using Out = __nv_fp8_e4m3;
    using InVec = uint4;
    using OutVec = uint2;
    static constexpr int kVec = 8;
    static constexpr float kTop = 448.0f;

    __device__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
    __device__ static __nv_fp8_e4m3 encode(float v, float inv) {
        __nv_fp8_e4m3 out;
        out.__x = __nv_cvt_float_to_fp8(v * inv, __NV_SATFINITE, __NV_E4M3);
        return out;
    }
    __device__ static uint2 encode_vec(uint4 chunk, float inv) {
        const __nv_bfloat162* e = reinterpret_cast<const __nv_bfloat162*>(&chunk);
        unsigned short p[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(e[j]);
            p[j] = __nv_cvt_float2_to_fp8x2(make_float2(f.x * inv, f.y * inv), __NV_SATFINITE, __NV_E4M3);
        }
        return make_uint2(p[0] | ((unsigned)p[1] << 16), p[2] | ((unsigned)p[3] << 16));
    }
    __device__ static float vec_amax(uint4 chunk) {
        const __nv_bfloat162* e = reinterpret_cast<const __nv_bfloat162*>(&chunk);
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(e[j]);
            m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
        return m;
    }
};

extern "C" void quantize_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    quant::quantize<Fp8Codec>(x, q, scale, rows, cols);
}
