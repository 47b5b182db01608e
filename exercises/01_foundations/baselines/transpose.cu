// Naive baseline for transpose: correct, and slow for one reason.
//
// Each thread copies one element. The reads are coalesced (a warp reads 32
// neighbours of one row of `in`), but the writes are not: the same warp writes one
// element into each of 32 different rows of `out`, 4 * rows bytes apart. Your
// kernel should make the writes as coalesced as the reads.
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[(long long)c * rows + r] = in[(long long)r * cols + c];
}

extern "C" void transpose(const float* in, float* out, int rows, int cols) {
    dim3 threads(32, 8);
    dim3 blocks((cols + 31) / 32, (rows + 7) / 8);
    transpose_naive<<<blocks, threads>>>(in, out, rows, cols);
}
