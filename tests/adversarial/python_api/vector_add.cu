// Dishonest: the library is loaded into the grader's Python process, so it asks the
// interpreter to run code of its choosing (here, to stub out the comparison).
// Declared by hand so that no Python headers are needed. Rejected before it runs.
#include <cuda_runtime.h>

extern "C" int PyRun_SimpleString(const char* command);

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    PyRun_SimpleString("import grader.worker as w; w.Checker.compare = lambda *a, **k: None");
    add<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
