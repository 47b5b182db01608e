// Naive baseline for quantize_int8: correct, and slow for one reason. One thread per row walks
// its row twice (for the maximum, then to quantize), so the 32 lanes of a warp read 32 different
// rows: every load of the warp touches 32 cache lines for 32 useful floats, and 8192 rows are
// only 8192 threads for a GPU that wants hundreds of thousands in flight.
#include <cstdint>

__global__ void quantize_rows(const float* x, int8_t* q, float* scale, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (size_t)r * cols;
    float amax = 0.0f;
    for (int c = 0; c < cols; ++c) amax = fmaxf(amax, fabsf(row[c]));
    float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    scale[r] = s;
    for (int c = 0; c < cols; ++c) {
        int v = __float2int_rn(row[c] / s);
        q[(size_t)r * cols + c] = (int8_t)max(-127, min(127, v));
    }
}

extern "C" void quantize_int8(const float* x, int8_t* q, float* scale, int rows, int cols) {
    quantize_rows<<<(rows + 127) / 128, 128>>>(x, q, scale, rows, cols);
}
