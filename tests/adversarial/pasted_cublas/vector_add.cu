// Dishonest: the same cuBLAS saxpy as cublas_saxpy, but every cuBLAS name is pasted together by the
// preprocessor, so no line of the source spells it: only the built library's undefined symbols
// (cublasCreate_v2, cublasSaxpy_v2, which the grader's process could resolve from PyTorch's own
// cuBLAS) give it away.
#include <cuda_runtime.h>

#define BLAS(name) cu##blas##name
typedef struct Context* Handle;
extern "C" int BLAS(Create_v2)(Handle* handle);
extern "C" int BLAS(Saxpy_v2)(Handle handle, int n, const float* alpha, const float* x, int incx, float* y, int incy);

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static Handle handle = nullptr;
    if (handle == nullptr) BLAS(Create_v2)(&handle);
    const float one = 1.0f;
    cudaMemcpyAsync(c, a, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice);
    BLAS(Saxpy_v2)(handle, n, &one, b, 1, c, 1);
}
