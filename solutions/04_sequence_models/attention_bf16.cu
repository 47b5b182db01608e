// Reference solution: flash attention on Hopper's asynchronous machinery (FlashAttention-3
// schedule), with the mma.sync kernel of attention_bf16_mma.cuh as the path for other GPUs.
//
// One block computes a 128-row tile of o for one (batch, head) with three warpgroups of 128
// threads each:
//   * warpgroup 0, the producer, only loads. One of its threads issues TMA copies (the tensor
//     copy engine, cp.async.bulk.tensor) of the Q tile and of every K and V tile into a ring of
//     shared-memory stages; an mbarrier per stage says when a copy has landed ("full") and
//     another when the consumers are done with it ("empty"). It gives most of its registers
//     away (setmaxnreg), since it computes nothing.
//   * warpgroups 1 and 2, the consumers, each own 64 query rows. Per key tile of 128 keys a
//     consumer computes S = Q K^T with wgmma (both operands read straight from shared memory),
//     the online softmax of S in fp32 registers, and O += P V with wgmma, P taken from
//     registers as bf16: the accumulator layout of the first product is the A-operand layout
//     of the second, so P never touches shared memory.
//
// Hiding the softmax. On Hopper the matrix products of a tile take about as long as the
// exponentials of its softmax (MUFU.EX2 runs 16 per clock per SM, against 1024 bf16
// multiply-adds per clock for wgmma: at head dim 128, 64 exponentials per row of 128 keys
// cost 50% of the products' time, at head dim 64 100%). Two overlaps hide them:
//   * inside a warpgroup, the products are issued one tile ahead: while O += P_{t-1} V_{t-1}
//     runs on the tensor cores, the same warps already compute the softmax of S_t, whose
//     product they issued just before;
//   * between the two warpgroups (ping-pong): a pair of named barriers lets them take turns
//     issuing their products, so that one warpgroup's softmax runs while the other's
//     products occupy the tensor cores.
//
// Everything else follows the mma.sync solution: scores scaled into log2 units by the FFMA
// that subtracts the reference maximum, a reference that moves lazily (only when a score
// exceeds it by 2^8, so the output is rescaled on few tiles), masking only on the tiles that
// cross the sequence end or the causal diagonal, and the heaviest causal tiles first.
//
// Shared-memory layout. wgmma reads its operands through 64-bit descriptors that describe a
// canonical layout; the one used here is the 128-byte swizzle, which is also what the TMA
// writes with CU_TENSOR_MAP_SWIZZLE_128B: a tile [rows][64 bf16] is stored row after row,
// 128 bytes per row, with the 16-byte chunk c of row r moved to chunk c ^ (r % 8). Rows of
// 128 bf16 (head dim 128) are stored as two such tiles, columns 0-63 then 64-127. Every tile
// starts on a 1024-byte boundary (8 rows, one swizzle period), so the descriptors' base
// offset is 0. Descriptors:
//   * Q and K are "K-major" operands (the reduction index, the head dim, is contiguous): the
//     stride between 8-row groups (SBO) is 1024 bytes; a step of 16 along the head dim
//     advances the start address by 32 bytes inside the swizzled row.
//   * V in O += P V is "MN-major" (its contiguous index, the head dim, is the N of the
//     product): the tensor core transposes it on the fly (the last immediate of the
//     instruction). SBO is then the stride between 8-key groups (1024 bytes), LBO the stride
//     between the 64-column halves of the head dim (128 keys x 128 bytes = 16 KiB).
//
// Ragged lengths cost nothing extra: the tensor map knows seq, and the TMA fills rows past
// the end with zeros (their scores are masked; zero V rows meet zero weights).
//
// The TMA needs a tensor map, which only the driver API can encode (cuTensorMapEncodeTiled).
// The library does not link the driver: it asks the runtime for the function's address
// (cudaGetDriverEntryPointByVersion). Where that fails, the GPU is not a Hopper, or a pointer
// is not 16-byte aligned, the mma.sync path runs instead.

