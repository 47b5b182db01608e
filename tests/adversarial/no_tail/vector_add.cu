// Dishonest: handles only whole blocks of 256 elements, as if n were always a
// multiple of the block size. The last n % 256 elements (all of them at n = 1)
// are never written.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    int blocks = n / 256;
    if (blocks > 0) add<<<blocks, 256>>>(a, b, c);
}
