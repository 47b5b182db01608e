// A tree reduction in shared memory with the barrier after the first stores left out:
// thread t reads s[t + stride] before thread t + stride may have written it. racecheck
// reports the hazard between that write and that read.
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void block_sums(const float* x, float* out, int n) {
    __shared__ float s[kThreads];
    int i = blockIdx.x * kThreads + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;   // the write
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];   // the racing read
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}

extern "C" void reduce_sum(const float* x, float* out, int n) {
    cudaMemsetAsync(out, 0, sizeof(float));
    block_sums<<<(n + kThreads - 1) / kThreads, kThreads>>>(x, out, n);
}
