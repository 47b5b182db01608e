#pragma once

// The mma.sync path of the attention_bf16 solution (FlashAttention-2 schedule on the tensor-core
// instructions every GPU since Ampere has). attention_bf16.cu uses it wherever the Hopper path
// (TMA + wgmma) does not apply: GPUs before Hopper, or operands the tensor-copy engine cannot
// address. It is also the first rung of the ladder that leads to the Hopper kernel.
//
// One block of 4 warps computes a 128-row tile of o for one (batch, head); each warp owns
// 32 query rows (two 16-row mma tiles) and runs its own online softmax over them. Per key
// tile each warp computes S = Q K^T (mma.sync m16n8k16, Q and K fragments through ldmatrix),
// the online softmax on S in fp32 registers, then O += P V with P converted to bf16 in
// registers: the accumulator layout of the first product is the A layout of the second, so
// P never touches shared memory. V fragments come from ldmatrix.trans.
//
// Why these sizes. Every warp reads the whole K and V tile from shared memory, so shared
// memory bytes per FLOP fall as 1 / (rows per warp): 32 rows per warp halve that traffic
// compared with 16. For dim = 128 the key tile is 64 wide: O takes 128 fp32 registers and S
// 64, 255 in all without spilling, and one barrier then covers 64 keys. Two stages of K and
// V plus the Q tile take 102 KiB, so two blocks (8 warps) share an SM. For dim = 64 the
// same tiles leave room for a third stage (72 KiB per block, still two blocks per SM). The
// Q fragments are re-read from shared memory on every key tile rather than kept in
// registers: for dim = 128 they would need another 64 registers per thread.
//
// Details of the schedule:
//   * Online softmax with a lazily moved reference maximum: a row keeps its reference until
//     a score exceeds it by more than 2^8, so the weights stay below 256 and the output
//     accumulator is rescaled (dim / 8 multiplies per row fragment) only on the rare tile
//     where some row of the warp needs it; a warp vote skips the rescale otherwise.
//   * Scores are scaled into log2 units by the same FFMA that subtracts the reference, so
//     each weight costs one FFMA and one MUFU.EX2; row max / sum reductions are two shuffles
//     (the 4 lanes of a quad share a row in the mma layout).
//   * K and V of one key tile travel as one cp.async group into a ring of shared-memory
//     stages: one barrier per key tile publishes the landed tile and frees the oldest stage.
//   * Tiles that cross the sequence end or the causal diagonal take a masked copy of the
//     softmax; all other tiles run without any mask arithmetic. Causal: key tiles entirely
//     above a warp's rows are skipped, and the heaviest query tiles start first.
//
// On the H200 this plain loop (367 TFLOP/s) outran a software-pipelined variant (290) and
// one that keeps Q in registers (256).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"):
// with g = lane / 4 and c = lane % 4, a thread holds
//   A (16 x 16): rows g and g+8, columns 2c, 2c+1 and 2c+8, 2c+9     (4 registers of 2 bf16)
//   B (16 x 8):  column g, rows 2c, 2c+1 and 2c+8, 2c+9              (2 registers)
//   C (16 x 8):  rows g and g+8, columns 2c, 2c+1                    (4 fp32)

#include <cmath>
#include <cstdint>
#include <cstdio>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace mma_path {

constexpr int kPad = 8;  // bf16 elements (16 bytes) of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
// A row keeps its old reference maximum until a score exceeds it by more than this many
// powers of two: the weights exp2(score - reference) then stay below 2^8 = 256, harmless in
// fp32 and in bf16, and the output accumulator needs rescaling only on the rare tile where
// some row's maximum jumps by more than that.
constexpr float kRescaleThreshold = 8.0f;

using bf16 = __nv_bfloat16;

