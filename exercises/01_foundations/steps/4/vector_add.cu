// Exercise 01 · the ladder of vector_add, step 4 (yours): float4 in a grid-stride loop.
//
// Start from your step 3 (copy it over this file), then make the change marked STEP 4. Step 3
// launches one thread per quad, 16 M threads for n = 2^26, each doing one add and leaving. Launch
// instead just enough blocks to fill the GPU (cudaDeviceGetAttribute with
// cudaDevAttrMultiProcessorCount, times the blocks an SM holds: cudaOccupancyMaxActiveBlocksPerMultiprocessor)
// and let thread t take quads t, t + T, t + 2T, ... where T is the number of threads in the grid.
// Each thread then has several independent loads to issue, and the kernel works for any n with
// the same grid. Compare steps 3 and 4 in the table: on a memory-bound kernel this last step buys
// little or nothing, and that is worth having measured.
//
// Step 2's comment, for the rest:
// Step 1, the naive baseline (baselines/vector_add.cu), gives each thread a contiguous chunk of
// the vectors: in one load instruction the 32 lanes of a warp read addresses a whole chunk apart,
// 32 different cache lines. Here thread i adds element i, so the lanes of a warp read 32
// consecutive floats: one 128-byte line per load instruction, every byte of it used (the picture
// "How a warp's loads meet memory" at the end of the notebook shows both).
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void add_elementwise(const float* a, const float* b, float* c, int n) {
    const long long i = blockIdx.x * (long long)kThreads + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

}  // namespace

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    // STEP 4: your step 3, with a grid that fills the GPU once and a grid-stride loop.
    const unsigned blocks = (unsigned)((n + kThreads - 1) / kThreads);
    add_elementwise<<<blocks, kThreads>>>(a, b, c, n);
}
