// Naive bf16 attention: the baseline your kernel is timed against.
//
// It does exactly what the formula says, one step at a time, through global memory:
//   1. scores = q k^T / sqrt(dim), with -inf above the diagonal when causal
//      (a bh x seq x seq matrix, written to a workspace in global memory),
//   2. a softmax along each row of the scores, in place,
//   3. o = scores v.
// Every kernel gives one thread one output element and loops over the inputs it needs,
// converting bf16 to fp32 on load and doing all arithmetic in fp32 on the ordinary cores.
// The fp32 score matrix is 4 * bh * seq^2 bytes (8 GiB at the benchmark size). Tensor cores,
// which do bf16 products at over ten times the fp32 rate, are not used at all.

#include <cmath>
#include <cstdio>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kTile = 16;

__global__ void scores_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, float* scores,
                              int seq, int dim, int causal, float scale) {
    const int key = blockIdx.x * kTile + threadIdx.x;
    const int query = blockIdx.y * kTile + threadIdx.y;
    const size_t head = blockIdx.z;
    if (query >= seq || key >= seq) return;

    float score = -INFINITY;
    if (!causal || key <= query) {
        const __nv_bfloat16* qi = q + (head * seq + query) * dim;
        const __nv_bfloat16* kj = k + (head * seq + key) * dim;
        float dot = 0.0f;
        for (int d = 0; d < dim; ++d) dot += __bfloat162float(qi[d]) * __bfloat162float(kj[d]);
        score = dot * scale;
    }
    scores[(head * seq + query) * seq + key] = score;
}

// One thread per row of scores; masked entries are -inf and become exactly 0.
__global__ void row_softmax_kernel(float* scores, size_t rows, int seq) {
    const size_t row = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float* s = scores + row * seq;

    float row_max = s[0];  // key 0 is never masked
    for (int j = 1; j < seq; ++j) row_max = fmaxf(row_max, s[j]);
    float sum = 0.0f;
    for (int j = 0; j < seq; ++j) sum += expf(s[j] - row_max);
    for (int j = 0; j < seq; ++j) s[j] = expf(s[j] - row_max) / sum;
}

__global__ void weighted_sum_kernel(const float* probs, const __nv_bfloat16* v,
                                    __nv_bfloat16* o, int seq, int dim, int causal) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    const int query = blockIdx.y * blockDim.y + threadIdx.y;
    const size_t head = blockIdx.z;
    if (query >= seq || d >= dim) return;

    const float* p = probs + (head * seq + query) * seq;
    const __nv_bfloat16* vh = v + head * seq * dim;
    const int keys = causal ? query + 1 : seq;  // the rest have probability 0
    float acc = 0.0f;
    for (int j = 0; j < keys; ++j) {
        acc += p[j] * __bfloat162float(vh[static_cast<size_t>(j) * dim + d]);
    }
    o[(head * seq + query) * dim + d] = __float2bfloat16(acc);  // round to nearest
}

}  // namespace

extern "C" void attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* o, int bh, int seq,
                               int dim, int causal) {
    const size_t rows = static_cast<size_t>(bh) * seq;
    float* scores = nullptr;
    if (cudaMalloc(&scores, rows * seq * sizeof(float)) != cudaSuccess) {
        std::fprintf(stderr, "attention_bf16 baseline: cannot allocate the %zu-byte score "
                     "matrix\n", rows * seq * sizeof(float));
        return;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));

    const dim3 score_block(kTile, kTile);
    const dim3 score_grid((seq + kTile - 1) / kTile, (seq + kTile - 1) / kTile, bh);
    scores_kernel<<<score_grid, score_block>>>(q, k, scores, seq, dim, causal, scale);

    const int softmax_threads = 256;
    const auto softmax_blocks =
        static_cast<unsigned>((rows + softmax_threads - 1) / softmax_threads);
    row_softmax_kernel<<<softmax_blocks, softmax_threads>>>(scores, rows, seq);

    const dim3 sum_block(64, 4);
    const dim3 sum_grid((dim + 63) / 64, (seq + 3) / 4, bh);
    weighted_sum_kernel<<<sum_grid, sum_block>>>(scores, v, o, seq, dim, causal);

    cudaFree(scores);  // waits for the kernels above before releasing the workspace
}
