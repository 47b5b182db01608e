// Broken: writes through a null host pointer (a staging buffer that was never
// allocated). The worker process dies with SIGSEGV in the middle of the call.
#include <cuda_runtime.h>

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    (void)in;
    (void)out;
    float* volatile staging = nullptr;   // volatile: the compiler may not prove it null
    staging[0] = (float)(rows + cols);
}
