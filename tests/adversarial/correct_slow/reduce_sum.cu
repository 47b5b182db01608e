// Correct and slow: one block of 1024 threads reads all of x (coalesced, one float at a
// time), then halves the partial sums in shared memory until one is left. Exact enough
// (each thread adds n / 1024 numbers, the tree adds the rest pairwise), but a single
// SM cannot pull memory at more than a small fraction of the device's bandwidth.
#include <cuda_runtime.h>

constexpr int kThreads = 1024;

__global__ void reduce_one_block(const float* x, float* out, int n) {
    __shared__ float partial[kThreads];
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += kThreads) v += x[i];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = partial[0];
}

extern "C" void reduce_sum(const float* x, float* out, int n) {
    reduce_one_block<<<1, kThreads>>>(x, out, n);
}
