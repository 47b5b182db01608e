// Broken: a host-side assert()-style check that calls abort() when the matrix is
// not square, which takes the grader's worker process down with SIGABRT.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    (void)in;
    (void)out;
    if (rows != cols || rows % 32 != 0) {
        fprintf(stderr, "transpose: only square multiples of 32 are supported\n");
        abort();
    }
}
