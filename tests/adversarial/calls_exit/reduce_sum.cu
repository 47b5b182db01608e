// Broken: bails out of the whole program with exit(0) when it meets a size it was
// not written for, taking the grader's worker process with it.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" void reduce_sum(const float* x, float* out, int n) {
    (void)x;
    (void)out;
    if (n % 1024 != 0) {
        fprintf(stderr, "reduce_sum: n must be a multiple of 1024\n");
        exit(0);
    }
}
