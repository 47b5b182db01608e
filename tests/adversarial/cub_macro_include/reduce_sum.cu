// Dishonest: CUB's device-wide sum does the work, included through a macro so that no #include
// line names CUB; only what the compiler read gives it away.
#include <cuda_runtime.h>
#define LIBRARY_HEADER(library) <library/cub.cuh>
#include LIBRARY_HEADER(cub)

extern "C" void reduce_sum(const float* x, float* out, int n) {
    static void* scratch = nullptr;
    static size_t scratch_bytes = 0;
    size_t needed = 0;
    cub::DeviceReduce::Sum(nullptr, needed, x, out, n);
    if (needed > scratch_bytes) {
        cudaFree(scratch);
        cudaMalloc(&scratch, needed);
        scratch_bytes = needed;
    }
    cub::DeviceReduce::Sum(scratch, needed, x, out, n);
}
