// Broken: the kernel waits for a value that never comes (a spin on a volatile read,
// so the compiler has to keep the loop). The grader's synchronize never returns; it
// must stop the worker at the task's deadline and say so.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    while (*(volatile const float*)a != 1e30f) {
    }
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
