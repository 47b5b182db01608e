// Exercise 05 · the ladder of gemm_w8a8, step 2 (given, complete): the INT8 tensor cores, tiled.
//
// Step 1 is the naive baseline (baselines/gemm_w8a8.cu): one thread per element of Y, __dp4a, no
// reuse. Here a block of 4 warps computes a 64 x 64 tile of Y with mma.sync m16n8k32:
//   * per step of 64 along K it copies a 64 x 64-byte tile of A and one of B into shared memory,
//     each row padded by 16 bytes so that the fragment loads below hit 32 different banks;
//   * each warp owns a 32 x 32 piece of the tile: 2 x 4 accumulators of 16 x 8 int32, and per
//     32 bytes of K it loads 2 fragments of A and 4 of B from shared memory, by hand, in the layout
//     the instruction wants (the table in the notebook), then issues 8 mma (IMMA in the SASS);
//   * the epilogue scales the exact int32 sums by sA[m] sB[n], adds the bias and rounds to bf16.
// Correct for every size, and a first big step; what it lacks is your file's work: ldmatrix for the
// fragments, cp.async and several stages so that loads hide behind the mma, larger tiles per warp.
#include <cstdint>
#include <cuda_bf16.h>

namespace {

constexpr int kTileM = 64, kTileN = 64, kTileK = 64;   // block tile; K in bytes (int8)
constexpr int kPadded = kTileK + 16;                   // shared row stride in bytes: 20 words
constexpr int kThreads = 128;                          // 4 warps as 2 x 2, each a 32 x 32 piece

// One operand tile (kTileM rows of kTileK bytes) from a K-contiguous int8 matrix into shared memory.
// Rows that are 16-byte aligned (K % 16 == 0 and an aligned base) go 16 bytes a load; any other K
// byte by byte. Past the edge of the matrix the tile holds zeros, which add nothing to the sums.
__device__ __forceinline__ void load_tile(int8_t (*tile)[kPadded], const int8_t* X, int rows, int K, int row0,
                                          int k0, bool rows_16b_aligned) {
    for (int chunk_id = threadIdx.x; chunk_id < kTileM * kTileK / 16; chunk_id += kThreads) {
        const int r = chunk_id / (kTileK / 16), col = (chunk_id % (kTileK / 16)) * 16;
        const int gr = row0 + r, gk = k0 + col;
        int4 chunk = make_int4(0, 0, 0, 0);
        if (rows_16b_aligned) {
            if (gr < rows && gk < K) chunk = *reinterpret_cast<const int4*>(X + (size_t)gr * K + gk);
        } else if (gr < rows) {
            int8_t* bytes = reinterpret_cast<int8_t*>(&chunk);
            for (int b = 0; b < 16; ++b)
                if (gk + b < K) bytes[b] = X[(size_t)gr * K + gk + b];
        }
        *reinterpret_cast<int4*>(&tile[r][col]) = chunk;
    }
}

// sum += a b for a 16 x 32 int8 fragment a (4 registers of 4 bytes), a 32 x 8 fragment b (2), sum 16 x 8 int32.
__device__ __forceinline__ void mma_s8(int (&sum)[4], const int (&a)[4], const int (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+r"(sum[0]), "+r"(sum[1]), "+r"(sum[2]), "+r"(sum[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ int four_bytes(const int8_t (*tile)[kPadded], int row, int col) {
    return *reinterpret_cast<const int*>(&tile[row][col]);
}

__global__ void __launch_bounds__(kThreads)
w8a8_tiled(const int8_t* A, const int8_t* B, const float* sA, const float* sB, const float* bias,
           __nv_bfloat16* Y, int M, int N, int K, bool rows_16b_aligned) {
    __shared__ __align__(16) int8_t As[kTileM][kPadded];
    __shared__ __align__(16) int8_t Bs[kTileN][kPadded];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = lane / 4, quad = lane % 4;           // the PTX manual's groupID, threadID_in_group
    const int m0 = blockIdx.y * kTileM, n0 = blockIdx.x * kTileN;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // this warp's piece inside the tile

    int acc[2][4][4] = {};                                 // [m16 tile][n8 tile][register]
    for (int k0 = 0; k0 < K; k0 += kTileK) {
        load_tile(As, A, M, K, m0, k0, rows_16b_aligned);
        load_tile(Bs, B, N, K, n0, k0, rows_16b_aligned);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTileK; kk += 32) {
            int a[2][4], b[4][2];
#pragma unroll
            for (int ti = 0; ti < 2; ++ti) {
                const int r = wm + 16 * ti + group;
                a[ti][0] = four_bytes(As, r, kk + 4 * quad);           // rows 0-7,  k 0-15
                a[ti][1] = four_bytes(As, r + 8, kk + 4 * quad);       // rows 8-15, k 0-15
                a[ti][2] = four_bytes(As, r, kk + 16 + 4 * quad);      // rows 0-7,  k 16-31
                a[ti][3] = four_bytes(As, r + 8, kk + 16 + 4 * quad);  // rows 8-15, k 16-31
            }
#pragma unroll
            for (int tj = 0; tj < 4; ++tj) {
                const int n = wn + 8 * tj + group;
                b[tj][0] = four_bytes(Bs, n, kk + 4 * quad);           // k 0-15 of column n
                b[tj][1] = four_bytes(Bs, n, kk + 16 + 4 * quad);      // k 16-31
            }
#pragma unroll
            for (int ti = 0; ti < 2; ++ti)
#pragma unroll
                for (int tj = 0; tj < 4; ++tj) mma_s8(acc[ti][tj], a[ti], b[tj]);
        }
        __syncthreads();                                   // the tiles are overwritten next step
    }

    // Accumulator register r of a 16 x 8 tile: row group (+8 for r >= 2), column 2 quad + (r & 1).
#pragma unroll
    for (int ti = 0; ti < 2; ++ti)
#pragma unroll
        for (int tj = 0; tj < 4; ++tj)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int m = m0 + wm + 16 * ti + group + (r >= 2 ? 8 : 0);
                const int n = n0 + wn + 8 * tj + 2 * quad + (r & 1);
                if (m < M && n < N)
                    Y[(size_t)m * N + n] = __float2bfloat16((float)acc[ti][tj][r] * sA[m] * sB[n] + bias[n]);
            }
}

}  // namespace

extern "C" void gemm_w8a8(const int8_t* A, const int8_t* B, const float* sA, const float* sB,
                          const float* bias, __nv_bfloat16* Y, int M, int N, int K) {
    // 16-byte loads need every row to start on a 16-byte boundary: K a multiple of 16, aligned bases.
    const bool rows_16b_aligned =
        K % 16 == 0 && ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B)) & 15) == 0;
    dim3 grid((N + kTileN - 1) / kTileN, (M + kTileM - 1) / kTileM);
    w8a8_tiled<<<grid, kThreads>>>(A, B, sA, sB, bias, Y, M, N, K, rows_16b_aligned);
}
