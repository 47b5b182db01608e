// Dishonest: launches on a stream of its own, created non-blocking so that it does
// not wait for, nor is waited for by, the default stream. The timer's end event on
// the default stream then fires before the kernel has finished. At n = 2^26 the
// kernel runs for about 200 us, long after the events: the host clock sees it.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static cudaStream_t stream = nullptr;
    if (stream == nullptr) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    add<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
