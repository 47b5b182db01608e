// Naive baseline: the step in three kernels, each a pass through global memory, with the
// decayed gradient in a temporary (what the step costs written as three tensor operations).
#include <cstdint>

// The temporary lives in a buffer kept between calls, as PyTorch's caching allocator keeps the
// memory of its temporaries: the naive version pays for the passes, not for allocations.
static float* scratch(int64_t n) {
    static float* buffer = nullptr;
    static int64_t capacity = 0;
    if (n > capacity) {
        cudaFree(buffer);
        cudaMalloc(&buffer, n * sizeof(float));
        capacity = n;
    }
    return buffer;
}

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
    float* d = scratch(n);
    const unsigned blocks = (unsigned)((n + 255) / 256);
    decayed_gradient<<<blocks, 256>>>(p, g, d, n, weight_decay);
    momentum_update<<<blocks, 256>>>(buf, d, n, momentum);
    parameter_update<<<blocks, 256>>>(p, buf, n, lr);
}
