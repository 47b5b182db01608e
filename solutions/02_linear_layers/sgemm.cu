// Reference solution: SGEMM, C = A B, on the fp32 cores.
//
// A register-blocked, double-buffered 128 x 128 x 8 tile kernel (gemm_fp32.cuh says how and
// why): A is read along k, B along n. When the grid's last wave would leave SMs idle, as for
// 8192 x 768 (384 tiles for 264 block slots), K is split and the shares are added with atomics.

#include "gemm_fp32.cuh"

extern "C" void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    gemm::Params p{};
    p.A = A;
    p.B = B;
    p.C = C;
    p.lda = K;
    p.ldb = N;
    p.ldc = N;
    p.M = M;
    p.N = N;
    p.K = K;
    const int splits = gemm::choose_splits(M, N, K);
    if (splits > 1) {
        cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), 0);
        gemm::launch<gemm::kAlongK, gemm::kAlongMN, gemm::kAtomic>(p, splits);
    } else {
        gemm::launch<gemm::kAlongK, gemm::kAlongMN, gemm::kStore>(p, 1);
    }
}
