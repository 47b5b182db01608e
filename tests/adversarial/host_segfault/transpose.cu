// Broken: writes through a null host pointer (a staging buffer that was never
// allocated). The worker process dies with SIGSEGV in the middle of the call.
#include <cuda_runtime.h>

float* g_staging = nullptr;   // the allocation that should fill it was forgotten

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    (void)in;
    (void)out;
    g_staging[0] = (float)(rows + cols);
}