#include <cmath>
#include <cstdint>
#include <cstdio>

#include <cuda.h>  // CUtensorMap and its enums only: the driver is not linked
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention_bf16_mma.cuh"

// Build with -DATTENTION_PINGPONG=0 to measure what the ping-pong between the consumers buys.
#ifndef ATTENTION_PINGPONG
#define ATTENTION_PINGPONG 1
#endif
// Build with -DATTENTION_FORCE_MMA=1 to run the mma.sync path on a Hopper GPU too.
#ifndef ATTENTION_FORCE_MMA
#define ATTENTION_FORCE_MMA 0
#endif

namespace hopper {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kRescaleThreshold = 8.0f;  // powers of two, as in the mma.sync path

template <int D_, int STAGES_>
struct Config {
    static constexpr int D = D_;
    static constexpr int kStages = STAGES_;
    static constexpr int kConsumers = 2;            // consumer warpgroups, 64 query rows each
    static constexpr bool kPingPong = ATTENTION_PINGPONG != 0;
    static constexpr int BM = 64 * kConsumers;      // query rows per block
    static constexpr int BN = 128;                  // keys per tile
    static constexpr int kThreads = 128 * (1 + kConsumers);
    static constexpr int kChunks = D / 64;          // 64-column swizzled tiles per row
    static constexpr int kQBytes = BM * D * 2;
    static constexpr int kKVBytes = BN * D * 2;     // one K (or V) tile
    static constexpr int kChunkBytes = BN * 128;    // one 64-column tile of K or V
    static constexpr int kQChunkBytes = BM * 128;
    // Q, then the K stages, then the V stages, then the mbarriers; 1 KiB of slack to align
    // the start to the swizzle period.
    static constexpr int kKOffset = kQBytes;
    static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
    static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
    static constexpr int kNumBars = 1 + 3 * kStages;  // q_full, k_full[], v_full[], empty[]
    static constexpr size_t kSmemBytes = kBarOffset + 8 * kNumBars + 1024;
    // Registers: the producer keeps 24 per thread, each consumer 240 (setmaxnreg); 128 * 24 +
    // 256 * 240 = 64512 of the SM's 65536.
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static_assert(D == 64 || D == 128, "head dims 64 and 128");
    static_assert(kSmemBytes <= 227 * 1024, "fits one block per SM");
    // setmaxnreg moves registers inside the block's own pool: what the producer gives back must
    // cover what the consumers take, from the count every thread starts with (65536 / kThreads,
    // rounded down to a multiple of 8; ptxas reports it as "Used N registers").
    static constexpr int kLaunchRegs = (65536 / kThreads) / 8 * 8;
    static_assert(128 * (kLaunchRegs - kProducerRegs) >= 128 * kConsumers * (kConsumerRegs - kLaunchRegs),
                  "setmaxnreg.inc would wait forever");
};

// ------------------------------------------------------------------ PTX wrappers

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrive once and tell the barrier to expect `bytes` more from copies before its phase completes.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Wait until the phase of the given parity has completed. A fresh barrier is in phase 0, so
// waiting for parity 1 returns at once (the producer's first pass through the ring).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// TMA: copy the box at coordinates (c0 = column, c1 = row, c2 = head) of a 3-D tensor map into
// shared memory, completing `bytes` on the mbarrier when it lands.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Wait until at most `pending` of this warpgroup's committed product groups are in flight.
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

// Registers that an asynchronous product writes or reads must not be touched by the compiler
// between the product's issue and its wait: this empty asm "redefines" them right after the
// wait, so that no use of them can be scheduled earlier.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][M]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
#pragma unroll
        for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
    }
}

// Shared-memory matrix descriptor of a 128-byte-swizzled operand (see the header comment):
// start address, leading and stride byte offsets, all in 16-byte units; bits 62-63 = 1 selects
// the 128-byte swizzle.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
           static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16 |
           static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));  // exp2(-inf) = +0
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low 16 bits
    return *reinterpret_cast<const uint32_t*>(&v);
}

