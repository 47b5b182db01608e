// Broken: does not compile (a misspelled variable and a missing semicolon).
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y
    if (r < rows && c < cols) out[(long long)c * rows + r] = in[(long long)r * colz + c];
}

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    dim3 threads(32, 8);
    dim3 blocks((cols + 31) / 32, (rows + 7) / 8);
    transpose_naive<<<blocks, threads>>>(in, out, rows, cols);
}
