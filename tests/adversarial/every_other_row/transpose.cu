// Dishonest: transposes only the even rows of `in`, so every other column of `out`
// is never written. Shapes with a single row pass; rows = 1000, cols = 1 must not.
#include <cuda_runtime.h>

__global__ void transpose_even_rows(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = 2 * (blockIdx.y * blockDim.y + threadIdx.y);
    if (r < rows && c < cols) out[(long long)c * rows + r] = in[(long long)r * cols + c];
}

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    dim3 threads(32, 8);
    int even_rows = (rows + 1) / 2;
    dim3 blocks((cols + 31) / 32, (even_rows + 7) / 8);
    transpose_even_rows<<<blocks, threads>>>(in, out, rows, cols);
}
