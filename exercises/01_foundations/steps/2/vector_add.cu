// Exercise 01 · the ladder of vector_add, step 2 (given, complete): coalesced.
//
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
    const unsigned blocks = (unsigned)((n + kThreads - 1) / kThreads);
    add_elementwise<<<blocks, kThreads>>>(a, b, c, n);
}