// wgmma wrappers. One instruction multiplies a 64 x 16 A by a 16 x N B for the whole warpgroup.
// Accumulator layout (the same per warp as mma.sync's 16 x 8 tiles, side by side): warp w of
// the warpgroup holds rows 16w + g and 16w + g + 8 (g = lane / 4), and d[4j + e] is column
// 8j + 2(lane % 4) + (e % 2) of row 16w + g + 8(e / 2). The register A operand has mma.sync's
// A layout for the warp's 16 rows.
// d (64 x 128, fp32) = A (64 x 16) * B (16 x 128) + (accumulate ? d : 0). A and B both in
// shared memory, K-major (the 16 k-values of a row are contiguous).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                             int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 }, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (64 x 128, fp32) += A (64 x 16, bf16 pairs in registers) * B (16 x 128, shared memory,
// MN-major: the last immediate asks the tensor core to transpose it on the fly).
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4],
                                             uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 }, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// d (64 x 64, fp32) += A (64 x 16, bf16 pairs in registers) * B (16 x 64, shared memory,
// MN-major: the last immediate asks the tensor core to transpose it on the fly).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4],
                                             uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 }, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// ------------------------------------------------------------------ the online softmax

// Online softmax of one 64 x 128 score tile, this thread's two rows (row0 and row0 + 8).
// m holds each row's reference maximum in log2 units, l this thread's share of the row sum
// (the 4 threads of a quad share a row). Overwrites s with the weights exp2(s * scale_log2 -
// m) and sets alpha, the factor by which each row's output must be multiplied; returns
// whether any alpha of this thread differs from 1. MASK: the tile crosses the sequence end or
// the causal diagonal; all other tiles skip the mask arithmetic.
template <bool MASK>
__device__ __forceinline__ bool softmax_tile(float (&s)[64], float (&m)[2], float (&l)[2],
                                             float (&alpha)[2], int k0, int row0, int col0,
                                             int seq, int causal, float scale_log2) {
    if constexpr (MASK) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = row0 + (e / 2) * 8;
                const int key = k0 + j * 8 + col0 + (e % 2);
                if (key >= seq || (causal && key > row)) s[4 * j + e] = -INFINITY;
            }
        }
    }
    bool moved_any = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
        const float seen = tile_max * scale_log2;  // -inf stays -inf
        const float m_old = m[h];
        // -inf + threshold is -inf, so the first visible key always sets the reference.
        const float m_new = seen > m_old + kRescaleThreshold ? seen : m_old;
        const bool moved = m_new != m_old;
        alpha[h] = moved ? fast_exp2(m_old - m_new) : 1.0f;  // exp2(-inf) = 0
        moved_any |= moved;
        m[h] = m_new;
        const float shift = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
        float sum0 = 0.0f;
        float sum1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], scale_log2, -shift));
            s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -shift));
            sum0 += s[4 * j + 2 * h];
            sum1 += s[4 * j + 2 * h + 1];
        }
        l[h] = fmaf(l[h], alpha[h], sum0 + sum1);
    }
    return moved_any;
}

// The weights as the A operand of O += P V: k-step kk (keys 16kk .. 16kk + 15) takes the
// accumulator columns of 8-column groups 2kk and 2kk + 1.
__device__ __forceinline__ void weights_to_bf16(uint32_t (&p)[8][4], const float (&s)[64]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        p[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);  // row g,     keys 2c, 2c+1
        p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);  // row g + 8, keys 2c, 2c+1
        p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);  // row g,     keys 2c+8, 2c+9
        p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);  // row g + 8, keys 2c+8, 2c+9
    }
}

