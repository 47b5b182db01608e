// Reference solution: flash attention (FlashAttention-2 schedule) on bf16 tensor cores.
//
// One block of 4 warps computes a 128-row tile of o for one (batch, head); each warp owns
// 32 query rows (two 16-row mma tiles) and runs its own online softmax over them, so the
// warps never exchange softmax statistics. Keys and values stream through shared memory
// in tiles of kBlockCols rows, double-buffered with cp.async so the next tile's copy runs
// under the current tile's math.
//
// Per key tile, each warp:
//   1. S = Q K^T       mma.sync m16n8k16 (bf16 in, fp32 accumulate); Q and K fragments come
//                      from shared memory with ldmatrix.
//   2. mask            only on tiles that straddle the causal diagonal or the sequence end.
//   3. online softmax  on S in fp32 registers: running max m, running sum l, rescale of the
//                      output accumulator by exp(m_old - m_new). Row reductions are two
//                      shuffles: the 4 lanes of a quad share a row in the mma layout.
//   4. O += P V        P converted to bf16 in registers; the accumulator layout of the first
//                      mma is exactly the A-operand layout of the second, so P never touches
//                      shared memory. V fragments come from ldmatrix.trans, because V is
//                      stored [key][dim] and the mma wants it k-major per column.
//
// Why these tile sizes. Every warp reads the whole K and V tile from shared memory, so shared
// memory bytes per FLOP fall as 1 / (rows per warp): 32 rows per warp halves that traffic
// compared with 16. The accumulators then cost 32 x dim / 32 = dim fp32 registers per thread
// for O plus 32 x kBlockCols / 32 for S, so for dim = 128 the key tile is 32 wide (128 + 32
// accumulators) and for dim = 64 it is 64 wide (64 + 64): both stay within 255 registers
// without spilling. Shared memory: Q tile plus two stages of K and V, rows padded by 16 bytes
// so the 8 row addresses of each ldmatrix phase land in 8 different bank groups (68 KiB for
// dim = 128, 54 KiB for dim = 64). At about 220-240 registers per thread, two blocks (8 warps)
// share an SM; registers, not shared memory, are the limit.
//
// Causal attention skips key tiles that lie entirely above the diagonal (per block through
// the loop bound, per warp through a uniform branch) and heavier query tiles start first.
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

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 32;  // two 16-row mma tiles
constexpr int kMmaTiles = kRowsPerWarp / 16;
constexpr int kBlockRows = kWarps * kRowsPerWarp;
constexpr int kPad = 8;  // bf16 elements (16 bytes) of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

using bf16 = __nv_bfloat16;

template <int D, int BC>
struct Layout {
    static constexpr int kLd = D + kPad;  // row stride in elements
    static constexpr int kQ = 0;
    static constexpr int kK = kQ + kBlockRows * kLd;  // two stages
    static constexpr int kV = kK + 2 * BC * kLd;      // two stages
    static constexpr int kElems = kV + 2 * BC * kLd;
    static constexpr size_t kBytes = kElems * sizeof(bf16);
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

// c += a * b for one 16x8x16 tile.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
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

// cp.async rows first .. first+rows-1 of a [seq][D] matrix into a padded shared tile;
// rows past the sequence end become zeros.
template <int D>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int first, int rows,
                                          int seq) {
    constexpr int kChunksPerRow = D / 8;  // 16-byte chunks
    constexpr int kLd = D + kPad;
#pragma unroll 4
    for (int chunk = threadIdx.x; chunk < rows * kChunksPerRow; chunk += kThreads) {
        const int r = chunk / kChunksPerRow;
        const int c = (chunk % kChunksPerRow) * 8;
        const bool valid = first + r < seq;
        const bf16* g = valid ? src + static_cast<size_t>(first + r) * D + c : src;
        cp_async_16(smem_addr(tile + r * kLd + c), g, valid);
    }
}

