// Reference solution: the backward pass of nn.Linear + GELU.
//
//   1. One elementwise pass computes dZ = dY * gelu'(Z) into a buffer kept between calls and, on
//      the way, each block's partial column sums of dZ, which it adds into db with atomics.
//      (Without GELU, dZ is dY: the pass only sums.)
//   2. dX = dZ W: the GEMM core of gemm_fp32.cuh with dZ read along its rows (k = n) and W along
//      its rows (j = k): the layout of sgemm.
//   3. dW = dZ^T X: both operands read along the output's index, the reduction running down
//      the columns of dZ and X (over the M tokens). At the GPT-2 sizes dW has only 144 tiles of
//      128 x 128 for 132 SMs, so the sum over M is split (7 ways at M = 8192) and the shares
//      added into dW with float4 atomics.

#include "gemm_fp32.cuh"

namespace {

constexpr int kColsPerThread = 4;
constexpr int kPassX = 64;      // threads along the columns: 256 columns per block
constexpr int kPassY = 4;       // threads along the rows

// The buffer for dZ, kept between calls as PyTorch's caching allocator keeps its temporaries.
float* scratch(size_t n) {
    static float* buffer = nullptr;
    static size_t capacity = 0;
    if (n > capacity) {
        cudaFree(buffer);
        buffer = nullptr;
        capacity = 0;
        if (cudaMalloc(&buffer, n * sizeof(float)) == cudaSuccess) capacity = n;
    }
    return buffer;
}

__device__ __forceinline__ float gelu_derivative(float z) {
    // Phi(z) + z phi(z)
    return 0.5f * (1.0f + erff(z * 0.70710678118654752f)) + z * 0.39894228040143268f * expf(-0.5f * z * z);
}

// dZ for rows [r0, r0 + rows) of 256 columns, and their column sums added into db.
template <bool kVec>
__global__ void __launch_bounds__(kPassX * kPassY) grad_output_pass(
        const float* __restrict__ Z, const float* __restrict__ dY, float* __restrict__ dZ,
        float* __restrict__ db, int M, int N, int rows, int gelu) {
    const int col = (blockIdx.x * kPassX + threadIdx.x) * kColsPerThread;
    const int r0 = blockIdx.y * rows;
    const int r1 = min(M, r0 + rows);
    float sum[kColsPerThread] = {0.f, 0.f, 0.f, 0.f};
    if (col < N) {
        for (int r = r0 + threadIdx.y; r < r1; r += kPassY) {
            const size_t at = (size_t)r * N + col;
            if (kVec) {                                   // N % 4 == 0: col + 3 < N
                float4 g = __ldg(reinterpret_cast<const float4*>(dY + at));
                if (gelu) {
                    const float4 z = __ldg(reinterpret_cast<const float4*>(Z + at));
                    g.x *= gelu_derivative(z.x);
                    g.y *= gelu_derivative(z.y);
                    g.z *= gelu_derivative(z.z);
                    g.w *= gelu_derivative(z.w);
                    *reinterpret_cast<float4*>(dZ + at) = g;
                }
                sum[0] += g.x;
                sum[1] += g.y;
                sum[2] += g.z;
                sum[3] += g.w;
            } else {
#pragma unroll
                for (int j = 0; j < kColsPerThread; ++j) {
                    if (col + j < N) {
                        float g = __ldg(dY + at + j);
                        if (gelu) {
                            g *= gelu_derivative(__ldg(Z + at + j));
                            dZ[at + j] = g;
                        }
                        sum[j] += g;
                    }
                }
            }
        }
    }
    __shared__ float partial[kPassY][kPassX][kColsPerThread];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) partial[threadIdx.y][threadIdx.x][j] = sum[j];
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) {
            float s = partial[0][threadIdx.x][j];
#pragma unroll
            for (int y = 1; y < kPassY; ++y) s += partial[y][threadIdx.x][j];
            if (col + j < N) atomicAdd(db + col + j, s);
        }
    }
}

}  // namespace

extern "C" void linear_backward(const float* X, const float* W, const float* Z, const float* dY,
                                float* dX, float* dW, float* db, int M, int N, int K, int gelu) {
    // 1. dZ and db.
    const size_t elements = (size_t)M * N;
    float* dZ = gelu ? scratch(elements) : nullptr;
    if (gelu && dZ == nullptr) return;          // out of memory: nothing sensible to compute
    const float* grad = gelu ? dZ : dY;
    cudaMemsetAsync(db, 0, (size_t)N * sizeof(float), 0);
    const int blocks_x = (N + kPassX * kColsPerThread - 1) / (kPassX * kColsPerThread);
    // About 2048 blocks in all, each summing at least 16 rows: few atomics per element of db.
    const long long wanted = ((long long)M * blocks_x + 2047) / 2048;
    const int rows = (int)(wanted < 16 ? 16 : (wanted + 3) / 4 * 4);
    const dim3 pass_grid(blocks_x, (M + rows - 1) / rows);
    const dim3 pass_block(kPassX, kPassY);
    if (N % 4 == 0) {
        grad_output_pass<true><<<pass_grid, pass_block>>>(Z, dY, dZ, db, M, N, rows, gelu);
    } else {
        grad_output_pass<false><<<pass_grid, pass_block>>>(Z, dY, dZ, db, M, N, rows, gelu);
    }

    // 2. dX (M x K) = dZ (M x N) W (N x K).
    gemm::Params px{};
    px.A = grad;
    px.B = W;
    px.C = dX;
    px.lda = N;
    px.ldb = K;
    px.ldc = K;
    px.M = M;
    px.N = K;
    px.K = N;
    const int split_x = gemm::choose_splits(M, K, N);
    if (split_x > 1) {
        cudaMemsetAsync(dX, 0, (size_t)M * K * sizeof(float), 0);
        gemm::launch<gemm::kAlongK, gemm::kAlongMN, gemm::kAtomic>(px, split_x);
    } else {
        gemm::launch<gemm::kAlongK, gemm::kAlongMN, gemm::kStore>(px, 1);
    }

    // 3. dW (N x K) = dZ^T (N x M) X (M x K).
    gemm::Params pw{};
    pw.A = grad;
    pw.B = X;
    pw.C = dW;
    pw.lda = N;
    pw.ldb = K;
    pw.ldc = K;
    pw.M = N;
    pw.N = K;
    pw.K = M;
    const int split_w = gemm::choose_splits(N, K, M);
    if (split_w > 1) {
        cudaMemsetAsync(dW, 0, (size_t)N * K * sizeof(float), 0);
        gemm::launch<gemm::kAlongMN, gemm::kAlongMN, gemm::kAtomic>(pw, split_w);
    } else {
        gemm::launch<gemm::kAlongMN, gemm::kAlongMN, gemm::kStore>(pw, 1);
    }
}
