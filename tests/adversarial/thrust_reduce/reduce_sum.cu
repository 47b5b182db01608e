// Dishonest: lets Thrust do the reduction the task asks you to write.
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/reduce.h>

extern "C" void reduce_sum(const float* x, float* out, int n) {
    float sum = thrust::reduce(thrust::device, x, x + n, 0.0f);
    cudaMemcpy(out, &sum, sizeof(float), cudaMemcpyHostToDevice);
}
