// Naive baseline: the step in three kernels, each a pass through global memory, with the
// decayed gradient in a temporary (what the step costs written as three tensor operations).
#include <cstdint>

__global__ void decayed_gradient(const float* p, const float* g, float* d, int64_t n, float weight_decay) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) d[i] = g[i] + weight_decay * p[i];
}

__global__ void momentum_update(float* buf, const float* d, int64_t n, float momentum) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) buf[i] = momentum * buf[i] + d[i];
}

__global__ void parameter_update(float* p, const float* buf, int64_t n, float lr) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] -= lr * buf[i];
}

extern "C" void sgd_momentum(float* p, const float* g, float* buf, int64_t n, float lr, float momentum,
                             float weight_decay) {
    float* d = nullptr;
    cudaMallocAsync(&d, n * sizeof(float), 0);
    const unsigned blocks = (unsigned)((n + 255) / 256);
    decayed_gradient<<<blocks, 256>>>(p, g, d, n, weight_decay);
    momentum_update<<<blocks, 256>>>(buf, d, n, momentum);
    parameter_update<<<blocks, 256>>>(p, buf, n, lr);
    cudaFreeAsync(d, 0);
}
