// Reference solution: LayerNorm forward that reads x once and writes y once.
//
// LayerNorm is memory-bound (8 FLOPs per 8 bytes): the goal is to move each element across the
// memory bus twice, with enough loads in flight to keep HBM busy. A row is held in registers
// by a group of threads between its statistics and the write of y:
//   cols <= 1024          a warp per row, up to 32 values per lane; the sums are shuffles.
//                         Warps are persistent (as many as fit on the GPU at once) and keep
//                         gamma and beta in registers for all the rows they visit.
//   1024 < cols <= 16384  a block of 512 or 1024 threads per row, up to 16 values a thread;
//                         gamma and beta come from L1/L2, where they stay (a few KB).
//   larger                one block per row streams it three times (mean, variance, y).
// With the row in registers the variance is computed exactly as defined, from x - mean (two
// reductions, no extra traffic): E[x^2] - E[x]^2 would cancel catastrophically when the mean
// is large against the spread. Loads are float4 where the row length and the pointers allow.

#include <cmath>

#include "rows.cuh"

namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarpBlock = 256;        // the warp-per-row kernel's blocks: 8 rows in flight each

int multiprocessors() {
    static int sms = 0;
    if (sms == 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        if (sms < 1) sms = 1;
    }
    return sms;
}

// Statistics of a row held by a group: every thread gets mean and rstd.
template <int TPR, int N, int VEC>
__device__ __forceinline__ void statistics(const float (&v)[N], int t, int cols, float& m, float& s) {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) sum += v[j];  // columns past the end were loaded as 0
    m = rows::group_sum<TPR>(sum) / cols;
    float squares = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const float d = v[j] - m;
        if (rows::col<TPR, VEC>(j, t) < cols) squares = fmaf(d, d, squares);
    }
    s = rsqrtf(rows::group_sum<TPR>(squares) / cols + kEps);
}

template <int N, int VEC>
__global__ void __launch_bounds__(kWarpBlock)
    layernorm_warp_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                          const float* __restrict__ beta, float* __restrict__ y, float* __restrict__ mean,
                          float* __restrict__ rstd, int n_rows, int cols) {
    const int lane = threadIdx.x % rows::kWarp;
    const int warp = (blockIdx.x * kWarpBlock + threadIdx.x) / rows::kWarp;
    const int warps = gridDim.x * (kWarpBlock / rows::kWarp);
    float g[N], b[N];
    rows::load<rows::kWarp, N, VEC>(g, gamma, lane, cols, 0.0f);
    rows::load<rows::kWarp, N, VEC>(b, beta, lane, cols, 0.0f);
    for (int r = warp; r < n_rows; r += warps) {   // uniform per warp: the shuffles see all lanes
        float v[N];
        rows::load<rows::kWarp, N, VEC>(v, x + static_cast<size_t>(r) * cols, lane, cols, 0.0f);
        float m, s;
        statistics<rows::kWarp, N, VEC>(v, lane, cols, m, s);
#pragma unroll
        for (int j = 0; j < N; ++j) v[j] = fmaf((v[j] - m) * s, g[j], b[j]);
        rows::store<rows::kWarp, N, VEC>(v, y + static_cast<size_t>(r) * cols, lane, cols);
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = s;
        }
    }
}

template <int TPR, int N, int VEC>
__global__ void __launch_bounds__(TPR)
    layernorm_block_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                           const float* __restrict__ beta, float* __restrict__ y, float* __restrict__ mean,
                           float* __restrict__ rstd, int n_rows, int cols) {
    const int t = threadIdx.x;
    for (int r = blockIdx.x; r < n_rows; r += gridDim.x) {   // uniform per block
        float v[N];
        rows::load<TPR, N, VEC>(v, x + static_cast<size_t>(r) * cols, t, cols, 0.0f);
        float m, s;
        statistics<TPR, N, VEC>(v, t, cols, m, s);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const int c = rows::col<TPR, VEC>(j, t);
            if (c < cols) v[j] = fmaf((v[j] - m) * s, __ldg(gamma + c), __ldg(beta + c));
        }
        rows::store<TPR, N, VEC>(v, y + static_cast<size_t>(r) * cols, t, cols);
        if (t == 0) {
            mean[r] = m;
            rstd[r] = s;
        }
    }
}

