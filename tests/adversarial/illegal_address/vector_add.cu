// Broken: the kernel writes into a scratch buffer that was never allocated, i.e.
// through a null device pointer. The GPU raises an illegal-address error, which
// leaves the whole CUDA context unusable: the grader must report it and grade the
// next task in a fresh process.
#include <cuda_runtime.h>

__global__ void add_via_scratch(const float* a, const float* b, float* c, float* scratch, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        scratch[i] = a[i];
        c[i] = scratch[i] + b[i];
    }
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static float* scratch = nullptr;   // the cudaMalloc for it was forgotten
    add_via_scratch<<<(n + 255) / 256, 256>>>(a, b, c, scratch, n);
}
