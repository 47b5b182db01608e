// W8A8 linear layer on the INT8 tensor cores: Y = (A B^T) * sA[m] * sB[n] + bias[n], in bf16.
//
// Tiling (256 threads, 128 x 128 x 64-byte block tiles, a 4-stage cp.async ring):
//   * The 8 warps form a 2 x 4 grid of 64 x 32 warp tiles: per 32 of K a warp issues 4 x 4
//     mma.sync.m16n8k32 (s8 x s8 -> s32), 16 IMMA for 4 ldmatrix.x4 of A and 2 of B.
//   * Both operands are K-contiguous, which is the "row.col" layout of the instruction: an 8 x 8
//     matrix of ldmatrix (16-bit units) is an 8 x 16 tile of bytes, exactly a quarter of an A
//     fragment (16 rows x 32 k) and half of a B fragment (8 n x 32 k).
//   * A tile row is 64 bytes, four 16-byte chunks; chunk c of row r is stored at c ^ ((r >> 1) & 3),
//     so the eight rows an ldmatrix reads at one chunk fall in eight different 16-byte bank groups.
//   * Ring: stage t + 3 is being copied while stage t is multiplied; one __syncthreads per stage.
//   * Epilogue: the int32 sums to float, times sA[m] sB[n], plus bias[n], to bf16, stored in pairs.
//   * Blocks walk the tiles in groups of 8 tile rows, so the B tiles a group reads stay in L2.
//   * K must be a multiple of 16 and A, B 16-byte aligned for the 16-byte copies; otherwise a
//     plain __dp4a kernel does the (small, odd) case.
#include <cstdint>
#include <cuda_bf16.h>

namespace {

constexpr int BM = 128, BN = 128, BK = 64;     // BK in bytes (= int8 elements)
constexpr int kStages = 4;
constexpr int kThreads = 256;
constexpr int kGroupRows = 8;
constexpr int kStageBytes = (BM + BN) * BK;
constexpr int kSmemBytes = kStages * kStageBytes;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk `chunk` (0..3) of row `row` in a swizzled 64-byte-row tile.
__device__ __forceinline__ int swizzled(int row, int chunk) {
    return row * BK + ((chunk ^ ((row >> 1) & 3)) << 4);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    const int bytes = valid ? 16 : 0;          // 0: the 16 bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void imma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One stage: the 128 x 64-byte tiles of A (rows m0...) and B (rows n0...) at k0, 2 chunks of each per thread.
__device__ __forceinline__ void load_stage(uint8_t* stage, const int8_t* A, const int8_t* B, int M, int N, int K,
                                           int m0, int n0, int k0) {
    uint8_t* As = stage;
    uint8_t* Bs = stage + BM * BK;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int idx = threadIdx.x + i * kThreads;       // 0..511: row idx / 4, chunk idx % 4
        const int row = idx >> 2, chunk = idx & 3;
        const int k = k0 + chunk * 16;
        const bool in_k = k < K;
        const bool a_ok = in_k && m0 + row < M;
        const bool b_ok = in_k && n0 + row < N;
        cp_async16(smem_addr(As + swizzled(row, chunk)), a_ok ? A + (size_t)(m0 + row) * K + k : A, a_ok);
        cp_async16(smem_addr(Bs + swizzled(row, chunk)), b_ok ? B + (size_t)(n0 + row) * K + k : B, b_ok);
    }
}

__global__ void __launch_bounds__(kThreads, 2)
w8a8_imma(const int8_t* __restrict__ A, const int8_t* __restrict__ B, const float* __restrict__ sA,
          const float* __restrict__ sB, const float* __restrict__ bias, __nv_bfloat16* __restrict__ Y, int M,
          int N, int K) {
    extern __shared__ __align__(128) uint8_t smem[];

    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int per_group = kGroupRows * tiles_n;
    const int group = blockIdx.x / per_group;
    const int first_row = group * kGroupRows;
    const int rows_here = min(tiles_m - first_row, kGroupRows);
    const int in_group = blockIdx.x - group * per_group;
    const int m0 = (first_row + in_group % rows_here) * BM;
    const int n0 = (in_group / rows_here) * BN;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = (warp >> 2) * 64;          // 2 warp rows of 64
    const int wn = (warp & 3) * 32;           // 4 warp columns of 32
    const int k_tiles = (K + BK - 1) / BK;

    int acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < k_tiles) load_stage(smem + s * kStageBytes, A, B, M, N, K, m0, n0, s * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }

