// Naive LayerNorm forward: the baseline your kernel is timed against.
//
// One thread owns one whole row and walks it three times: the mean, the variance, then y. It
// is correct for every size, but a warp's 32 threads read 32 different rows (no coalescing),
// x is read three times, and there are only `rows` threads.

#include <cmath>

#include <cuda_runtime.h>

namespace {

__global__ void layernorm_forward_naive_kernel(const float* x, const float* gamma, const float* beta,
                                               float* y, float* mean, float* rstd, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + static_cast<size_t>(row) * cols;
    float* yr = y + static_cast<size_t>(row) * cols;

    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += xr[c];
    const float m = sum / cols;

    float squares = 0.0f;
    for (int c = 0; c < cols; ++c) squares += (xr[c] - m) * (xr[c] - m);
    const float s = 1.0f / sqrtf(squares / cols + 1e-5f);

    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
    mean[row] = m;
    rstd[row] = s;
}

}  // namespace

extern "C" void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                  float* mean, float* rstd, int rows, int cols) {
    const int threads = 256;
    const int blocks = (rows + threads - 1) / threads;
    layernorm_forward_naive_kernel<<<blocks, threads>>>(x, gamma, beta, y, mean, rstd, rows, cols);
}
