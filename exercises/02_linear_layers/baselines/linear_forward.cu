// Naive forward pass of nn.Linear + GELU: the baseline your kernel is timed against.
//
// Two kernels, as a framework without fusion runs them:
//   1. Z = X W^T, one thread per element of Z: the dot product of row m of X and row n of W,
//      both read from global memory. Consecutive threads take consecutive n, so a warp's load
//      W[n..n+31][k] touches 32 rows K floats apart: 32 separate 32-byte sectors for 128
//      useful bytes, which only the L1 cache saves from being 8 times slower still.
//   2. Z += b, Y = gelu(Z): a second pass that reads Z back and writes both.

#include <math.h>

namespace {

__global__ void matmul_nt_naive(const float* X, const float* W, float* Z, int M, int N, int K) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += X[(size_t)m * K + k] * W[(size_t)n * K + k];
    Z[(size_t)m * N + n] = acc;
}

__global__ void bias_gelu_naive(const float* b, float* Z, float* Y, int M, int N, int gelu) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N) return;
    const float z = Z[i] + b[i % N];
    Z[i] = z;
    Y[i] = gelu ? 0.5f * z * (1.0f + erff(z * 0.70710678118654752f)) : z;
}

}  // namespace

extern "C" void linear_forward(const float* X, const float* W, const float* b, float* Z, float* Y,
                               int M, int N, int K, int gelu) {
    const dim3 block(32, 8);
    const dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    matmul_nt_naive<<<grid, block>>>(X, W, Z, M, N, K);
    const size_t elements = (size_t)M * N;
    bias_gelu_naive<<<(unsigned)((elements + 255) / 256), 256>>>(b, Z, Y, M, N, gelu);
}
