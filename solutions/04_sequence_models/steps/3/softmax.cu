// Reference solution of step 3 of the ladder of softmax: the online softmax, two reads of x.
//
// Each thread keeps a running maximum m and a sum l of exp(x - m) over its elements, rescaling l
// by exp(m_old - m_new) when a larger value comes (section 3's online update). The block then
// combines them: the row's maximum M, and the sum of l exp(m - M) over the threads. One pass for
// both, then the pass that writes y: two reads of x instead of three.
//
// Step 2's comment, for the rest:
// Step 1, the naive baseline (baselines/softmax.cu), gives each thread a whole row: the lanes of a
// warp read 32 different rows (no coalescing), and a matrix of 8192 rows has only 8192 threads.
// Here a block of 256 threads takes a row, its threads read consecutive elements (coalesced), and
// the block combines their partial results with warp shuffles and shared memory:
//   pass 1: the maximum m of the row;
//   pass 2: the sum l of exp(x - m);
//   pass 3: y = exp(x - m) / l.
// Three reads of x and one write of y: 16 bytes moved per element where 8 would do. Steps 3 and 4
// take the reads of x down to two, then one.
#include <cmath>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float combine(float a, float b, bool take_max) { return take_max ? fmaxf(a, b) : a + b; }

// The maximum (take_max) or the sum of one value per thread, returned to every thread of the block.
__device__ float across_block(float value, bool take_max) {
    __shared__ float per_warp[kWarps];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset), take_max);
    if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = value;
    __syncthreads();
    value = per_warp[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) value = combine(value, per_warp[w], take_max);
    __syncthreads();                                   // per_warp is reused by the next call
    return value;
}

// Step 3: the maximum and the sum in one pass (the online softmax of section 3), then the write.
__global__ void __launch_bounds__(kThreads) softmax_online(const float* x, float* y, int cols) {
    const float* row_in = x + (size_t)blockIdx.x * cols;
    float* row_out = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY, l = 0.0f;                     // this thread's running max and sum
    for (int col = threadIdx.x; col < cols; col += kThreads) {
        const float v = row_in[col];
        if (v > m) {
            l = l * expf(m - v) + 1.0f;                // rescale the sum to the new maximum
            m = v;
        } else {
            l += expf(v - m);
        }
    }
    const float row_max = across_block(m, true);
    const float row_sum = across_block(l == 0.0f ? 0.0f : l * expf(m - row_max), false);
    const float inv_l = 1.0f / row_sum;
    for (int col = threadIdx.x; col < cols; col += kThreads) row_out[col] = expf(row_in[col] - row_max) * inv_l;
}

}  // namespace

extern "C" void softmax(const float* x, float* y, int rows, int cols) {
    softmax_online<<<rows, kThreads>>>(x, y, cols);
}
