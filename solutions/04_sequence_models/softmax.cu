// Reference solution: row softmax that reads x once and writes y once.
//
// Softmax is memory-bound (5 FLOPs per 8 bytes), so the only goal is to move each element
// across the memory bus exactly twice, with enough loads in flight to saturate HBM.
//
// Strategy, by row length:
//   cols <= 1024          one warp per row, up to 32 elements per lane in registers;
//                         reductions are warp shuffles only (no shared memory, no barrier).
//   1024 < cols <= 32768  one block per row (128..1024 threads), 32 elements per thread in
//                         registers; one shared-memory round trip for the reduction.
//   cols > 32768          the row does not fit on chip: pass 1 streams it once computing an
//                         online (max, sum) pair, pass 2 streams it again to write y.
//                         12 bytes per element instead of 8, still one kernel launch.
//
// The one-pass paths never need a separate max pass: each thread reduces its own elements to
// a (max, sum of exp(x - max)) pair, and pairs merge exactly:
//   (m1, s1) + (m2, s2) = (m, s1 * exp(m1 - m) + s2 * exp(m2 - m)),  m = max(m1, m2).
// One reduction of pairs gives the row's max and sum together. Each thread keeps its
// exp(x - m_local) in registers and rescales them by exp(m_local - m_row) / sum at the end, so
// every element costs one exp.
//
// Loads are float4 when the row length and both pointers allow 16-byte alignment, scalar
// otherwise; either way consecutive threads touch consecutive addresses (coalesced).

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ __forceinline__ float exp_of(float x) { return exp2f(x * kLog2e); }

// Partial softmax statistics of some elements of a row.
struct MaxSum {
    float max;
    float sum;  // sum of exp(x - max)
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return {m, 0.0f};  // both sides empty: avoid (-inf) - (-inf)
    return {m, a.sum * exp_of(a.max - m) + b.sum * exp_of(b.max - m)};
}

// Butterfly reduction: every lane ends with the same total (combine is commutative).
__device__ __forceinline__ MaxSum warp_reduce(MaxSum p) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        const MaxSum other{__shfl_xor_sync(kFullMask, p.max, offset),
                           __shfl_xor_sync(kFullMask, p.sum, offset)};
        p = combine(p, other);
    }
    return p;
}

// Reduction over the TPR threads that share a row; every thread gets the row total.
template <int TPR>
__device__ __forceinline__ MaxSum row_reduce(MaxSum p) {
    p = warp_reduce(p);
    if constexpr (TPR > kWarp) {
        __shared__ MaxSum partial[TPR / kWarp];
        const int warp = threadIdx.x / kWarp;
        const int lane = threadIdx.x % kWarp;
        if (lane == 0) partial[warp] = p;
        __syncthreads();  // used once per block, so no second barrier is needed
        p = lane < TPR / kWarp ? partial[lane] : MaxSum{-INFINITY, 0.0f};
        p = warp_reduce(p);
    }
    return p;
}

// One row per TPR threads, N elements per thread held in registers, loaded VEC at a time.
// Thread t of a row owns columns ((i * TPR + t) * VEC + j), i < N / VEC, j < VEC.
template <int TPR, int N, int VEC>
__global__ void __launch_bounds__(TPR == kWarp ? 4 * kWarp : TPR)
    softmax_in_registers_kernel(const float* __restrict__ x, float* __restrict__ y, int rows,
                                int cols) {
    static_assert(N % VEC == 0, "whole vectors per thread");
    constexpr int kRowsPerBlock = TPR == kWarp ? 4 : 1;
    const int t = threadIdx.x % TPR;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / TPR;
    if (row >= rows) return;  // uniform over the row's threads: no barrier is skipped halfway
    const float* xr = x + static_cast<size_t>(row) * cols;
    float* yr = y + static_cast<size_t>(row) * cols;

    float v[N];
#pragma unroll
    for (int i = 0; i < N / VEC; ++i) {
        const int c = (i * TPR + t) * VEC;  // VEC == 4 implies cols % 4 == 0
        if (c < cols) {
            if constexpr (VEC == 4) {
                const float4 q = __ldg(reinterpret_cast<const float4*>(xr + c));
                v[4 * i] = q.x;
                v[4 * i + 1] = q.y;
                v[4 * i + 2] = q.z;
                v[4 * i + 3] = q.w;
            } else {
                v[i] = __ldg(xr + c);
            }
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[VEC * i + j] = -INFINITY;
        }
    }

    float local_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < N; ++j) local_max = fmaxf(local_max, v[j]);
    // A thread past the end of a short row holds only -inf; exp(-inf - 0) = 0 keeps it inert.
    const float shift = local_max == -INFINITY ? 0.0f : local_max;
    float local_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        v[j] = exp_of(v[j] - shift);
        local_sum += v[j];
    }

    const MaxSum total = row_reduce<TPR>({local_max, local_sum});
    const float factor = exp_of(local_max - total.max) / total.sum;

