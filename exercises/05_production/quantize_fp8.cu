// Per-row FP8 (e4m3) quantization, as FP8 inference and training recipes scale activations:
//
//     scale[r] = max_c |x[r][c]| / E4M3_MAX     (1 for a row of zeros)
//     q[r][c]  = e4m3(x[r][c] / scale[r]), rounded to nearest and saturating at +-E4M3_MAX
//
// E4M3_MAX is e4m3's largest finite value: section 3 of the notebook asks you to derive it (the
// prompt `fp8_formats`); answer it first and use your value here.
//
// x: rows x cols bf16 (__nv_bfloat16), row-major. q: rows x cols __nv_fp8_e4m3. scale: rows float32.
//
// What the grader checks: q exactly, except at a tie: where x / scale lies within 1e-6 of a
// half-way point between two e4m3 values, either neighbour is accepted, so ties to even (the
// reference and the hardware conversion) and ties away from zero both pass. scale to 1e-6; cases
// as quantize_int8's, including inputs of 1e-30 and 1e30.
//
// Hints: the structure of quantize_int8. The conversion is one instruction on Hopper:
// __nv_cvt_float2_to_fp8x2(float2, __NV_SATFINITE, __NV_E4M3) (cuda_fp8.h) converts two floats
// with rounding to nearest even and saturation; __nv_fp8x4_e4m3 takes a float4. Read x as pairs
// or eight at a time (a uint4 holds eight bf16) and write q four or more at a time.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

extern "C" void quantize_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    // Your kernel launch goes here.
}
