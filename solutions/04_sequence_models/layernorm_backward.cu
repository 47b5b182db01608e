// Reference solution: LayerNorm backward at close to the bandwidth of one read of x and dy and
// one write of dx, with deterministic column sums.
//
// dx is a row operation and is done as the forward pass: a group of threads holds a row of x
// and dy in registers, reduces sum(g) and sum(g * x_hat) with shuffles, and writes dx.
//   cols <= 1024          a warp per row; persistent warps (up to two blocks of 8 warps an SM).
//   1024 < cols <= 8192   a block of 512 threads per row, up to 16 values a thread.
//   larger                a block per row that streams it twice.
// dgamma and dbeta are column sums over all rows, the other direction. Each thread keeps
// running sums for the columns it owns while its group works through its rows: registers, no
// memory traffic. At the end a block adds its warps' sums in shared memory (warp after warp,
// a fixed order) and writes one partial row of 2 * cols sums; a second kernel adds the
// partial rows, also in a fixed order, and writes dgamma and dbeta. Float atomics would need
// the outputs zeroed first (they hold NaN) and give sums whose last bits vary from run to run.
// The partial rows (a few hundred rows of 2 * cols floats) live in memory allocated on the
// first call and kept, like a library's workspace.

#include "rows.cuh"

namespace {

constexpr int kWarpBlock = 256;
constexpr int kWarpsPerBlock = kWarpBlock / rows::kWarp;
constexpr int kMaxWarpCols = 1024;
constexpr int kBlockRowThreads = 512;
constexpr int kStreamThreads = 1024;

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

// The partial sums' workspace, grown when a call needs more (cudaFree waits for the GPU).
float* workspace(size_t floats) {
    static float* buffer = nullptr;
    static size_t capacity = 0;
    if (floats > capacity) {
        cudaFree(buffer);
        buffer = nullptr;
        if (cudaMalloc(&buffer, floats * sizeof(float)) != cudaSuccess) {
            capacity = 0;
            return nullptr;
        }
        capacity = floats;
    }
    return buffer;
}

// One row of a group: x_hat and g = dy * gamma replace x and dy in the registers, the column
// sums grow, and the two row sums come back.
template <int TPR, int N, int VEC>
__device__ __forceinline__ void row_terms(float (&xv)[N], float (&dyv)[N], float (&acc_g)[N], float (&acc_b)[N],
                                          const float* __restrict__ gamma, float m, float s, int t, int cols,
                                          float& sum_g, float& sum_g_xhat) {
    sum_g = 0.0f;
    sum_g_xhat = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const int c = rows::col<TPR, VEC>(j, t);
        const float gam = c < cols ? __ldg(gamma + c) : 0.0f;   // past the end dy is 0 too
        const float x_hat = (xv[j] - m) * s;
        const float g = dyv[j] * gam;
        sum_g += g;
        sum_g_xhat = fmaf(g, x_hat, sum_g_xhat);
        acc_g[j] = fmaf(dyv[j], x_hat, acc_g[j]);
        acc_b[j] += dyv[j];
        xv[j] = x_hat;
        dyv[j] = g;
    }
}

template <int TPR, int N, int VEC>
__device__ __forceinline__ void one_row(const float* __restrict__ x, const float* __restrict__ gamma,
                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                        const float* __restrict__ dy, float* __restrict__ dx, float (&acc_g)[N],
                                        float (&acc_b)[N], int r, int t, int cols) {
    const size_t base = static_cast<size_t>(r) * cols;
    float xv[N], dyv[N];
    rows::load<TPR, N, VEC>(xv, x + base, t, cols, 0.0f);
    rows::load<TPR, N, VEC>(dyv, dy + base, t, cols, 0.0f);
    const float m = __ldg(mean + r), s = __ldg(rstd + r);
    float sum_g, sum_g_xhat;
    row_terms<TPR, N, VEC>(xv, dyv, acc_g, acc_b, gamma, m, s, t, cols, sum_g, sum_g_xhat);
    const float mean_g = rows::group_sum<TPR>(sum_g) / cols;
    const float mean_g_xhat = rows::group_sum<TPR>(sum_g_xhat) / cols;
#pragma unroll
    for (int j = 0; j < N; ++j) xv[j] = s * fmaf(-xv[j], mean_g_xhat, dyv[j] - mean_g);
    rows::store<TPR, N, VEC>(xv, dx + base, t, cols);
}