#pragma unroll
    for (int i = 0; i < N / VEC; ++i) {
        const int c = (i * TPR + t) * VEC;
        if (c < cols) {
            if constexpr (VEC == 4) {
                const float4 q = make_float4(v[4 * i] * factor, v[4 * i + 1] * factor,
                                             v[4 * i + 2] * factor, v[4 * i + 3] * factor);
                *reinterpret_cast<float4*>(yr + c) = q;
            } else {
                yr[c] = v[i] * factor;
            }
        }
    }
}

// Rows too long for registers: one block per row, two streaming passes.
template <int TPR>
__global__ void __launch_bounds__(TPR)
    softmax_long_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
    float* yr = y + static_cast<size_t>(blockIdx.x) * cols;
    constexpr int kBatch = 4;  // independent loads in flight per thread

    MaxSum p{-INFINITY, 0.0f};
    int c = threadIdx.x;
    for (; c + (kBatch - 1) * TPR < cols; c += kBatch * TPR) {
        float batch[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) batch[j] = __ldg(xr + c + j * TPR);
        float batch_max = batch[0];
#pragma unroll
        for (int j = 1; j < kBatch; ++j) batch_max = fmaxf(batch_max, batch[j]);
        float batch_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kBatch; ++j) batch_sum += exp_of(batch[j] - batch_max);
        p = combine(p, {batch_max, batch_sum});
    }
    for (; c < cols; c += TPR) p = combine(p, {__ldg(xr + c), 1.0f});

    const MaxSum total = row_reduce<TPR>(p);
    const float inv_sum = 1.0f / total.sum;
    for (int i = threadIdx.x; i < cols; i += TPR) {
        yr[i] = exp_of(__ldg(xr + i) - total.max) * inv_sum;
    }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <int TPR, int N>
void launch_in_registers(const float* x, float* y, int rows, int cols, bool vec4) {
    constexpr int kRowsPerBlock = TPR == kWarp ? 4 : 1;
    const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    const int threads = TPR * kRowsPerBlock;
    if constexpr (N % 4 == 0) {
        if (vec4) {
            softmax_in_registers_kernel<TPR, N, 4><<<blocks, threads>>>(x, y, rows, cols);
            return;
        }
    }
    softmax_in_registers_kernel<TPR, N, 1><<<blocks, threads>>>(x, y, rows, cols);
}

}  // namespace

extern "C" void softmax(const float* x, float* y, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec4 = cols % 4 == 0 && aligned16(x) && aligned16(y);
    if (cols <= kWarp) {
        launch_in_registers<kWarp, 1>(x, y, rows, cols, vec4);
    } else if (cols <= 2 * kWarp) {
        launch_in_registers<kWarp, 2>(x, y, rows, cols, vec4);
    } else if (cols <= 4 * kWarp) {
        launch_in_registers<kWarp, 4>(x, y, rows, cols, vec4);
    } else if (cols <= 8 * kWarp) {
        launch_in_registers<kWarp, 8>(x, y, rows, cols, vec4);
    } else if (cols <= 16 * kWarp) {
        launch_in_registers<kWarp, 16>(x, y, rows, cols, vec4);
    } else if (cols <= 32 * kWarp) {
        launch_in_registers<kWarp, 32>(x, y, rows, cols, vec4);
    } else if (cols <= 128 * 32) {
        launch_in_registers<128, 32>(x, y, rows, cols, vec4);
    } else if (cols <= 256 * 32) {
        launch_in_registers<256, 32>(x, y, rows, cols, vec4);
    } else if (cols <= 512 * 32) {
        launch_in_registers<512, 32>(x, y, rows, cols, vec4);
    } else if (cols <= 1024 * 32) {
        launch_in_registers<1024, 32>(x, y, rows, cols, vec4);
    } else {
        softmax_long_rows_kernel<1024><<<rows, 1024>>>(x, y, cols);
    }
}
