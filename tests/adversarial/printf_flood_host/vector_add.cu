// Broken: a correct kernel left with a debugging dump that prints 100 MB from the
// host on the first call. The grader caps what a learner's code may print (64 MB)
// and stops the worker when the cap is reached.
#include <cuda_runtime.h>
#include <stdio.h>

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static bool dumped = false;
    if (!dumped) {
        dumped = true;
        for (long long line = 0; line < 2500000; ++line)   // 2.5 M lines of 40 bytes
            printf("debug %12lld: launching vector_add\n", line);
    }
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
