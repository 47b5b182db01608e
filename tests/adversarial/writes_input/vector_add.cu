// Broken: casts the const away and uses a as scratch space. The result in c is right,
// but the caller's input is gone, which the task's contract (const inputs) forbids.
#include <cuda_runtime.h>

__global__ void add_in_place(float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        a[i] += b[i];
        c[i] = a[i];
    }
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add_in_place<<<(n + 255) / 256, 256>>>(const_cast<float*>(a), b, c, n);
}
