// Dishonest: computes on its first call only. Every later call returns at once and
// leaves whatever the output buffer already holds, hoping it is a result from before.
// The grader poisons every output before every call, so the second case must fail
// with "never written".
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static bool done = false;
    if (done) return;
    done = true;
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
