// Dishonest: correct everywhere except the last element, which holds a quiet NaN.
// A comparison with NaN is false, so a checker that looks for elements "farther than
// the tolerance" would let it through; the grader counts a NaN as wrong.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = i == n - 1 ? __int_as_float(0x7fc00000) : a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
