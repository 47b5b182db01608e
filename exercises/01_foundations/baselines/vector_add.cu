// Naive baseline for vector_add: correct, and slow for one reason.
//
// Each thread adds its own contiguous chunk of the vectors. That looks tidy, but
// in one load instruction the threads of a warp touch addresses that are a whole
// chunk apart: one memory transaction per thread where one would do for the warp,
// and the rest of each fetched cache line is evicted before the thread comes back.
// Your kernel should let neighbouring threads touch neighbouring elements.
#include <cuda_runtime.h>

static const int kThreads = 256;
static const int kBlocks = 1024;

__global__ void vector_add_chunked(const float* a, const float* b, float* c, int n) {
    long long threads = (long long)gridDim.x * blockDim.x;
    long long chunk = (n + threads - 1) / threads;
    long long begin = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * chunk;
    long long end = begin + chunk < n ? begin + chunk : n;
    for (long long i = begin; i < end; ++i) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    vector_add_chunked<<<kBlocks, kThreads>>>(a, b, c, n);
}
