// Naive softmax: the baseline your kernel is timed against.
//
// One thread owns one whole row and walks it three times: once for the maximum, once for the
// sum of exponentials, once to write the result. It is correct for every size, but a warp's
// 32 threads read 32 different rows (no coalescing), the input is read three times, and a
// large matrix only has `rows` threads of parallelism.

#include <cuda_runtime.h>

namespace {

__global__ void softmax_naive_kernel(const float* x, float* y, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + static_cast<size_t>(row) * cols;
    float* yr = y + static_cast<size_t>(row) * cols;

    float row_max = xr[0];
    for (int c = 1; c < cols; ++c) row_max = fmaxf(row_max, xr[c]);

    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += expf(xr[c] - row_max);

    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - row_max) / sum;
}

}  // namespace

extern "C" void softmax(const float* x, float* y, int rows, int cols) {
    const int threads = 256;
    const int blocks = (rows + threads - 1) / threads;
    softmax_naive_kernel<<<blocks, threads>>>(x, y, rows, cols);
}
