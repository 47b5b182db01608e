// Dishonest: c = a, then c += 1 * b with cuBLAS's saxpy. The cuBLAS functions are
// declared by hand, as someone without the headers would, so the file compiles
// anywhere; the static check still names the call.
#include <cuda_runtime.h>

typedef struct cublasContext* cublasHandle_t;
extern "C" int cublasCreate_v2(cublasHandle_t* handle);
extern "C" int cublasSaxpy_v2(cublasHandle_t handle, int n, const float* alpha, const float* x, int incx, float* y,
                              int incy);

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr) cublasCreate_v2(&handle);
    const float one = 1.0f;
    cudaMemcpyAsync(c, a, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice);
    cublasSaxpy_v2(handle, n, &one, b, 1, c, 1);
}