// ------------------------------------------------------------------ the kernel

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    attention_kernel(const __grid_constant__ CUtensorMap tm_q,
                     const __grid_constant__ CUtensorMap tm_k,
                     const __grid_constant__ CUtensorMap tm_v, bf16* __restrict__ o, int seq,
                     int causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = C::D;
    constexpr int BM = C::BM;
    constexpr int BN = C::BN;
    constexpr int NS = C::kStages;
    constexpr int K = C::kConsumers;

    // Every swizzled tile must start on a 1024-byte boundary: align the buffer by hand.
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t q_s = base;
    const uint32_t k_s = base + C::kKOffset;
    const uint32_t v_s = base + C::kVOffset;
    const uint32_t bars = base + C::kBarOffset;
    const uint32_t q_full = bars;
    auto k_full = [&](int st) { return bars + 8u * (1 + st); };
    auto v_full = [&](int st) { return bars + 8u * (1 + NS + st); };
    auto empty = [&](int st) { return bars + 8u * (1 + 2 * NS + st); };

    // Causal: the last query tiles see the most keys, so they start first.
    const int q_tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = q_tile * BM;
    const int head = blockIdx.y;
    const int kv_tiles = (seq + BN - 1) / BN;
    const int num_tiles = causal ? min(kv_tiles, (q0 + BM + BN - 1) / BN) : kv_tiles;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
#pragma unroll
        for (int st = 0; st < NS; ++st) {
            mbar_init(k_full(st), 1);
            mbar_init(v_full(st), 1);
            mbar_init(empty(st), 4 * K);  // lane 0 of every consumer warp
        }
        // Make the initialised barriers visible to the tensor copy engine (the async proxy).
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------------------------------------------------------- producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProducerRegs));
        if (threadIdx.x == 0) {
            mbar_expect_tx(q_full, C::kQBytes);
#pragma unroll
            for (int c = 0; c < C::kChunks; ++c) {
                tma_load_3d(q_s + c * C::kQChunkBytes, &tm_q, q_full, c * 64, q0, head);
            }
            for (int t = 0; t < num_tiles; ++t) {
                const int st = t % NS;
                // Wait until the consumers are done with the tile this stage held last round.
                mbar_wait(empty(st), ((t / NS) & 1) ^ 1);
                mbar_expect_tx(k_full(st), C::kKVBytes);
#pragma unroll
                for (int c = 0; c < C::kChunks; ++c) {
                    tma_load_3d(k_s + st * C::kKVBytes + c * C::kChunkBytes, &tm_k, k_full(st),
                                c * 64, t * BN, head);
                }
                mbar_expect_tx(v_full(st), C::kKVBytes);
#pragma unroll
                for (int c = 0; c < C::kChunks; ++c) {
                    tma_load_3d(v_s + st * C::kKVBytes + c * C::kChunkBytes, &tm_v, v_full(st),
                                c * 64, t * BN, head);
                }
            }
        }
        return;
    }

    // -------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kConsumerRegs));
    const int cw = wg - 1;  // which consumer: rows q0 + 64 cw .. q0 + 64 cw + 63
    const int warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32;
    const int row0 = q0 + cw * 64 + warp * 16 + lane / 4;  // and row0 + 8
    const int col0 = 2 * (lane % 4);
    const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));

    float s[64];       // scores, then weights, of one 64 x 128 tile
    float acc[D / 2];  // the 64 x D output tile
    uint32_t p[8][4];  // the weights as bf16 A fragments
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.0f, 0.0f};
    float alpha[2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;

    // S = Q K^T of the tile in stage st: D / 16 steps along the head dim. Step kk reads
    // column chunk kk / 4 at byte offset 32 (kk % 4) inside the swizzled rows.
    const uint32_t q_rows = q_s + cw * 64 * 128;
    auto issue_scores = [&](int st) {
        const uint32_t k_tile = k_s + st * C::kKVBytes;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t offset = (kk / 4) * C::kChunkBytes + (kk % 4) * 32;
            const uint32_t q_offset = (kk / 4) * C::kQChunkBytes + (kk % 4) * 32;
            wgmma_ss_n128(s, smem_desc(q_rows + q_offset, 16, 1024),
                          smem_desc(k_tile + offset, 16, 1024), kk > 0);
        }
    };
    // O += P V of the tile in stage st: 8 steps of 16 keys, 2048 bytes apart.
    auto issue_pv = [&](int st) {
        const uint32_t v_tile = v_s + st * C::kKVBytes;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const uint64_t desc = smem_desc(v_tile + kk * 16 * 128, C::kChunkBytes, 1024);
            if constexpr (D == 128) {
                wgmma_rs_n128(acc, p[kk], desc);
            } else {
                wgmma_rs_n64(acc, p[kk], desc);
            }
        }
    };
    // Tell the producer this warp is done with stage st (both its K and its V).
    auto release = [&](int st) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(st));
    };
    // Ping-pong: consumer cw issues its products only between the sync on its own named
    // barrier and the arrive on the next consumer's; barrier ids 1 .. K (0 is __syncthreads).
    // The last consumer's last arrive is left out, as nobody waits for it.
    auto turn_begin = [&]() {
        if constexpr (C::kPingPong) named_bar_sync(1 + cw, 256);
    };
    auto turn_end = [&](bool last) {
        if constexpr (C::kPingPong) {
            if (!(last && cw == K - 1)) named_bar_arrive(1 + (cw + 1) % K, 256);
        }
    };
    auto tile_masked = [&](int t) {
        return (t + 1) * BN > seq || (causal && (t + 1) * BN - 1 > q0 + cw * 64);
    };
    auto softmax = [&](int t) {
        return tile_masked(t) ? softmax_tile<true>(s, m, l, alpha, t * BN, row0, col0, seq,
                                                   causal, scale_log2)
                              : softmax_tile<false>(s, m, l, alpha, t * BN, row0, col0, seq,
                                                    causal, scale_log2);
    };

    if (C::kPingPong && cw == K - 1) named_bar_arrive(1, 256);  // consumer 0 goes first
    mbar_wait(q_full, 0);

    // Tile 0: its scores alone.
    turn_begin();
    mbar_wait(k_full(0), 0);
    wgmma_fence();
    issue_scores(0);
    wgmma_commit();
    turn_end(false);
    wgmma_wait<0>();
    fence_regs(s);
    softmax(0);  // the output is still zero: nothing to rescale
    weights_to_bf16(p, s);

    // Tile t: scores of t and the product with the weights of t - 1 go out together; the
    // softmax of t runs while the tensor cores still work on P_{t-1} V_{t-1}.
    for (int t = 1; t < num_tiles; ++t) {
        const int st = t % NS;
        const int prev = (t - 1) % NS;
        turn_begin();
        mbar_wait(k_full(st), (t / NS) & 1);
        wgmma_fence();
        issue_scores(st);
        wgmma_commit();
        mbar_wait(v_full(prev), ((t - 1) / NS) & 1);
        issue_pv(prev);
        wgmma_commit();
        turn_end(false);

        wgmma_wait<1>();  // the scores have landed; P V may still run
        fence_regs(s);
        const bool moved = softmax(t);
        wgmma_wait<0>();  // P_{t-1} V_{t-1} is done: acc and p may change, stage prev is free
        fence_regs(acc);
        fence_regs(p);
        fence_regs(s);
        release(prev);
        if (__any_sync(kFullMask, moved)) {
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                acc[4 * j + 0] *= alpha[0];
                acc[4 * j + 1] *= alpha[0];
                acc[4 * j + 2] *= alpha[1];
                acc[4 * j + 3] *= alpha[1];
            }
        }
        weights_to_bf16(p, s);
    }

    // The last tile's product.
    const int last = (num_tiles - 1) % NS;
    turn_begin();
    mbar_wait(v_full(last), ((num_tiles - 1) / NS) & 1);
    wgmma_fence();
    issue_pv(last);
    wgmma_commit();
    turn_end(true);
    wgmma_wait<0>();
    fence_regs(acc);
    release(last);

    // Normalise by the full row sums (the 4 threads of a quad hold their parts) and store.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float total = l[h];
        total += __shfl_xor_sync(kFullMask, total, 1);
        total += __shfl_xor_sync(kFullMask, total, 2);
        const float inv = 1.0f / total;
        const int row = row0 + 8 * h;
        if (row < seq) {
            bf16* out = o + (static_cast<size_t>(head) * seq + row) * D + col0;
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) = __floats2bfloat162_rn(
                    acc[4 * j + 2 * h] * inv, acc[4 * j + 2 * h + 1] * inv);
            }
        }
    }
