// Naive LayerNorm backward: the baseline your kernel is timed against.
//
// Two kernels, each one thread per output line:
//   1. one thread per row: the two row sums (of g and of g * x_hat), then that row of dx;
//   2. one thread per column: dgamma[c] and dbeta[c], summed over every row in order.
// Kernel 1 reads x and dy twice, uncoalesced; kernel 2 reads them a third time with only
// `cols` threads (768 at GPT-2's width: a few warps for the whole GPU), each walking all the
// rows one after the other.

#include <cuda_runtime.h>

namespace {

__global__ void dx_naive_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                const float* dy, float* dx, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const size_t base = static_cast<size_t>(row) * cols;
    const float m = mean[row], s = rstd[row];

    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    for (int c = 0; c < cols; ++c) {
        const float g = dy[base + c] * gamma[c];
        sum_g += g;
        sum_g_xhat += g * (x[base + c] - m) * s;
    }
    const float mean_g = sum_g / cols, mean_g_xhat = sum_g_xhat / cols;
    for (int c = 0; c < cols; ++c) {
        const float x_hat = (x[base + c] - m) * s;
        dx[base + c] = s * (dy[base + c] * gamma[c] - mean_g - x_hat * mean_g_xhat);
    }
}

__global__ void dgamma_dbeta_naive_kernel(const float* x, const float* mean, const float* rstd,
                                          const float* dy, float* dgamma, float* dbeta, int rows,
                                          int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float sum_dgamma = 0.0f, sum_dbeta = 0.0f;
    for (int r = 0; r < rows; ++r) {
        const size_t i = static_cast<size_t>(r) * cols + col;
        sum_dgamma += dy[i] * (x[i] - mean[r]) * rstd[r];
        sum_dbeta += dy[i];
    }
    dgamma[col] = sum_dgamma;  // written, not added to: dgamma holds this call's sum only
    dbeta[col] = sum_dbeta;
}

}  // namespace

extern "C" void layernorm_backward(const float* x, const float* gamma, const float* mean,
                                   const float* rstd, const float* dy, float* dx, float* dgamma,
                                   float* dbeta, int rows, int cols) {
    const int threads = 256;
    dx_naive_kernel<<<(rows + threads - 1) / threads, threads>>>(x, gamma, mean, rstd, dy, dx, rows, cols);
    dgamma_dbeta_naive_kernel<<<(cols + threads - 1) / threads, threads>>>(x, mean, rstd, dy, dgamma, dbeta,
                                                                           rows, cols);
}
