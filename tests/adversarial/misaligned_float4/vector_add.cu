// Broken: vectorised with float4 but starting one element in (element 0 is done
// apart), so every float4 address is 4 bytes past a 16-byte boundary. The GPU raises
// a misaligned-address error on the first such load.
#include <cuda_runtime.h>

__global__ void add4_from_one(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) c[0] = a[0] + b[0];
    int n4 = n / 4 + 1;   // one more for the leftover elements
    if (i < n4) {
        float4 x = reinterpret_cast<const float4*>(a + 1)[i];
        float4 y = reinterpret_cast<const float4*>(b + 1)[i];
        int j = 1 + 4 * i;
        if (j < n) c[j] = x.x + y.x;
        if (j + 1 < n) c[j + 1] = x.y + y.y;
        if (j + 2 < n) c[j + 2] = x.z + y.z;
        if (j + 3 < n) c[j + 3] = x.w + y.w;
    }
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    add4_from_one<<<(n / 4 + 1 + 255) / 256, 256>>>(a, b, c, n);
}
