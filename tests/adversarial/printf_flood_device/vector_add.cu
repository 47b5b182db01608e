// Broken: a correct kernel left with a debugging print in every thread. To keep the
// lines in order it works in chunks of 65536 elements and synchronizes after each, and
// every synchronize empties the device's printf buffer (1 MB by default) to stdout:
// about 0.7 MB of text per chunk, over 300 MB at n = 2^25. Device printf is slow enough
// that the task's deadline comes before the grader's 64 MB output cap; the timeout then
// says how much was printed and that the printing is what to remove.
#include <cuda_runtime.h>
#include <stdio.h>

constexpr int kChunk = 65536;

__global__ void add_and_print(const float* a, const float* b, float* c, int begin, int end) {
    int i = begin + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < end) {
        c[i] = a[i] + b[i];
        printf("c[%d] = %f\n", i, c[i]);
    }
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    for (int begin = 0; begin < n; begin += kChunk) {
        int end = n - begin < kChunk ? n : begin + kChunk;
        add_and_print<<<(end - begin + 255) / 256, 256>>>(a, b, c, begin, end);
        cudaDeviceSynchronize();
    }
}
