// Naive backward pass of nn.Linear + GELU: the baseline your kernel is timed against.
//
// Four kernels, each a pass through global memory, one thread per output element:
//   1. dZ = dY * gelu'(Z) into a temporary (dZ = dY without GELU);
//   2. dX = dZ W:    dX[m][k] = sum over n of dZ[m][n] W[n][k];
//   3. dW = dZ^T X:  dW[n][k] = sum over m of dZ[m][n] X[m][k];
//   4. db[n] = sum over m of dZ[m][n].
// In 2 and 3 consecutive threads take consecutive k: the loads of W and X are coalesced and the
// load of dZ is a broadcast. Each product loops over its reduction straight from global memory.

#include <math.h>

namespace {

// The temporary dZ lives in a buffer kept between calls, as PyTorch's caching allocator keeps the
// memory of its temporaries: the naive version pays for its passes, not for allocations.
float* scratch(size_t n) {
    static float* buffer = nullptr;
    static size_t capacity = 0;
    if (n > capacity) {
        cudaFree(buffer);
        cudaMalloc(&buffer, n * sizeof(float));
        capacity = n;
    }
    return buffer;
}

__global__ void gelu_backward_naive(const float* Z, const float* dY, float* dZ, size_t n, int gelu) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float z = Z[i];
    // gelu'(z) = Phi(z) + z phi(z)
    const float derivative = 0.5f * (1.0f + erff(z * 0.70710678118654752f)) +
                             z * 0.39894228040143268f * expf(-0.5f * z * z);
    dZ[i] = gelu ? dY[i] * derivative : dY[i];
}

__global__ void grad_input_naive(const float* dZ, const float* W, float* dX, int M, int N, int K) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || k >= K) return;
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) acc += dZ[(size_t)m * N + n] * W[(size_t)n * K + k];
    dX[(size_t)m * K + k] = acc;
}

__global__ void grad_weight_naive(const float* dZ, const float* X, float* dW, int M, int N, int K) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y * blockDim.y + threadIdx.y;
    if (n >= N || k >= K) return;
    float acc = 0.0f;
    for (int m = 0; m < M; ++m) acc += dZ[(size_t)m * N + n] * X[(size_t)m * K + k];
    dW[(size_t)n * K + k] = acc;
}

__global__ void grad_bias_naive(const float* dZ, float* db, int M, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float acc = 0.0f;
    for (int m = 0; m < M; ++m) acc += dZ[(size_t)m * N + n];
    db[n] = acc;
}

}  // namespace

extern "C" void linear_backward(const float* X, const float* W, const float* Z, const float* dY,
                                float* dX, float* dW, float* db, int M, int N, int K, int gelu) {
    const size_t elements = (size_t)M * N;
    float* dZ = scratch(elements);
    gelu_backward_naive<<<(unsigned)((elements + 255) / 256), 256>>>(Z, dY, dZ, elements, gelu);
    const dim3 block(32, 8);
    grad_input_naive<<<dim3((K + 31) / 32, (M + 7) / 8), block>>>(dZ, W, dX, M, N, K);
    grad_weight_naive<<<dim3((K + 31) / 32, (N + 7) / 8), block>>>(dZ, X, dW, M, N, K);
    grad_bias_naive<<<(N + 255) / 256, 256>>>(dZ, db, M, N);
}
