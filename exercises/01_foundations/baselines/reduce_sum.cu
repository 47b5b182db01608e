// Naive baseline for reduce_sum: correct, and slow for one reason.
//
// Every thread adds its element straight into *out with atomicAdd. All 2^26
// atomics target the same address, so the memory system has to apply them one
// after another: the whole GPU waits on a single serial chain. Your kernel should
// add in registers and shared memory first and leave only a handful of partial
// sums to combine.
#include <cuda_runtime.h>

__global__ void reduce_sum_atomic(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

extern "C" void reduce_sum(const float* x, float* out, int n) {
    cudaMemsetAsync(out, 0, sizeof(float));
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    reduce_sum_atomic<<<blocks, threads>>>(x, out, n);
}
