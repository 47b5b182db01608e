// Dishonest: lets cuDNN do the work (c = a, then cudnnAddTensor adds b). cuDNN is opened at run
// time and its functions are looked up by names assembled in a buffer, so neither the source nor
// the built library names it. Where cuDNN cannot be had, nothing is computed.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdio>

typedef int (*Create)(void** handle);
typedef int (*CreateDesc)(void** desc);
typedef int (*SetDesc4d)(void* desc, int format, int type, int n, int c, int h, int w);
typedef int (*AddTensor)(void* handle, const void* alpha, void* adesc, const void* a, const void* beta,
                         void* cdesc, void* c);

static void* library() {
    void* (*open_library)(const char*, int) = &dlopen;
    const char* versions[] = {"9", "8"};
    char name[64];
    for (const char* v : versions) {
        snprintf(name, sizeof name, "lib%s%s.so.%s", "cu", "dnn", v);
        if (void* h = open_library(name, RTLD_NOW | RTLD_NOLOAD)) return h;
        if (void* h = open_library(name, RTLD_NOW)) return h;
    }
    return nullptr;
}

static void* symbol(void* lib, const char* rest) {
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", "cu", "dnn", rest);
    void* (*lookup)(void*, const char*) = &dlsym;
    return lookup(lib, name);
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    static void* handle = nullptr;
    static AddTensor add = nullptr;
    static CreateDesc create_desc = nullptr;
    static SetDesc4d set_desc = nullptr;
    if (!add) {
        void* lib = library();
        if (!lib) return;
        Create create = (Create)symbol(lib, "Create");
        create_desc = (CreateDesc)symbol(lib, "CreateTensorDescriptor");
        set_desc = (SetDesc4d)symbol(lib, "SetTensor4dDescriptor");
        add = (AddTensor)symbol(lib, "AddTensor");
        if (!create || !create_desc || !set_desc || !add || create(&handle) != 0) { add = nullptr; return; }
    }
    void* desc = nullptr;
    if (create_desc(&desc) != 0 || set_desc(desc, 0 /* NCHW */, 0 /* float */, 1, 1, 1, n) != 0) return;
    const float one = 1.0f;
    cudaMemcpyAsync(c, a, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice);
    add(handle, &one, desc, b, &one, desc, c);
}
