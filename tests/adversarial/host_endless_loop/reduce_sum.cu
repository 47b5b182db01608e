// Broken: the host polls a completion flag that nothing ever sets (the kernel meant to
// set it was never written), so the call never returns.
#include <cuda_runtime.h>

extern "C" void reduce_sum(const float* x, float* out, int n) {
    (void)x;
    (void)out;
    (void)n;
    static volatile int done = 0;
    while (!done) {
    }
}
