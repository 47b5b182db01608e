// Dishonest (or at least in the grader's way): records CUDA events of its own around
// the launch. Event and profiler calls are the grader's business; rejected before it
// runs.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static cudaEvent_t start = nullptr, stop = nullptr;
    if (start == nullptr) {
        cudaEventCreate(&start);
        cudaEventCreate(&stop);
    }
    cudaEventRecord(start);
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
    cudaEventRecord(stop);
}
