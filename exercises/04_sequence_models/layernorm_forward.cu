// Exercise 04, task 4: LayerNorm forward, row by row, saving what the backward pass needs.
//
//   mean[r] = sum_c x[r][c] / cols
//   rstd[r] = 1 / sqrt(sum_c (x[r][c] - mean[r])^2 / cols + 1e-5)      (the biased variance)
//   y[r][c] = (x[r][c] - mean[r]) * rstd[r] * gamma[c] + beta[c]
//
// Layout: x and y are rows x cols float32, row-major (element (r, c) at r * cols + c); gamma
// and beta hold cols values, mean and rstd rows values. Sizes range from one element to rows
// of 40,001 columns; one case has outlier columns and rows of zeros (variance 0: rstd is
// 1 / sqrt(1e-5) and y = beta). The benchmarks are a small GPT's activations (16384 x 384)
// and GPT-2 small's (8192 x 768).
//
// Contract: launch your kernels on the default stream and return; no host synchronisation
// is needed and no memory allocation should be. The grader checks y, mean and rstd against a
// float64 reference (rtol 1e-4, atol 1e-5; 1e-6 for mean), then times your function against a
// naive baseline (baselines/layernorm_forward.cu: one thread per row) and PyTorch's LayerNorm,
// and reports bandwidth: 8 FLOPs per 8 bytes, so memory is the only ceiling that matters.
//
// Hints:
//  1. As for softmax: a warp per row for short rows (768 floats are 24 per lane), a block
//     per row for long ones; coalesced loads; reductions by __shfl_xor_sync.
//  2. Read x once. Keep the row in registers between the statistics and the write of y.
//  3. With the row in registers, the variance costs no memory traffic: compute the mean
//     first, then sum (x - mean)^2. The one-pass formula E[x^2] - E[x]^2 loses every digit
//     when the mean is large against the spread.
//  4. gamma and beta are the same for every row: a warp that handles several rows can load
//     them once.

#include <cuda_runtime.h>

extern "C" void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                  float* mean, float* rstd, int rows, int cols) {
    // TODO: launch your kernel(s) here.
    (void)x;
    (void)gamma;
    (void)beta;
    (void)y;
    (void)mean;
    (void)rstd;
    (void)rows;
    (void)cols;
}
