// Broken: asks for 32 x 64 = 2048 threads per block, twice the hardware's limit of
// 1024. The launch fails (invalid configuration), nothing runs, and the only trace
// is the error code the CUDA runtime keeps for cudaGetLastError().
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[(long long)c * rows + r] = in[(long long)r * cols + c];
}

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    dim3 threads(32, 64);
    dim3 blocks((cols + 31) / 32, (rows + 63) / 64);
    transpose_naive<<<blocks, threads>>>(in, out, rows, cols);
}
