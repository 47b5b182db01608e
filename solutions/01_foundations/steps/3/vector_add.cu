// Reference solution of step 3 of the ladder of vector_add: float4.
//
// Where a, b and c are 16-byte aligned, thread q adds quad q (four floats, one 16-byte load of each
// input and one store: LDG.E.128 and STG.E.128 in the SASS); the last n % 4 elements, and every
// element of unaligned vectors, go through step 2's kernel.
//
// Step 2's comment, for the rest:
// Step 1, the naive baseline (baselines/vector_add.cu), gives each thread a contiguous chunk of
// the vectors: in one load instruction the 32 lanes of a warp read addresses a whole chunk apart,
// 32 different cache lines. Here thread i adds element i, so the lanes of a warp read 32
// consecutive floats: one 128-byte line per load instruction, every byte of it used (the picture
// "How a warp's loads meet memory" at the end of the notebook shows both).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void add_elementwise(const float* a, const float* b, float* c, int n) {
    const long long i = blockIdx.x * (long long)kThreads + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// Quad q is elements 4q .. 4q + 3: one float4 load of a, one of b, one float4 store of c.
__global__ void add_quads(const float4* a, const float4* b, float4* c, long long quads) {
    const long long q = blockIdx.x * (long long)kThreads + threadIdx.x;
    if (q < quads) {
        const float4 x = a[q], y = b[q];
        c[q] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

bool all_16b_aligned(const void* a, const void* b, const void* c) {
    return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c)) & 15) == 0;
}

}  // namespace

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    if (!all_16b_aligned(a, b, c)) {
        add_elementwise<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads>>>(a, b, c, n);
        return;
    }
    const long long quads = n / 4;
    if (quads > 0)
        add_quads<<<(unsigned)((quads + kThreads - 1) / kThreads), kThreads>>>(
            reinterpret_cast<const float4*>(a), reinterpret_cast<const float4*>(b), reinterpret_cast<float4*>(c), quads);
    const int done = (int)(quads * 4);
    if (done < n) add_elementwise<<<1, kThreads>>>(a + done, b + done, c + done, n - done);
}
