// Reference solution (placeholder): C = A B^T on bf16 tensor cores with mma.sync.
//
// A plain tiled kernel: a 128 x 128 block tile, 32 deep in K, two shared-memory stages filled
// with cp.async while the other is used. 8 warps in a 2 x 4 grid, each a 64 x 32 piece of the
// tile: 4 x 4 accumulators of mma.m16n8k16 (64 fp32 registers per thread), fed by ldmatrix.x4.
// Shared rows are padded by 16 bytes, so the 8 row addresses of an ldmatrix fall into 8
// different groups of 4 banks. Sizes whose rows are not 16-byte aligned (K not a multiple of 8)
// take a slower path that copies the tiles element by element.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// with g = lane / 4 and c = lane % 4:
//   A (16 x 16, row-major): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..)
//   B (16 x 8, k x n):      b0 = (k 2c..2c+1, n g), b1 = (k 2c+8..2c+9, n g)
//   C (16 x 8):             c0, c1 = (g, 2c..2c+1), c2, c3 = (g+8, 2c..2c+1)
// B^T's rows are B's columns, so an 8 x 8 tile of B (n rows, k contiguous) read by ldmatrix gives
// lane l the elements (n = l / 4, k = 2 (l % 4) ..): exactly b0.

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int BM = 128, BN = 128, BK = 32;
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kLd = BK + 8;           // shared row: 32 bf16 plus 16 bytes of padding
constexpr int kStages = 2;

using bf16 = __nv_bfloat16;

// --- PTX instructions, one inline-asm wrapper each ---

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without passing through registers; bytes past `valid` are zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
                 "r"(valid));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

// Four 8 x 8 bf16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// d += a b for a 16 x 16 bf16 tile a and a 16 x 8 bf16 tile b, in fp32.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// --- tiles ---

// Rows [r0, r0 + 128) and columns [k0, k0 + 32) of a rows x K matrix into S (128 x kLd), zeros
// outside it. kAsync: 16-byte cp.async (rows 16-byte aligned, K % 8 == 0); otherwise element by
// element through registers.
template <bool kAsync>
__device__ __forceinline__ void load_tile(bf16* S, const bf16* G, int r0, int rows, int k0, int K, int tid) {
    if (kAsync) {
#pragma unroll
        for (int c = 0; c < (BM * BK / 8) / kThreads; ++c) {
            const int chunk = tid + c * kThreads;        // 4 chunks of 8 elements per row
            const int r = chunk >> 2, kk = (chunk & 3) * 8;
            const bool inside = r0 + r < rows && k0 + kk < K;
            const bf16* src = inside ? G + (size_t)(r0 + r) * K + k0 + kk : G;
            cp_async_16(S + r * kLd + kk, src, inside ? 16 : 0);
        }
    } else {
        for (int e = tid; e < BM * BK; e += kThreads) {
            const int r = e / BK, kk = e % BK;
            const bool inside = r0 + r < rows && k0 + kk < K;
            S[r * kLd + kk] = inside ? G[(size_t)(r0 + r) * K + k0 + kk] : __float2bfloat16(0.0f);
        }
    }
}

template <bool kAsync>
__global__ void __launch_bounds__(kThreads) gemm_bf16_mma(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                                           bf16* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) bf16 As[kStages][BM * kLd];
    __shared__ __align__(16) bf16 Bs[kStages][BN * kLd];

    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;     // this warp's 64 x 32 piece
    const int tiles_k = (K + BK - 1) / BK;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    load_tile<kAsync>(As[0], A, m0, M, 0, K, tid);
    load_tile<kAsync>(Bs[0], B, n0, N, 0, K, tid);
    if (kAsync) cp_async_commit();

    for (int t = 0; t < tiles_k; ++t) {
        const int stage = t % kStages;
        if (t + 1 < tiles_k) {                               // the next tile travels meanwhile
            load_tile<kAsync>(As[stage ^ 1], A, m0, M, (t + 1) * BK, K, tid);
            load_tile<kAsync>(Bs[stage ^ 1], B, n0, N, (t + 1) * BK, K, tid);
            if (kAsync) {
                cp_async_commit();
                cp_async_wait<1>();                          // tile t has landed
            }
        } else if (kAsync) {
            cp_async_wait<0>();
        }
        __syncthreads();

        const bf16* sa = As[stage];
        const bf16* sb = Bs[stage];
#pragma unroll
        for (int ks = 0; ks < BK; ks += 16) {
            uint32_t a[4][4], b[2][4];
#pragma unroll
            for (int i = 0; i < 4; ++i)   // rows wm + 16 i + (lane % 16), columns ks + 8 (lane / 16)
                ldmatrix_x4(a[i], sa + (wm + 16 * i + (lane & 15)) * kLd + ks + ((lane >> 4) << 3));
#pragma unroll
            for (int j = 0; j < 2; ++j)   // n rows wn + 16 j + 8 (lane / 16) + lane % 8, k ks + 8 ((lane / 8) % 2)
                ldmatrix_x4(b[j], sb + (wn + 16 * j + ((lane >> 4) << 3) + (lane & 7)) * kLd + ks +
                                      (((lane >> 3) & 1) << 3));
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    mma_bf16_16816(acc[i][j], a[i], b[j >> 1][(j & 1) * 2], b[j >> 1][(j & 1) * 2 + 1]);
        }
        __syncthreads();                                     // before the next load overwrites it
    }

    // Each accumulator tile: rows g and g + 8, columns 2c and 2c + 1.
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = m0 + wm + 16 * i + g + 8 * half;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int col = n0 + wn + 8 * j + 2 * c;
                const float v0 = acc[i][j][2 * half], v1 = acc[i][j][2 * half + 1];
                bf16* out = C + (size_t)row * N + col;
                if (col + 1 < N && (N & 1) == 0) {
                    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v0, v1);
                } else {
                    if (col < N) out[0] = __float2bfloat16(v0);
                    if (col + 1 < N) out[1] = __float2bfloat16(v1);
                }
            }
        }
    }
}

}  // namespace

extern "C" void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                          int M, int N, int K) {
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    const bool aligned = K % 8 == 0 && reinterpret_cast<uintptr_t>(A) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(B) % 16 == 0;
    if (aligned) {
        gemm_bf16_mma<true><<<grid, kThreads>>>(A, B, C, M, N, K);
    } else {
        gemm_bf16_mma<false><<<grid, kThreads>>>(A, B, C, M, N, K);
    }
}
