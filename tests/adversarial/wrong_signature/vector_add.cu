// Broken: takes double* where the grader passes float buffers. An extern "C" symbol
// carries no types, so without the static check this would read pairs of floats as
// doubles and run past the end of every buffer.
#include <cuda_runtime.h>

__global__ void add(const double* a, const double* b, double* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const double* a, const double* b, double* c, int n) {
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