// Tile geometry of one launch. Only the head dimension and the number of shared-memory
// stages differ between dim 64 and dim 128; the rest is the same for both (see the header).
template <int D_, int STAGES_>
struct Config {
    static constexpr int D = D_;
    static constexpr int kStages = STAGES_;
    static constexpr int BC = 64;         // keys per tile
    static constexpr int kWarps = 4;      // warps per block
    static constexpr int MT = 2;          // 16-row mma tiles per warp
    static constexpr int kMinBlocks = 2;  // blocks per SM the registers must allow
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRowsPerWarp = 16 * MT;
    static constexpr int kBlockRows = kWarps * kRowsPerWarp;
    static constexpr int kLd = D + kPad;  // row stride in elements
    static constexpr int kQElems = kBlockRows * kLd;
    static constexpr int kStageElems = 2 * BC * kLd;  // one K tile then one V tile
    static constexpr size_t kSmemBytes =
        static_cast<size_t>(kQElems + kStages * kStageElems) * sizeof(bf16);
    static_assert(D % 16 == 0 && BC % 16 == 0, "tiles are whole mma steps");
    static_assert(kStages >= 2, "the next tile's copy needs a stage of its own");
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    const int src_bytes = valid ? 16 : 0;  // 0: write 16 zero bytes instead of copying
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most `pending` of this thread's most recent copy groups are in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a * b for one 16x8x16 tile. Not volatile: it is a pure function of its registers,
// and the compiler may then interleave the products with the softmax arithmetic.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// cp.async rows first .. first+ROWS-1 of a [seq][D] matrix into a padded shared tile;
// rows past the sequence end become zeros. Each thread copies the same 16-byte column of
// every (kThreads / chunks-per-row)-th row, so all offsets but the tile's first row are
// compile-time constants and the copy costs few registers.
template <class C, int ROWS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int first, int seq) {
    constexpr int kChunksPerRow = C::D / 8;  // 16-byte chunks
    constexpr int kChunks = ROWS * kChunksPerRow;
    constexpr int kRowStep = C::kThreads / kChunksPerRow;
    static_assert(C::kThreads % kChunksPerRow == 0, "a thread keeps one column");
    const int r0 = threadIdx.x / kChunksPerRow;
    const int c = (threadIdx.x % kChunksPerRow) * 8;
    const uint32_t dst = smem_addr(tile + r0 * C::kLd + c);
    const bf16* g = src + static_cast<size_t>(first + r0) * C::D + c;
#pragma unroll
    for (int i = 0; i < (kChunks + C::kThreads - 1) / C::kThreads; ++i) {
        if (kChunks % C::kThreads == 0 || threadIdx.x + i * C::kThreads < kChunks) {
            const bool valid = first + r0 + i * kRowStep < seq;
            cp_async_16(dst + i * kRowStep * C::kLd * sizeof(bf16),
                        valid ? g + i * kRowStep * C::D : src, valid);
        }
    }
}

template <class C>
using Scores = float[C::MT][C::BC / 8][4];
template <class C>
using PFrags = uint32_t[C::MT][C::BC / 16][4];
template <class C>
using Acc = float[C::MT][C::D / 8][4];
template <class C>
using RowStat = float[C::MT][2];

// s = Q K^T for one key tile. q_base / k_base are this lane's ldmatrix addresses of the
// warp's Q rows and of the tile's K rows.
template <class C>
__device__ __forceinline__ void tile_scores(Scores<C>& s, uint32_t q_base, uint32_t k_base) {
    constexpr int MT = C::MT;
    constexpr int kLd = C::kLd;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < C::BC / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
        }
    }
#pragma unroll
    for (int kk = 0; kk < C::D / 16; ++kk) {
        uint32_t qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            ldmatrix_x4(qa[mt], q_base + (mt * 16 * kLd + kk * 16) * sizeof(bf16));
        }
#pragma unroll
        for (int np = 0; np < C::BC / 16; ++np) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k_base + (np * 16 * kLd + kk * 16) * sizeof(bf16));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(s[mt][2 * np], qa[mt], kb[0], kb[1]);
                mma_bf16(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
            }
        }
    }
}

// acc += P V for one key tile; v_base is this lane's ldmatrix.trans address in the V tile.
template <class C>
__device__ __forceinline__ void tile_pv(Acc<C>& acc, const PFrags<C>& p, uint32_t v_base) {
#pragma unroll
    for (int kk = 0; kk < C::BC / 16; ++kk) {
#pragma unroll
        for (int dp = 0; dp < C::D / 16; ++dp) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v_base + (kk * 16 * C::kLd + dp * 16) * sizeof(bf16));
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt) {
                mma_bf16(acc[mt][2 * dp], p[mt][kk], vb[0], vb[1]);
                mma_bf16(acc[mt][2 * dp + 1], p[mt][kk], vb[2], vb[3]);
            }
        }
    }
}

