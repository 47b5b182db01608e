// Reference solution: fused (flash-style) attention in fp32 on the ordinary FMA units.
//
// One block computes a 64-row tile of o for one (batch, head). It keeps its 64 query rows
// in shared memory and streams the keys and values through shared memory 64 at a time.
// For each key tile it computes the 64 x 64 scores, folds them into a running (online)
// softmax and accumulates P v into registers, so the seq x seq score matrix never exists:
// global memory sees q, k, v read once per query tile and o written once.
//
// Online softmax, per query row, after each key tile (m: running max, l: running sum):
//   m_new = max(m, max_j s_j)
//   alpha = exp(m - m_new)            rescales everything accumulated so far
//   l     = alpha * l + sum_j exp(s_j - m_new)
//   acc   = alpha * acc + sum_j exp(s_j - m_new) * v_j
// and o = acc / l at the end. Exponentials use exp2 with log2(e) folded into the scale.
//
// Work split: 256 threads as a 16 x 16 grid (ty, tx). Thread (ty, tx) owns
//   score rows ty*4 .. ty*4+3 and score columns tx, tx+16, tx+32, tx+48,
//   output rows ty*4 .. ty*4+3 and output columns tx*4 .. tx*4+3 (+64 when dim = 128).
// Each thread computes a 4 x 4 block of scores from float4 reads of q and k rows
// (register blocking: 8 shared-memory loads feed 64 FMAs), and a 4 x 4*(dim/64) block of
// output. The 16 threads sharing a row sit in one half-warp, so row max and row sum are
// four shuffles. P goes through shared memory because a thread's output columns need the
// whole row of P, not just the 4 columns of it that the thread computed.
//
// Shared-memory rows are padded by 4 floats: the 8 threads of a quarter-warp reading
// rows tx .. tx+7 of k at the same column then hit 8 different groups of 4 banks.
//
// Copies into shared memory use cp.async, so that loading the value tile overlaps the
// score computation and loading the next key tile overlaps the P v product.

#include <cmath>
#include <cstdio>

#include <cuda_runtime.h>

namespace {

constexpr int kBlockRows = 64;  // query rows per block
constexpr int kBlockCols = 64;  // keys per tile
constexpr int kThreads = 256;
constexpr int kPad = 4;  // floats of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

template <int D>
struct Smem {
    static constexpr int kLd = D + kPad;            // row stride of q, k, v tiles
    static constexpr int kLdP = kBlockCols + kPad;  // row stride of the P tile
    static constexpr int kQ = 0;
    static constexpr int kK = kQ + kBlockRows * kLd;
    static constexpr int kV = kK + kBlockCols * kLd;
    static constexpr int kP = kV + kBlockCols * kLd;
    static constexpr int kFloats = kP + kBlockRows * kLdP;
    static constexpr size_t kBytes = kFloats * sizeof(float);
};

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int src_bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros instead
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Copy rows first .. first+rows-1 of a [seq][D] matrix into a padded shared tile.
// Rows past the end of the sequence become zeros: finite, so masked scores stay clean and
// 0-weight value rows contribute exactly 0.
template <int D>
__device__ __forceinline__ void load_tile(float* tile, const float* src, int first, int rows,
                                          int seq) {
    constexpr int kChunksPerRow = D / 4;
    for (int chunk = threadIdx.x; chunk < rows * kChunksPerRow; chunk += kThreads) {
        const int r = chunk / kChunksPerRow;
        const int c = (chunk % kChunksPerRow) * 4;
        const bool valid = first + r < seq;
        const float* g = valid ? src + static_cast<size_t>(first + r) * D + c : src;
        cp_async_16(tile + r * Smem<D>::kLd + c, g, valid);
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_attention_fp32_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                const float* __restrict__ v, float* __restrict__ o, int seq,
                                int causal) {
    constexpr int kLd = Smem<D>::kLd;
    constexpr int kLdP = Smem<D>::kLdP;
    constexpr int kGroups = D / 64;  // float4 column groups of 64 per thread in the output
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    float* q_s = smem + Smem<D>::kQ;
    float* k_s = smem + Smem<D>::kK;
    float* v_s = smem + Smem<D>::kV;
    float* p_s = smem + Smem<D>::kP;

    const int tx = threadIdx.x % 16;
    const int ty = threadIdx.x / 16;
    // Causal tiles further down have more keys to visit: start those first.
    const int q_tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = q_tile * kBlockRows;
    const size_t head = static_cast<size_t>(blockIdx.y) * seq * D;
    const float* qh = q + head;
    const float* kh = k + head;
    const float* vh = v + head;

    // Keys this tile can see: all of them, or (causal) up to its last query row.
    const int kv_end = causal ? min(seq, q0 + kBlockRows) : seq;
    const int num_kv_tiles = (kv_end + kBlockCols - 1) / kBlockCols;
    const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));