// A warp per row. partial[blockIdx.x] gets the block's column sums: dgamma's, then dbeta's.
template <int N, int VEC>
__global__ void __launch_bounds__(kWarpBlock, N > 24 || (N == 24 && VEC == 1) ? 1 : 2)
    layernorm_backward_warp_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                   const float* __restrict__ dy, float* __restrict__ dx,
                                   float* __restrict__ partial, int n_rows, int cols) {
    __shared__ float sums[2 * kMaxWarpCols];
    const int lane = threadIdx.x % rows::kWarp;
    const int warp_here = threadIdx.x / rows::kWarp;
    const int warps = gridDim.x * kWarpsPerBlock;
    float acc_g[N], acc_b[N];
#pragma unroll
    for (int j = 0; j < N; ++j) acc_g[j] = acc_b[j] = 0.0f;
    for (int r = blockIdx.x * kWarpsPerBlock + warp_here; r < n_rows; r += warps) {   // uniform per warp
        one_row<rows::kWarp, N, VEC>(x, gamma, mean, rstd, dy, dx, acc_g, acc_b, r, lane, cols);
    }
    // The block's sums: warp 0's, plus warp 1's, ... in that order.
    for (int w = 0; w < kWarpsPerBlock; ++w) {
        if (warp_here == w) {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const int c = rows::col<rows::kWarp, VEC>(j, lane);
                if (c < cols) {
                    sums[c] = w == 0 ? acc_g[j] : sums[c] + acc_g[j];
                    sums[cols + c] = w == 0 ? acc_b[j] : sums[cols + c] + acc_b[j];
                }
            }
        }
        __syncthreads();
    }
    float* out = partial + static_cast<size_t>(blockIdx.x) * 2 * cols;
    for (int i = threadIdx.x; i < 2 * cols; i += kWarpBlock) out[i] = sums[i];
}

// A block per row: each thread owns its columns outright, so its sums go straight out.
template <int N, int VEC>
__global__ void __launch_bounds__(kBlockRowThreads)
    layernorm_backward_block_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ mean, const float* __restrict__ rstd,
                                    const float* __restrict__ dy, float* __restrict__ dx,
                                    float* __restrict__ partial, int n_rows, int cols) {
    const int t = threadIdx.x;
    float acc_g[N], acc_b[N];
#pragma unroll
    for (int j = 0; j < N; ++j) acc_g[j] = acc_b[j] = 0.0f;
    for (int r = blockIdx.x; r < n_rows; r += gridDim.x) {   // uniform per block
        one_row<kBlockRowThreads, N, VEC>(x, gamma, mean, rstd, dy, dx, acc_g, acc_b, r, t, cols);
    }
    float* out = partial + static_cast<size_t>(blockIdx.x) * 2 * cols;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const int c = rows::col<kBlockRowThreads, VEC>(j, t);
        if (c < cols) {
            out[c] = acc_g[j];
            out[cols + c] = acc_b[j];
        }
    }
}

// Rows longer than a block's registers: two passes over each row (the second mostly from L2);
// the block's column sums accumulate in its own partial row in global memory.
__global__ void __launch_bounds__(kStreamThreads)
    layernorm_backward_stream_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                     const float* __restrict__ mean, const float* __restrict__ rstd,
                                     const float* __restrict__ dy, float* __restrict__ dx,
                                     float* __restrict__ partial, int n_rows, int cols) {
    float* out = partial + static_cast<size_t>(blockIdx.x) * 2 * cols;
    for (int c = threadIdx.x; c < 2 * cols; c += kStreamThreads) out[c] = 0.0f;
    for (int r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const size_t base = static_cast<size_t>(r) * cols;
        const float m = __ldg(mean + r), s = __ldg(rstd + r);
        float sum_g = 0.0f, sum_g_xhat = 0.0f;
        for (int c = threadIdx.x; c < cols; c += kStreamThreads) {
            const float g = __ldg(dy + base + c) * __ldg(gamma + c);
            sum_g += g;
            sum_g_xhat = fmaf(g, (__ldg(x + base + c) - m) * s, sum_g_xhat);
        }
        const float mean_g = rows::group_sum<kStreamThreads>(sum_g) / cols;
        const float mean_g_xhat = rows::group_sum<kStreamThreads>(sum_g_xhat) / cols;
        for (int c = threadIdx.x; c < cols; c += kStreamThreads) {   // each thread its own columns
            const float d = __ldg(dy + base + c);
            const float x_hat = (__ldg(x + base + c) - m) * s;
            dx[base + c] = s * fmaf(-x_hat, mean_g_xhat, d * __ldg(gamma + c) - mean_g);
            out[c] = fmaf(d, x_hat, out[c]);
            out[cols + c] += d;
        }
    }
}

// dgamma[c] and dbeta[c] = the sums of column c (and cols + c) of the partial rows, in order.
constexpr int kFinalCols = 32;
constexpr int kFinalSlices = 8;

