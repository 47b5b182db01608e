// Dishonest: hands the launch to a host thread and returns at once, so the kernel
// starts after the timer has already been stopped. Rejected before it runs.
#include <cuda_runtime.h>
#include <thread>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    std::thread([=] { add<<<(n + 255) / 256, 256>>>(a, b, c, n); }).detach();
}