    // ldmatrix addresses: which row and which 16-byte chunk (of the two of a 32-byte k step) this
    // lane points at. A: lanes 0-15 rows 0-15 at the first chunk, 16-31 the same rows at the second.
    // B: lanes 0-7 n 0-7 first chunk, 8-15 n 0-7 second chunk, 16-23 n 8-15 first, 24-31 second.
    const int a_row = lane & 15, a_half = lane >> 4;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;

    for (int kt = 0; kt < k_tiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2));
        __syncthreads();
        const uint8_t* As = smem + (kt % kStages) * kStageBytes;
        const uint8_t* Bs = As + BM * BK;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {           // two k steps of 32 bytes
            uint32_t a[4][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                ldmatrix_x4(smem_addr(As + swizzled(wm + mi * 16 + a_row, ks * 2 + a_half)), a[mi]);
#pragma unroll
            for (int nj = 0; nj < 2; ++nj) {
                uint32_t r[4];
                ldmatrix_x4(smem_addr(Bs + swizzled(wn + nj * 16 + b_row, ks * 2 + b_half)), r);
                b[2 * nj][0] = r[0];
                b[2 * nj][1] = r[1];
                b[2 * nj + 1][0] = r[2];
                b[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) imma(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
        // The stage read last iteration is free (every warp passed this iteration's barrier).
        const int next = kt + kStages - 1;
        if (next < k_tiles) load_stage(smem + (next % kStages) * kStageBytes, A, B, M, N, K, m0, n0, next * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // Epilogue. acc[mi][ni]: rows m0 + wm + mi * 16 + g (+ 8 for the last two), columns
    // n0 + wn + ni * 8 + 2 t (+ 1), with g = lane / 4, t = lane % 4.
    const int g = lane >> 2, t = lane & 3;
    const bool pairs = (N % 2) == 0;
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + wn + ni * 8 + 2 * t;
        if (col >= N) continue;
        const bool two = col + 1 < N;
        const float s0 = sB[col], b0 = bias[col];
        const float s1 = two ? sB[col + 1] : 0.0f, b1 = two ? bias[col + 1] : 0.0f;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm + mi * 16 + g + h * 8;
                if (row >= M) continue;
                const float sa = sA[row];
                const float y0 = (float)acc[mi][ni][2 * h] * sa * s0 + b0;
                const float y1 = (float)acc[mi][ni][2 * h + 1] * sa * s1 + b1;
                __nv_bfloat16* out = Y + (size_t)row * N + col;
                if (two && pairs) {
                    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(y0, y1);
                } else {
                    out[0] = __float2bfloat16(y0);
                    if (two) out[1] = __float2bfloat16(y1);
                }
            }
        }
    }
}

// Odd K or misaligned rows: one thread per element of Y, four products per __dp4a where it can.
__global__ void w8a8_simple(const int8_t* A, const int8_t* B, const float* sA, const float* sB,
                            const float* bias, __nv_bfloat16* Y, int M, int N, int K) {
    const int n = threadIdx.x + blockIdx.x * blockDim.x;
    const int m = blockIdx.y;
    if (n >= N) return;
    const int8_t* a = A + (size_t)m * K;
    const int8_t* b = B + (size_t)n * K;
    int acc = 0, k = 0;
    const bool words = (reinterpret_cast<size_t>(a) | reinterpret_cast<size_t>(b)) % 4 == 0;
    if (words)
        for (; k + 4 <= K; k += 4)
            acc = __dp4a(*reinterpret_cast<const int*>(a + k), *reinterpret_cast<const int*>(b + k), acc);
    for (; k < K; ++k) acc += (int)a[k] * (int)b[k];
    Y[(size_t)m * N + n] = __float2bfloat16((float)acc * sA[m] * sB[n] + bias[n]);
}

}  // namespace

extern "C" void gemm_w8a8(const int8_t* A, const int8_t* B, const float* sA, const float* sB,
                          const float* bias, __nv_bfloat16* Y, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    const bool fast = K % 16 == 0 && K > 0 && reinterpret_cast<size_t>(A) % 16 == 0 &&
                      reinterpret_cast<size_t>(B) % 16 == 0;
    if (!fast) {
        w8a8_simple<<<dim3((N + 127) / 128, M), 128>>>(A, B, sA, sB, bias, Y, M, N, K);
        return;
    }
    static bool configured = false;
    if (!configured) {
        cudaFuncSetAttribute(w8a8_imma, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        configured = true;
    }
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    w8a8_imma<<<tiles, kThreads, kSmemBytes>>>(A, B, sA, sB, bias, Y, M, N, K);
}