__global__ void __launch_bounds__(kFinalCols * kFinalSlices)
    column_sums_kernel(const float* __restrict__ partial, int n_partial, int cols, float* __restrict__ dgamma,
                       float* __restrict__ dbeta) {
    __shared__ float slice_sums[kFinalSlices][kFinalCols + 1];
    const int tx = threadIdx.x % kFinalCols, ty = threadIdx.x / kFinalCols;
    const int c = blockIdx.x * kFinalCols + tx;
    const int width = 2 * cols;
    float sum = 0.0f;
    if (c < width) {
        for (int p = ty; p < n_partial; p += kFinalSlices) sum += partial[static_cast<size_t>(p) * width + c];
    }
    slice_sums[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && c < width) {
        float total = 0.0f;
#pragma unroll
        for (int i = 0; i < kFinalSlices; ++i) total += slice_sums[i][tx];
        if (c < cols) {
            dgamma[c] = total;
        } else {
            dbeta[c - cols] = total;
        }
    }
}

template <typename Kernel>
int grid_for(Kernel kernel, int threads, int wanted) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
    const int most = (per_sm > 0 ? per_sm : 1) * multiprocessors();
    return wanted < most ? wanted : most;
}

struct Args {
    const float *x, *gamma, *mean, *rstd, *dy;
    float *dx, *dgamma, *dbeta;
    int n_rows, cols;
};

void finish(const Args& a, const float* partial, int blocks) {
    const int width = 2 * a.cols;
    column_sums_kernel<<<(width + kFinalCols - 1) / kFinalCols, kFinalCols * kFinalSlices>>>(
        partial, blocks, a.cols, a.dgamma, a.dbeta);
}

template <int N, int VEC>
void warp_rows(const Args& a) {
    static int blocks_most = 0;   // per instantiation: its occupancy
    if (blocks_most == 0) blocks_most = grid_for(layernorm_backward_warp_kernel<N, VEC>, kWarpBlock, 1 << 30);
    const int wanted = (a.n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    const int blocks = wanted < blocks_most ? wanted : blocks_most;
    float* partial = workspace(static_cast<size_t>(blocks) * 2 * a.cols);
    if (partial == nullptr) return;
    layernorm_backward_warp_kernel<N, VEC><<<blocks, kWarpBlock>>>(a.x, a.gamma, a.mean, a.rstd, a.dy, a.dx,
                                                                   partial, a.n_rows, a.cols);
    finish(a, partial, blocks);
}

template <int N>
void warp_rows(const Args& a, bool vec4) {
    if constexpr (N % 4 == 0) {
        if (vec4) return warp_rows<N, 4>(a);
    }
    warp_rows<N, 1>(a);
}

template <int N>
void block_rows(const Args& a, bool vec4) {
    const int most = multiprocessors() * (2048 / kBlockRowThreads);
    const int blocks = a.n_rows < most ? a.n_rows : most;
    float* partial = workspace(static_cast<size_t>(blocks) * 2 * a.cols);
    if (partial == nullptr) return;
    if (vec4) {
        layernorm_backward_block_kernel<N, 4><<<blocks, kBlockRowThreads>>>(a.x, a.gamma, a.mean, a.rstd, a.dy,
                                                                            a.dx, partial, a.n_rows, a.cols);
    } else {
        layernorm_backward_block_kernel<N, 1><<<blocks, kBlockRowThreads>>>(a.x, a.gamma, a.mean, a.rstd, a.dy,
                                                                            a.dx, partial, a.n_rows, a.cols);
    }
    finish(a, partial, blocks);
}

void stream_rows(const Args& a) {
    const int most = multiprocessors() * 2;
    const int blocks = a.n_rows < most ? a.n_rows : most;
    float* partial = workspace(static_cast<size_t>(blocks) * 2 * a.cols);
    if (partial == nullptr) return;
    layernorm_backward_stream_kernel<<<blocks, kStreamThreads>>>(a.x, a.gamma, a.mean, a.rstd, a.dy, a.dx,
                                                                 partial, a.n_rows, a.cols);
    finish(a, partial, blocks);
}

}  // namespace

extern "C" void layernorm_backward(const float* x, const float* gamma, const float* mean,
                                   const float* rstd, const float* dy, float* dx, float* dgamma,
                                   float* dbeta, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const Args a{x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols};
    const bool vec4 = cols % 4 == 0 && rows::aligned16(x) && rows::aligned16(dy) && rows::aligned16(dx);
    if (cols <= 32) {
        warp_rows<1>(a, vec4);
    } else if (cols <= 64) {
        warp_rows<2>(a, vec4);
    } else if (cols <= 128) {
        warp_rows<4>(a, vec4);
    } else if (cols <= 256) {
        warp_rows<8>(a, vec4);
    } else if (cols <= 384) {
        warp_rows<12>(a, vec4);
    } else if (cols <= 512) {
        warp_rows<16>(a, vec4);
    } else if (cols <= 768) {
        warp_rows<24>(a, vec4);
    } else if (cols <= kMaxWarpCols) {
        warp_rows<32>(a, vec4);
    } else if (cols <= kBlockRowThreads * 8) {
        block_rows<8>(a, vec4);
    } else if (cols <= kBlockRowThreads * 16) {
        block_rows<16>(a, vec4);
    } else {
        stream_rows(a);
    }
}