#else
    __trap();  // built without sm_90a: the host never launches this kernel then (see below)
#endif
}

// ------------------------------------------------------------------ host side

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, found through the runtime (null if unavailable).
EncodeTiled encoder() {
    static const EncodeTiled fn = [] {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult found{};
        const cudaError_t err = cudaGetDriverEntryPointByVersion(
            "cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found);
        if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
            cudaGetLastError();  // leave no error behind for the caller to find
            return static_cast<EncodeTiled>(nullptr);
        }
        return reinterpret_cast<EncodeTiled>(ptr);
    }();
    return fn;
}

// A [bh][seq][dim] bf16 tensor as a 3-D tensor map (innermost first) whose box is 64 columns
// (128 bytes, the widest box the 128-byte swizzle allows) by box_rows rows of one head.
bool make_map(CUtensorMap* map, const bf16* ptr, int bh, int seq, int dim, int box_rows) {
    const EncodeTiled encode = encoder();
    if (encode == nullptr) return false;
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(seq),
                                static_cast<cuuint64_t>(bh)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(dim) * 2,
                                   static_cast<cuuint64_t>(seq) * dim * 2};  // bytes
    const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    // OOB_FILL_NONE: elements outside the tensor (rows past seq) arrive as zeros.
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16*>(ptr), dims,
                  strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <class C>
