// Dishonest: sums only the first half of x. At n = 1 that half is empty, so the
// output is 0 where x[0] was expected.
#include <cuda_runtime.h>

__global__ void partial_sums(const float* x, float* out, int n) {
    __shared__ float s[256];
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}

extern "C" void reduce_sum(const float* x, float* out, int n) {
    cudaMemsetAsync(out, 0, sizeof(float));
    partial_sums<<<512, 256>>>(x, out, n / 2);
}
