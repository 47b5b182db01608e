// Correct in every element it should write, but thread n also writes c[n]: one float past
// the end of the output, which memcheck reports with the kernel and the line.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) c[i] = i < n ? a[i] + b[i] : 0.0f;   // the write past the end
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add<<<n / 256 + 1, 256>>>(a, b, c, n);
}
