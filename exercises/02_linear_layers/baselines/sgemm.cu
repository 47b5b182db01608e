// Naive SGEMM: the baseline your kernel is timed against.
//
// One thread per element of C, which reads its row of A and its column of B straight from
// global memory: 2 K loads for K multiply-adds. Consecutive threads of a warp take consecutive
// columns n, so a warp's load of B[k][n..n+31] is one 128-byte line (coalesced) and its load of
// A[m][k] is the same address for every thread (a broadcast). Nothing is reused on purpose:
// whatever reuse happens is the L1 and L2 caches' doing.

namespace {

__global__ void sgemm_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)m * K + k] * B[(size_t)k * N + n];
    C[(size_t)m * N + n] = acc;
}

}  // namespace

extern "C" void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    const dim3 block(32, 8);
    const dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    sgemm_naive<<<grid, block>>>(A, B, C, M, N, K);
}
