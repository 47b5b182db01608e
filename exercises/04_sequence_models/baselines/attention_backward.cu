// Naive attention backward: the baseline your kernel is timed against.
//
// It does what the formulas say, one step at a time, through global memory:
//   1. P = softmax(q k^T / sqrt(dim)), masked when causal: a bh x seq x seq matrix in a
//      workspace (the scores, then a softmax along each row in place);
//   2. dV = P^T dO;
//   3. delta[i] = rowsum(dO * o), then dS = P * (dO v^T - delta): a second seq x seq matrix;
//   4. dq = dS k / sqrt(dim) and dk = dS^T q / sqrt(dim).
// Every kernel gives one thread one output element and loops over the inputs it needs. P and
// dS are 4 * bh * seq^2 bytes each (384 MiB at GPT-2 small's benchmark size) and cross the
// memory bus about ten times; a fused kernel recomputes them tile by tile instead.

#include <cmath>
#include <cstdio>

#include <cuda_runtime.h>

namespace {

constexpr int kTile = 16;

__global__ void scores_kernel(const float* q, const float* k, float* scores, int seq, int dim,
                              int causal, float scale) {
    const int key = blockIdx.x * kTile + threadIdx.x;
    const int query = blockIdx.y * kTile + threadIdx.y;
    const size_t head = blockIdx.z;
    if (query >= seq || key >= seq) return;

    float score = -INFINITY;
    if (!causal || key <= query) {
        const float* qi = q + (head * seq + query) * dim;
        const float* kj = k + (head * seq + key) * dim;
        float dot = 0.0f;
        for (int d = 0; d < dim; ++d) dot += qi[d] * kj[d];
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

// dv[key][d] = sum over the queries i of P[i][key] * dO[i][d] (P is 0 where masked).
__global__ void dv_kernel(const float* probs, const float* dO, float* dv, int seq, int dim) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    const int key = blockIdx.y * blockDim.y + threadIdx.y;
    const size_t head = blockIdx.z;
    if (key >= seq || d >= dim) return;
    const float* p = probs + head * seq * seq;
    const float* g = dO + head * seq * dim;
    float acc = 0.0f;
    for (int i = 0; i < seq; ++i) acc += p[static_cast<size_t>(i) * seq + key] * g[static_cast<size_t>(i) * dim + d];
    dv[(head * seq + key) * dim + d] = acc;
}

// delta[row] = dO[row] . o[row], one thread per query row.
__global__ void delta_kernel(const float* dO, const float* o, float* delta, size_t rows, int dim) {
    const size_t row = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float acc = 0.0f;
    for (int d = 0; d < dim; ++d) acc += dO[row * dim + d] * o[row * dim + d];
    delta[row] = acc;
}

// ds[i][key] = P[i][key] * (dO[i] . v[key] - delta[i]).
__global__ void ds_kernel(const float* probs, const float* dO, const float* v, const float* delta,
                          float* ds, int seq, int dim) {
    const int key = blockIdx.x * kTile + threadIdx.x;
    const int query = blockIdx.y * kTile + threadIdx.y;
    const size_t head = blockIdx.z;
    if (query >= seq || key >= seq) return;
    const float* gi = dO + (head * seq + query) * dim;
    const float* vj = v + (head * seq + key) * dim;
    float dot = 0.0f;
    for (int d = 0; d < dim; ++d) dot += gi[d] * vj[d];
    const size_t at = (head * seq + query) * seq + key;
    ds[at] = probs[at] * (dot - delta[head * seq + query]);
}

// dq[i][d] = scale * sum over the keys j of dS[i][j] * k[j][d].
__global__ void dq_kernel(const float* ds, const float* k, float* dq, int seq, int dim, float scale) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    const int query = blockIdx.y * blockDim.y + threadIdx.y;
    const size_t head = blockIdx.z;
    if (query >= seq || d >= dim) return;
    const float* s = ds + (head * seq + query) * seq;
    const float* kh = k + head * seq * dim;
    float acc = 0.0f;
    for (int j = 0; j < seq; ++j) acc += s[j] * kh[static_cast<size_t>(j) * dim + d];
    dq[(head * seq + query) * dim + d] = acc * scale;
}

// dk[j][d] = scale * sum over the queries i of dS[i][j] * q[i][d].
__global__ void dk_kernel(const float* ds, const float* q, float* dk, int seq, int dim, float scale) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    const int key = blockIdx.y * blockDim.y + threadIdx.y;
    const size_t head = blockIdx.z;
    if (key >= seq || d >= dim) return;
    const float* s = ds + head * seq * seq;
    const float* qh = q + head * seq * dim;
    float acc = 0.0f;
    for (int i = 0; i < seq; ++i) acc += s[static_cast<size_t>(i) * seq + key] * qh[static_cast<size_t>(i) * dim + d];
    dk[(head * seq + key) * dim + d] = acc * scale;
}

}  // namespace

extern "C" void attention_backward(const float* q, const float* k, const float* v, const float* o,
                                   const float* dO, float* dq, float* dk, float* dv, int bh, int seq,
                                   int dim, int causal) {
    const size_t rows = static_cast<size_t>(bh) * seq;
    const size_t square = rows * seq * sizeof(float);
    float *probs = nullptr, *ds = nullptr, *delta = nullptr;
    if (cudaMalloc(&probs, square) != cudaSuccess || cudaMalloc(&ds, square) != cudaSuccess ||
        cudaMalloc(&delta, rows * sizeof(float)) != cudaSuccess) {
        std::fprintf(stderr, "attention_backward baseline: cannot allocate two %zu-byte matrices\n", square);
        cudaFree(probs);
        cudaFree(ds);
        return;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));

    const dim3 square_block(kTile, kTile);
    const dim3 square_grid((seq + kTile - 1) / kTile, (seq + kTile - 1) / kTile, bh);
    scores_kernel<<<square_grid, square_block>>>(q, k, probs, seq, dim, causal, scale);
    const unsigned row_blocks = static_cast<unsigned>((rows + 255) / 256);
    row_softmax_kernel<<<row_blocks, 256>>>(probs, rows, seq);

    const dim3 line_block(64, 4);
    const dim3 line_grid((dim + 63) / 64, (seq + 3) / 4, bh);
    dv_kernel<<<line_grid, line_block>>>(probs, dO, dv, seq, dim);
    delta_kernel<<<row_blocks, 256>>>(dO, o, delta, rows, dim);
    ds_kernel<<<square_grid, square_block>>>(probs, dO, v, delta, ds, seq, dim);
    dq_kernel<<<line_grid, line_block>>>(ds, k, dq, seq, dim, scale);
    dk_kernel<<<line_grid, line_block>>>(ds, q, dk, seq, dim, scale);

    cudaFree(probs);  // waits for the kernels above before releasing the workspaces
    cudaFree(ds);
    cudaFree(delta);
}
