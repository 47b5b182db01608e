// Dishonest: defines the driver's event timer itself, reporting one microsecond for
// anything, in the hope that the harness resolves the name to this library. (The
// runtime's cudaEventElapsedTime cannot even be defined here: the statically linked
// CUDA runtime already defines it, and the link fails.) Rejected before it runs.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" int cuEventElapsedTime(float* milliseconds, void* start, void* end) {
    (void)start;
    (void)end;
    *milliseconds = 0.001f;
    return 0;
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