bool launch(const bf16* q, const bf16* k, const bf16* v, bf16* o, int bh, int seq, int causal) {
    CUtensorMap tm_q;
    CUtensorMap tm_k;
    CUtensorMap tm_v;
    if (!make_map(&tm_q, q, bh, seq, C::D, C::BM) || !make_map(&tm_k, k, bh, seq, C::D, C::BN) ||
        !make_map(&tm_v, v, bh, seq, C::D, C::BN)) {
        return false;
    }
    const auto kernel = attention_kernel<C>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(C::kSmemBytes)) != cudaSuccess) {
        cudaGetLastError();  // e.g. no image of this kernel for the GPU: the mma.sync path runs
        return false;
    }
    const dim3 grid((seq + C::BM - 1) / C::BM, bh);
    kernel<<<grid, C::kThreads, C::kSmemBytes>>>(tm_q, tm_k, tm_v, o, seq, causal);
    return true;
}

// The TMA path needs a Hopper GPU and 16-byte-aligned tensors.
bool applies(const void* q, const void* k, const void* v) {
    int device = 0;
    int major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    return major == 9 && aligned(q) && aligned(k) && aligned(v);
}

// dim 128: two K/V stages (Q 32 KiB + 2 x 64 KiB); dim 64: three (Q 16 KiB + 3 x 32 KiB).
using Config128 = Config<128, 2>;
using Config64 = Config<64, 3>;

}  // namespace hopper

extern "C" void attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* o, int bh, int seq,
                               int dim, int causal) {
    if (bh <= 0 || seq <= 0) return;
    if (dim != 64 && dim != 128) {
        std::fprintf(stderr, "attention_bf16: dim must be 64 or 128, got %d\n", dim);
        return;
    }
    if (!ATTENTION_FORCE_MMA && hopper::applies(q, k, v)) {
        const bool launched = dim == 128
                                  ? hopper::launch<hopper::Config128>(q, k, v, o, bh, seq, causal)
                                  : hopper::launch<hopper::Config64>(q, k, v, o, bh, seq, causal);
        if (launched) return;
    }
    mma_path::attention(q, k, v, o, bh, seq, dim, causal);
}