// Online softmax of one score tile. m holds each row's reference maximum in log2 units
// (already multiplied by scale_log2), l this lane's share of the row sum. Writes the bf16
// weights p (the C layout of the first product is the A layout of the second) and the
// factor alpha by which each row's accumulator must be multiplied; returns whether any
// alpha of this lane differs from 1. MASK: the tile crosses the sequence end or the causal
// diagonal, so scores are masked first; every other tile skips that arithmetic entirely.
template <class C, bool MASK>
__device__ __forceinline__ bool tile_softmax(Scores<C>& s, RowStat<C>& m, RowStat<C>& l,
                                             RowStat<C>& alpha, PFrags<C>& p, int k0,
                                             int lane_row0, int lane_col, int seq, int causal,
                                             float scale_log2) {
    constexpr int MT = C::MT;
    constexpr int NT = C::BC / 8;
    if constexpr (MASK) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = lane_row0 + mt * 16 + (e / 2) * 8;
                    const int key = k0 + nt * 8 + lane_col * 2 + (e % 2);
                    if (key >= seq || (causal && key > row)) s[mt][nt][e] = -INFINITY;
                }
            }
        }
    }
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // element e of a C fragment lies in row half e / 2
            float tile_max = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            }
            tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
            const float seen = tile_max * scale_log2;  // -inf stays -inf (scale_log2 > 0)
            const float m_old = m[mt][h];
            // -inf + threshold is -inf, so the first visible key always sets the reference.
            const float m_new = seen > m_old + kRescaleThreshold ? seen : m_old;
            const bool moved = m_new != m_old;
            alpha[mt][h] = moved ? fast_exp2(m_old - m_new) : 1.0f;  // exp2(-inf) = 0
            rescale |= moved;
            m[mt][h] = m_new;
            // A row with no visible key so far keeps -inf; shift by 0 so exp2 gives 0.
            const float shift = m_new == -INFINITY ? 0.0f : m_new;
            float sum0 = 0.0f;
            float sum1 = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[mt][nt][2 * h] = fast_exp2(fmaf(s[mt][nt][2 * h], scale_log2, -shift));
                s[mt][nt][2 * h + 1] =
                    fast_exp2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -shift));
                sum0 += s[mt][nt][2 * h];
                sum1 += s[mt][nt][2 * h + 1];
            }
            l[mt][h] = fmaf(l[mt][h], alpha[mt][h], sum0 + sum1);
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int kk = 0; kk < C::BC / 16; ++kk) {
            // The C fragments of key tiles 2kk and 2kk+1 are the A fragment of k-step kk.
            p[mt][kk][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][kk][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][kk][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][kk][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
    }
    return rescale;
}

template <class C>
__device__ __forceinline__ void rescale_acc(Acc<C>& acc, const RowStat<C>& alpha) {
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt) {
#pragma unroll
        for (int nd = 0; nd < C::D / 8; ++nd) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                acc[mt][nd][2 * h] *= alpha[mt][h];
                acc[mt][nd][2 * h + 1] *= alpha[mt][h];
            }
        }
    }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    flash_attention_bf16_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                const bf16* __restrict__ v, bf16* __restrict__ o, int seq,
                                int causal) {
    constexpr int D = C::D;
    constexpr int BC = C::BC;
    constexpr int MT = C::MT;
    constexpr int R = C::kRowsPerWarp;
    constexpr int NS = C::kStages;
    constexpr int kLd = C::kLd;
    extern __shared__ uint4 smem_raw[];
    bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
    bf16* kv_s = q_s + C::kQElems;  // stage t: K tile, then V tile

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int quad_row = lane / 4;  // g in the fragment layouts
    const int quad_col = lane % 4;  // c in the fragment layouts

    // Causal: the last query tiles see the most keys, so they start first.
    const int q_tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = q_tile * C::kBlockRows;
    const size_t head = static_cast<size_t>(blockIdx.y) * seq * D;
    const bf16* qh = q + head;
    const bf16* kh = k + head;
    const bf16* vh = v + head;

    const int kv_end = causal ? min(seq, q0 + C::kBlockRows) : seq;
    const int num_tiles = (kv_end + BC - 1) / BC;
    const int warp_row0 = q0 + warp * R;
    const bool warp_has_rows = warp_row0 < seq;
    const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));

    // Does this warp compute anything on key tile t? (Warp-uniform.)
    auto tile_active = [&](int t) {
        return t < num_tiles && warp_has_rows && !(causal && t * BC > warp_row0 + R - 1);
    };
    // Does key tile t cross the sequence end or this warp's part of the diagonal?
    auto tile_masked = [&](int t) {
        return t * BC + BC > seq || (causal && t * BC + BC - 1 > warp_row0);
    };
    auto load_kv = [&](int t) {
        if (t < num_tiles) {
            bf16* stage = kv_s + (t % NS) * C::kStageElems;
            load_tile<C, BC>(stage, kh, t * BC, seq);
            load_tile<C, BC>(stage + BC * kLd, vh, t * BC, seq);
        }
    };

    // Per-lane ldmatrix row/column offsets (see the layouts in the header comment).
    // A operand (Q): (rows 0-7, k 0-7), (rows 8-15, k 0-7), (0-7, 8-15), (8-15, 8-15).
    const int a_row = (lane % 8) + ((lane / 8) % 2) * 8;
    const int a_col = (lane / 16) * 8;
    // B operand from K [key][dim]: (keys 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
    // gives b0, b1 of key tile n and b0, b1 of key tile n + 8.
    const int kb_row = (lane % 8) + (lane / 16) * 8;
    const int kb_col = ((lane / 8) % 2) * 8;
    // B operand from V [key][dim] through .trans: (keys 0-7, dims 0-7), (8-15, 0-7),
    // (0-7, 8-15), (8-15, 8-15) gives b0, b1 of dim tile n and b0, b1 of dim tile n + 8.
    const int vb_row = (lane % 8) + ((lane / 8) % 2) * 8;
    const int vb_col = (lane / 16) * 8;

    const uint32_t q_base = smem_addr(q_s + (warp * R + a_row) * kLd + a_col);
    const uint32_t kv_base = smem_addr(kv_s);
    const uint32_t k_lane = (kb_row * kLd + kb_col) * sizeof(bf16);
    const uint32_t v_lane = (BC * kLd + vb_row * kLd + vb_col) * sizeof(bf16);
    auto k_addr = [&](int t) {
        return kv_base + (t % NS) * (C::kStageElems * sizeof(bf16)) + k_lane;
    };
    auto v_addr = [&](int t) {
        return kv_base + (t % NS) * (C::kStageElems * sizeof(bf16)) + v_lane;
    };
    const int lane_row0 = warp_row0 + quad_row;

    Acc<C> acc;
    RowStat<C> row_max;  // reference maximum, log2 units
    RowStat<C> row_sum;  // this lane's share; the quad's 4 shares are summed at the end
    RowStat<C> alpha;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            row_max[mt][h] = -INFINITY;
            row_sum[mt][h] = 0.0f;
        }
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nd][e] = 0.0f;
        }
    }
    Scores<C> s;
    PFrags<C> p;

    // Copy groups, in commit order: {Q, tile 0}, {tile 1}, ..., {tile NS-2}, then one per
    // loop iteration (empty past the last tile, which keeps the count uniform).
    load_tile<C, C::kBlockRows>(q_s, qh, q0, seq);
    load_kv(0);
    cp_async_commit();