    float acc[4][4 * kGroups];
    float row_max[4];
    float row_sum[4];  // this thread's share of the row sum; reduced once at the end
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
#pragma unroll
        for (int n = 0; n < 4 * kGroups; ++n) acc[i][n] = 0.0f;
    }

    load_tile<D>(q_s, qh, q0, kBlockRows, seq);
    load_tile<D>(k_s, kh, 0, kBlockCols, seq);
    cp_async_commit();

    for (int t = 0; t < num_kv_tiles; ++t) {
        const int k0 = t * kBlockCols;
        // K(t) has landed for everyone, and everyone is done with V(t-1) and P(t-1).
        cp_async_wait_all();
        __syncthreads();
        load_tile<D>(v_s, vh, k0, kBlockCols, seq);
        cp_async_commit();

        // Scores: s[i][j] = q[ty*4+i] . k[tx+16j].
        float s[4][4] = {};
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 qa[4];
            float4 kb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qa[i] = *reinterpret_cast<const float4*>(q_s + (ty * 4 + i) * kLd + d);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                kb[j] = *reinterpret_cast<const float4*>(k_s + (tx + 16 * j) * kLd + d);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    s[i][j] = fmaf(qa[i].x, kb[j].x, s[i][j]);
                    s[i][j] = fmaf(qa[i].y, kb[j].y, s[i][j]);
                    s[i][j] = fmaf(qa[i].z, kb[j].z, s[i][j]);
                    s[i][j] = fmaf(qa[i].w, kb[j].w, s[i][j]);
                }
            }
        }

        // Mask, then fold this tile into the running softmax and write P to shared memory.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = q0 + ty * 4 + i;
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int key = k0 + tx + 16 * j;
                if (key >= seq || (causal && key > row)) s[i][j] = -INFINITY;
                tile_max = fmaxf(tile_max, s[i][j]);
            }
#pragma unroll
            for (int offset = 8; offset > 0; offset /= 2) {
                tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, offset));
            }
            const float new_max = fmaxf(row_max[i], tile_max);
            // A row that has seen only masked keys keeps max -inf; use 0 so no -inf - -inf.
            const float shift = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
            const float alpha = exp2f(fmaf(row_max[i], scale_log2, -shift));
            row_max[i] = new_max;
            row_sum[i] *= alpha;
#pragma unroll
            for (int n = 0; n < 4 * kGroups; ++n) acc[i][n] *= alpha;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float p = exp2f(fmaf(s[i][j], scale_log2, -shift));
                row_sum[i] += p;
                p_s[(ty * 4 + i) * kLdP + tx + 16 * j] = p;
            }
        }

        // V(t) and all of P have landed, and everyone is done reading K(t).
        cp_async_wait_all();
        __syncthreads();
        if (t + 1 < num_kv_tiles) {
            load_tile<D>(k_s, kh, k0 + kBlockCols, kBlockCols, seq);
            cp_async_commit();
        }

        // acc[i][g*4+e] += sum_c P[ty*4+i][c] * v[c][tx*4 + 64g + e].
#pragma unroll 2
        for (int c = 0; c < kBlockCols; c += 4) {
            float4 pa[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                pa[i] = *reinterpret_cast<const float4*>(p_s + (ty * 4 + i) * kLdP + c);
            }
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                float4 vb[4];
#pragma unroll
                for (int cc = 0; cc < 4; ++cc) {
                    vb[cc] = *reinterpret_cast<const float4*>(v_s + (c + cc) * kLd + tx * 4 +
                                                              64 * g);
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float pc[4] = {pa[i].x, pa[i].y, pa[i].z, pa[i].w};
#pragma unroll
                    for (int cc = 0; cc < 4; ++cc) {
                        acc[i][4 * g + 0] = fmaf(pc[cc], vb[cc].x, acc[i][4 * g + 0]);
                        acc[i][4 * g + 1] = fmaf(pc[cc], vb[cc].y, acc[i][4 * g + 1]);
                        acc[i][4 * g + 2] = fmaf(pc[cc], vb[cc].z, acc[i][4 * g + 2]);
                        acc[i][4 * g + 3] = fmaf(pc[cc], vb[cc].w, acc[i][4 * g + 3]);
                    }
                }
            }
        }
    }

    // Finish the row sums across the 16 threads of each row, normalise, store.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float total = row_sum[i];
#pragma unroll
        for (int offset = 8; offset > 0; offset /= 2) {
            total += __shfl_xor_sync(kFullMask, total, offset);
        }
        const float inv = 1.0f / total;
        const int row = q0 + ty * 4 + i;
        if (row < seq) {
            float* out = o + head + static_cast<size_t>(row) * D + tx * 4;
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                *reinterpret_cast<float4*>(out + 64 * g) =
                    make_float4(acc[i][4 * g] * inv, acc[i][4 * g + 1] * inv,
                                acc[i][4 * g + 2] * inv, acc[i][4 * g + 3] * inv);
            }
        }
    }
}

template <int D>
void launch(const float* q, const float* k, const float* v, float* o, int bh, int seq,
            int causal) {
    const auto kernel = flash_attention_fp32_kernel<D>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(Smem<D>::kBytes));
    const dim3 grid((seq + kBlockRows - 1) / kBlockRows, bh);
    kernel<<<grid, kThreads, Smem<D>::kBytes>>>(q, k, v, o, seq, causal);
}

}  // namespace

extern "C" void attention(const float* q, const float* k, const float* v, float* o, int bh,
                          int seq, int dim, int causal) {
    if (bh <= 0 || seq <= 0) return;
    if (dim == 64) {
        launch<64>(q, k, v, o, bh, seq, causal);
    } else if (dim == 128) {
        launch<128>(q, k, v, o, bh, seq, causal);
    } else {
        std::fprintf(stderr, "attention: dim must be 64 or 128, got %d\n", dim);
    }
}