template <int D, int BC>
__global__ void __launch_bounds__(kThreads)
    flash_attention_bf16_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                const bf16* __restrict__ v, bf16* __restrict__ o, int seq,
                                int causal) {
    using L = Layout<D, BC>;
    constexpr int kLd = L::kLd;
    constexpr int kDimTiles = D / 8;  // n-tiles of the output, 8 columns each
    constexpr int kKeyTiles = BC / 8;  // n-tiles of the scores
    extern __shared__ uint4 smem_raw[];
    bf16* smem = reinterpret_cast<bf16*>(smem_raw);
    bf16* q_s = smem + L::kQ;
    bf16* k_s = smem + L::kK;
    bf16* v_s = smem + L::kV;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int quad_row = lane / 4;  // g in the fragment layouts
    const int quad_col = lane % 4;  // c in the fragment layouts

    const int q_tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = q_tile * kBlockRows;
    const size_t head = static_cast<size_t>(blockIdx.y) * seq * D;
    const bf16* qh = q + head;
    const bf16* kh = k + head;
    const bf16* vh = v + head;

    const int kv_end = causal ? min(seq, q0 + kBlockRows) : seq;
    const int num_kv_tiles = (kv_end + BC - 1) / BC;
    const int warp_row0 = q0 + warp * kRowsPerWarp;
    const bool warp_has_rows = warp_row0 < seq;
    const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));

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

    const uint32_t q_frag_base = smem_addr(q_s + (warp * kRowsPerWarp + a_row) * kLd + a_col);

    float acc[kMmaTiles][kDimTiles][4];
    float row_max[kMmaTiles][2];  // [tile][row g or g+8]
    float row_sum[kMmaTiles][2];  // this lane's share; the quad's 4 shares are summed at the end
#pragma unroll
    for (int mt = 0; mt < kMmaTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            row_max[mt][h] = -INFINITY;
            row_sum[mt][h] = 0.0f;
        }
#pragma unroll
        for (int nd = 0; nd < kDimTiles; ++nd) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nd][e] = 0.0f;
        }
    }

    // Copy groups, in commit order: {Q, K0}, {V0}, then per tile t: {K(t+1)}, {V(t+1)}.
    load_tile<D>(q_s, qh, q0, kBlockRows, seq);
    load_tile<D>(k_s, kh, 0, BC, seq);
    cp_async_commit();
    load_tile<D>(v_s, vh, 0, BC, seq);
    cp_async_commit();

    for (int t = 0; t < num_kv_tiles; ++t) {
        const int k0 = t * BC;
        const int stage = t % 2;
        const bf16* k_tile = k_s + stage * BC * kLd;
        const bf16* v_tile = v_s + stage * BC * kLd;

        // Everything but the newest group (V(t)) is done: K(t) has landed. The barrier
        // publishes it and tells us every warp has finished tile t-1, whose buffers the
        // next copy reuses.
        cp_async_wait<1>();
        __syncthreads();
        if (t + 1 < num_kv_tiles) {
            load_tile<D>(k_s + (1 - stage) * BC * kLd, kh, k0 + BC, BC, seq);
        }
        cp_async_commit();  // possibly empty: keeps the group count uniform

        // A warp whose rows all lie above this tile's first key has nothing to do here.
        const bool active = warp_has_rows && !(causal && k0 > warp_row0 + kRowsPerWarp - 1);

        float s[kMmaTiles][kKeyTiles][4];
        if (active) {
#pragma unroll
            for (int mt = 0; mt < kMmaTiles; ++mt) {
#pragma unroll
                for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
                }
            }
            const uint32_t k_frag_base = smem_addr(k_tile + kb_row * kLd + kb_col);
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                uint32_t qa[kMmaTiles][4];
#pragma unroll
                for (int mt = 0; mt < kMmaTiles; ++mt) {
                    ldmatrix_x4(qa[mt], q_frag_base + (mt * 16 * kLd + kk * 16) * sizeof(bf16));
                }
#pragma unroll
                for (int np = 0; np < kKeyTiles / 2; ++np) {
                    uint32_t kb[4];
                    ldmatrix_x4(kb, k_frag_base + (np * 16 * kLd + kk * 16) * sizeof(bf16));
#pragma unroll
                    for (int mt = 0; mt < kMmaTiles; ++mt) {
                        mma_bf16(s[mt][2 * np], qa[mt], kb[0], kb[1]);
                        mma_bf16(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
                    }
                }
            }

            // Mask only tiles that cross the sequence end or this warp's diagonal.
            const bool past_end = k0 + BC > seq;
            const bool on_diagonal = causal && k0 + BC - 1 > warp_row0;
            if (past_end || on_diagonal) {
#pragma unroll
                for (int mt = 0; mt < kMmaTiles; ++mt) {
#pragma unroll
                    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int row = warp_row0 + mt * 16 + quad_row + (e / 2) * 8;
                            const int key = k0 + nt * 8 + quad_col * 2 + (e % 2);
                            if (key >= seq || (causal && key > row)) s[mt][nt][e] = -INFINITY;
                        }
                    }
                }
            }

            // Online softmax. Element e of a C fragment belongs to row half h = e / 2.
