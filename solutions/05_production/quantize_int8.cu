// Per-row INT8 quantization at the copy bandwidth: 16-byte loads of x (four floats), 4-byte stores
// of q. The kernels, shared with quantize_fp8, are in quantize_rows.cuh: a warp per short row, the
// row held in registers up to 8192 elements, two passes beyond. DRAM sees x once and q once: 5
// bytes an element.
#include <cstdint>

#include "quantize_rows.cuh"

struct Int8Codec {
    using In = float;
    using Out = int8_t;
    using InVec = float4;
    using OutVec = char4;
    static constexpr int kVec = 4;
    static constexpr float kTop = 127.0f;

    __device__ static float to_float(float v) { return v; }
    __device__ static int8_t encode(float v, float inv) {
        return (int8_t)max(-127, min(127, __float2int_rn(v * inv)));     // round to nearest even
    }
    __device__ static char4 encode_vec(float4 e, float inv) {
        return make_char4(encode(e.x, inv), encode(e.y, inv), encode(e.z, inv), encode(e.w, inv));
    }
    __device__ static float vec_amax(float4 e) {
        return fmaxf(fmaxf(fabsf(e.x), fabsf(e.y)), fmaxf(fabsf(e.z), fabsf(e.w)));
    }
};

extern "C" void quantize_int8(const float* x, int8_t* q, float* scale, int rows, int cols) {
    quant::quantize<Int8Codec>(x, q, scale, rows, cols);
}
