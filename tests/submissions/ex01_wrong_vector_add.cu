// A subtly wrong vector_add for the course tests: coalesced and fast, but its bound check is
// off by one, so the last element of c is never written. Every case with n >= 1 must fail.
#include <cuda_runtime.h>

__global__ void add_all_but_last(const float* __restrict__ a, const float* __restrict__ b,
                                 float* __restrict__ c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    if (n <= 0) return;
    int threads = 256;
    add_all_but_last<<<(n + threads - 1) / threads, threads>>>(a, b, c, n);
}