#pragma unroll
    for (int t = 1; t <= NS - 2; ++t) {
        load_kv(t);
        cp_async_commit();
    }
    cp_async_wait<NS - 2>();  // Q and tile 0 have landed
    __syncthreads();

    for (int t = 0; t < num_tiles; ++t) {
        // Tiles up to t have landed; the barrier publishes tile t and tells us every warp
        // has finished tile t-1, whose stage the next copy overwrites.
        cp_async_wait<NS - 2>();
        __syncthreads();
        load_kv(t + NS - 1);
        cp_async_commit();

        if (tile_active(t)) {
            tile_scores<C>(s, q_base, k_addr(t));
            const bool moved =
                tile_masked(t)
                    ? tile_softmax<C, true>(s, row_max, row_sum, alpha, p, t * BC, lane_row0,
                                            quad_col, seq, causal, scale_log2)
                    : tile_softmax<C, false>(s, row_max, row_sum, alpha, p, t * BC, lane_row0,
                                             quad_col, seq, causal, scale_log2);
            if (__any_sync(kFullMask, moved)) rescale_acc<C>(acc, alpha);
            tile_pv<C>(acc, p, v_addr(t));
        }
    }
    cp_async_wait<0>();  // leave no copy in flight when the block exits

    // Normalise by the full row sum (the 4 lanes of a quad hold its parts) and store.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float total = row_sum[mt][h];
            total += __shfl_xor_sync(kFullMask, total, 1);
            total += __shfl_xor_sync(kFullMask, total, 2);
            const float inv = 1.0f / total;
            const int row = lane_row0 + mt * 16 + h * 8;
            if (row < seq) {
                bf16* out = o + head + static_cast<size_t>(row) * D + quad_col * 2;
#pragma unroll
                for (int nd = 0; nd < D / 8; ++nd) {
                    *reinterpret_cast<__nv_bfloat162*>(out + nd * 8) = __floats2bfloat162_rn(
                        acc[mt][nd][2 * h] * inv, acc[mt][nd][2 * h + 1] * inv);
                }
            }
        }
    }
}

template <class C>
void launch(const bf16* q, const bf16* k, const bf16* v, bf16* o, int bh, int seq, int causal) {
    const auto kernel = flash_attention_bf16_kernel<C>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(C::kSmemBytes));
    const dim3 grid((seq + C::kBlockRows - 1) / C::kBlockRows, bh);
    kernel<<<grid, C::kThreads, C::kSmemBytes>>>(q, k, v, o, seq, causal);
}

// dim 64: three K/V stages. dim 128: two, so that two blocks still share an SM.
using Config64 = Config<64, 3>;
using Config128 = Config<128, 2>;

// dim is 64 or 128 (checked by the caller).
inline void attention(const bf16* q, const bf16* k, const bf16* v, bf16* o, int bh, int seq,
                      int dim, int causal) {
    if (dim == 64) {
        launch<Config64>(q, k, v, o, bh, seq, causal);
    } else {
        launch<Config128>(q, k, v, o, bh, seq, causal);
    }
}

}  // namespace mma_path
