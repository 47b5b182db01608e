// Naive cross-entropy: the baseline your kernel is timed against.
//
// One thread owns one whole row and walks it three times: the maximum, the sum of
// exponentials, then dlogits. Correct for every size (the maximum is subtracted), but a warp's
// 32 threads read 32 different rows, the logits are read three times, and a batch of 8192
// rows is only 8192 threads.

#include <cmath>

#include <cuda_runtime.h>

namespace {

__global__ void cross_entropy_naive_kernel(const float* logits, const int* targets, float* loss,
                                           float* dlogits, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* x = logits + static_cast<size_t>(row) * cols;
    float* d = dlogits + static_cast<size_t>(row) * cols;
    const int target = targets[row];

    float m = x[0];
    for (int c = 1; c < cols; ++c) m = fmaxf(m, x[c]);
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += expf(x[c] - m);

    loss[row] = (m - x[target]) + logf(sum);
    for (int c = 0; c < cols; ++c) {
        const float p = expf(x[c] - m) / sum;
        d[c] = (p - (c == target ? 1.0f : 0.0f)) / rows;
    }
}

}  // namespace

extern "C" void cross_entropy(const float* logits, const int* targets, float* loss,
                              float* dlogits, int rows, int cols) {
    const int threads = 256;
    const int blocks = (rows + threads - 1) / threads;
    cross_entropy_naive_kernel<<<blocks, threads>>>(logits, targets, loss, dlogits, rows, cols);
}