#pragma unroll
            for (int mt = 0; mt < kMmaTiles; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float tile_max = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < kKeyTiles; ++nt) {
                        tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
                    }
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
                    const float new_max = fmaxf(row_max[mt][h], tile_max);
                    // Only a row with no visible key so far keeps -inf; shift by 0 then.
                    const float shift = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
                    const float alpha = fast_exp2(fmaf(row_max[mt][h], scale_log2, -shift));
                    row_max[mt][h] = new_max;
                    float sum = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
                        for (int e = 2 * h; e < 2 * h + 2; ++e) {
                            s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], scale_log2, -shift));
                            sum += s[mt][nt][e];
                        }
                    }
                    row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
#pragma unroll
                    for (int nd = 0; nd < kDimTiles; ++nd) {
                        acc[mt][nd][2 * h] *= alpha;
                        acc[mt][nd][2 * h + 1] *= alpha;
                    }
                }
            }
        }

        // Now the newest group is K(t+1), so V(t) has landed; the barrier publishes it and
        // tells us every warp has finished with V(t-1)'s buffer.
        cp_async_wait<1>();
        __syncthreads();
        if (t + 1 < num_kv_tiles) {
            load_tile<D>(v_s + (1 - stage) * BC * kLd, vh, k0 + BC, BC, seq);
        }
        cp_async_commit();

        if (active) {
            const uint32_t v_frag_base = smem_addr(v_tile + vb_row * kLd + vb_col);
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk) {
                // The C fragments of key tiles 2kk and 2kk+1 are the A fragment of k-step kk.
                uint32_t pa[kMmaTiles][4];
#pragma unroll
                for (int mt = 0; mt < kMmaTiles; ++mt) {
                    pa[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < kDimTiles / 2; ++dp) {
                    uint32_t vb[4];
                    ldmatrix_x4_trans(vb, v_frag_base + (kk * 16 * kLd + dp * 16) * sizeof(bf16));
#pragma unroll
                    for (int mt = 0; mt < kMmaTiles; ++mt) {
                        mma_bf16(acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
                        mma_bf16(acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();  // leave no copy in flight when the block exits

    // Normalise by the full row sum (the 4 lanes of a quad hold its parts) and store.
#pragma unroll
    for (int mt = 0; mt < kMmaTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float total = row_sum[mt][h];
            total += __shfl_xor_sync(kFullMask, total, 1);
            total += __shfl_xor_sync(kFullMask, total, 2);
            const float inv = 1.0f / total;
            const int row = warp_row0 + mt * 16 + quad_row + h * 8;
            if (row < seq) {
                bf16* out = o + head + static_cast<size_t>(row) * D + quad_col * 2;
#pragma unroll
                for (int nd = 0; nd < kDimTiles; ++nd) {
                    *reinterpret_cast<__nv_bfloat162*>(out + nd * 8) = __floats2bfloat162_rn(
                        acc[mt][nd][2 * h] * inv, acc[mt][nd][2 * h + 1] * inv);
                }
            }
        }
    }
}

template <int D, int BC>
void launch(const bf16* q, const bf16* k, const bf16* v, bf16* o, int bh, int seq, int causal) {
    const auto kernel = flash_attention_bf16_kernel<D, BC>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(Layout<D, BC>::kBytes));
    const dim3 grid((seq + kBlockRows - 1) / kBlockRows, bh);
    kernel<<<grid, kThreads, Layout<D, BC>::kBytes>>>(q, k, v, o, seq, causal);
}

}  // namespace

extern "C" void attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, __nv_bfloat16* o, int bh, int seq,
                               int dim, int causal) {
    if (bh <= 0 || seq <= 0) return;
    if (dim == 64) {
        launch<64, 64>(q, k, v, o, bh, seq, causal);
    } else if (dim == 128) {
        launch<128, 32>(q, k, v, o, bh, seq, causal);
    } else {
        std::fprintf(stderr, "attention_bf16: dim must be 64 or 128, got %d\n", dim);
    }
}
