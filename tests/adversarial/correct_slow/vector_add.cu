// Correct and slow: the whole vector goes through a single block of 1024 threads (a
// grid-stride loop), so one of the GPU's SMs does all the work while the others idle.
// It must pass every correctness case and fail only the speed bar.
#include <cuda_runtime.h>

__global__ void add_one_block(const float* a, const float* b, float* c, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add_one_block<<<1, 1024>>>(a, b, c, n);
}
