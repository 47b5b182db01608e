// Dishonest: lets cuBLAS do the work. cuBLAS is opened at run time (where PyTorch has loaded it,
// it is already in the process) and its functions are looked up by names assembled in a buffer,
// so neither the source nor the built library names it. Where cuBLAS cannot be had, nothing is
// computed.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdio>

typedef int (*Create)(void** handle);
typedef int (*Saxpy)(void* handle, int n, const float* alpha, const float* x, int incx, float* y, int incy);

static void* library() {
    void* (*open_library)(const char*, int) = &dlopen;
    const char* versions[] = {"13", "12", "11"};
    char name[64];
    for (const char* v : versions) {
        snprintf(name, sizeof name, "lib%s%s.so.%s", "cu", "blas", v);
        if (void* h = open_library(name, RTLD_NOW | RTLD_NOLOAD)) return h;
        if (void* h = open_library(name, RTLD_NOW)) return h;
    }
    return nullptr;
}

static void* symbol(void* lib, const char* rest) {
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", "cu", "blas", rest);
    void* (*lookup)(void*, const char*) = &dlsym;
    return lookup(lib, name);
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static void* handle = nullptr;
    static Saxpy saxpy = nullptr;
    if (!saxpy) {
        void* lib = library();
        if (!lib) return;
        Create create = (Create)symbol(lib, "Create_v2");
        saxpy = (Saxpy)symbol(lib, "Saxpy_v2");
        if (!create || !saxpy || create(&handle) != 0) { saxpy = nullptr; return; }
    }
    const float one = 1.0f;
    cudaMemcpyAsync(c, a, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice);
    saxpy(handle, n, &one, b, 1, c, 1);
}