// Rows longer than a block's registers: three passes, the later two mostly from L2.
constexpr int kStreamThreads = 1024;

__global__ void __launch_bounds__(kStreamThreads)
    layernorm_stream_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                            const float* __restrict__ beta, float* __restrict__ y, float* __restrict__ mean,
                            float* __restrict__ rstd, int cols) {
    const size_t r = blockIdx.x;
    const float* xr = x + r * cols;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kStreamThreads) sum += __ldg(xr + c);
    const float m = rows::group_sum<kStreamThreads>(sum) / cols;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kStreamThreads) {
        const float d = __ldg(xr + c) - m;
        squares = fmaf(d, d, squares);
    }
    const float s = rsqrtf(rows::group_sum<kStreamThreads>(squares) / cols + kEps);
    for (int c = threadIdx.x; c < cols; c += kStreamThreads) {
        y[r * cols + c] = fmaf((__ldg(xr + c) - m) * s, __ldg(gamma + c), __ldg(beta + c));
    }
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = s;
    }
}

// Persistent warps: as many blocks as fit on the GPU at once, but no more than the rows need.
template <int N, int VEC>
void launch_warps(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                  int n_rows, int cols) {
    static int per_sm = 0;
    if (per_sm == 0) {
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, layernorm_warp_kernel<N, VEC>, kWarpBlock, 0);
        if (per_sm < 1) per_sm = 1;
    }
    const int wanted = (n_rows + kWarpBlock / rows::kWarp - 1) / (kWarpBlock / rows::kWarp);
    const int blocks = wanted < per_sm * multiprocessors() ? wanted : per_sm * multiprocessors();
    layernorm_warp_kernel<N, VEC><<<blocks, kWarpBlock>>>(x, gamma, beta, y, mean, rstd, n_rows, cols);
}

template <int N>
void warp_rows(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
               int n_rows, int cols, bool vec4) {
    if constexpr (N % 4 == 0) {
        if (vec4) return launch_warps<N, 4>(x, gamma, beta, y, mean, rstd, n_rows, cols);
    }
    launch_warps<N, 1>(x, gamma, beta, y, mean, rstd, n_rows, cols);
}

template <int TPR, int N>
void block_rows(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                int n_rows, int cols, bool vec4) {
    const int per_sm = 2048 / TPR;
    const int blocks = n_rows < per_sm * multiprocessors() ? n_rows : per_sm * multiprocessors();
    if (vec4) {
        layernorm_block_kernel<TPR, N, 4><<<blocks, TPR>>>(x, gamma, beta, y, mean, rstd, n_rows, cols);
    } else {
        layernorm_block_kernel<TPR, N, 1><<<blocks, TPR>>>(x, gamma, beta, y, mean, rstd, n_rows, cols);
    }
}

}  // namespace

extern "C" void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                  float* mean, float* rstd, int rows, int cols) {
    const int n_rows = rows;
    if (n_rows <= 0 || cols <= 0) return;
    const bool vec4 = cols % 4 == 0 && rows::aligned16(x) && rows::aligned16(y) && rows::aligned16(gamma) &&
                      rows::aligned16(beta);
    if (cols <= 32) {
        warp_rows<1>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 64) {
        warp_rows<2>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 128) {
        warp_rows<4>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 256) {
        warp_rows<8>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 384) {
        warp_rows<12>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 512) {
        warp_rows<16>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 768) {
        warp_rows<24>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 1024) {
        warp_rows<32>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 512 * 8) {
        block_rows<512, 8>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 512 * 16) {
        block_rows<512, 16>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else if (cols <= 1024 * 16) {
        block_rows<1024, 16>(x, gamma, beta, y, mean, rstd, n_rows, cols, vec4);
    } else {
        layernorm_stream_kernel<<<n_rows, kStreamThreads>>>(x, gamma, beta, y, mean, rstd, cols);
    }
}
