// Naive baseline for quantize_fp8: one thread per row, as quantize_int8's baseline, with the same
// problem (the lanes of a warp read 32 different rows).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

// e4m3's largest finite value, read from its bit pattern: 0.1111.110, the pattern just below the
// only NaN (section 3 of the notebook derives its value).
__device__ float e4m3_largest() {
    __nv_fp8_e4m3 v;
    v.__x = 0x7E;
    return float(v);
}

__global__ void quantize_rows(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* row = x + (size_t)r * cols;
    float amax = 0.0f;
    for (int c = 0; c < cols; ++c) amax = fmaxf(amax, fabsf(__bfloat162float(row[c])));
    float s = amax > 0.0f ? amax / e4m3_largest() : 1.0f;
    scale[r] = s;
    for (int c = 0; c < cols; ++c) {
        // The conversion saturates at the largest finite value and rounds to nearest even.
        q[(size_t)r * cols + c].__x = __nv_cvt_float_to_fp8(__bfloat162float(row[c]) / s, __NV_SATFINITE, __NV_E4M3);
    }
}

extern "C" void quantize_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    quantize_rows<<<(rows + 127) / 128, 128>>>(x, q, scale, rows, cols);
}
