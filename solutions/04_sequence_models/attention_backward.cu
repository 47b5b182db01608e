// Reference solution: attention's backward pass in fp32 on the FMA units, flash-attention-2
// style: P is never stored, it is recomputed tile by tile.
//
// Kernel 1, statistics (one block per 64 query rows): the forward pass's score loop without its
// P v product. It streams the key tiles, keeps each row's running max m and sum l (the online
// softmax), and writes the row's log-sum-exp in base 2, L = m * c + log2(l) with c =
// log2(e) / sqrt(dim), so that later P = exp2(s * c - L) exactly, with no running max. It
// also writes delta = rowsum(dO * o) and zeroes its rows of dq, which kernel 2 adds into.
//
// Kernel 2, gradients (one block per 64 keys): keeps its k and v tile in shared memory and its
// dK and dV accumulators in registers, and walks over the query tiles (causal: only those at
// or after its keys, the heaviest blocks first). Per query tile, with q, dO, L and delta in
// shared memory:
//   S = q k^T and dP = dO v^T       two 64 x 64 products over dim, one pass over d
//   P = exp2(S c - L), dS = P (dP - delta)          into shared memory (they are needed
//                                                    transposed by the next products)
//   dV += P^T dO, dK += dS^T q      over the 64 queries
//   dQ += dS k                      over the 64 keys, added into dq with float4 atomics
// and at the end writes dK / sqrt(dim) and dV. Five products of 64 x 64 x dim per tile pair,
// the sixth (S in kernel 1) is what knowing only o costs.
//
// Work split, as attention.cu: 256 threads as a 16 x 16 grid (ty, tx). In S and dP thread
// (ty, tx) owns query rows ty*4 .. ty*4+3 and keys tx, tx+16, tx+32, tx+48 (float4 reads
// along d: 8 shared loads feed 64 FMAs); in dV and dK it owns key rows ty*4 .. ty*4+3 and
// columns tx*4 .. tx*4+3 (+64 for dim 128); in dQ query rows ty*4 .. +3 and the same
// columns. Shared-memory rows are padded by 4 floats, so the 8 threads of a quarter-warp that
// read 8 rows of k at one column hit 8 different groups of 4 banks. No TF32: every product is
// an fp32 FMA.

#include <cmath>
#include <cstdio>

#include <cuda_runtime.h>

namespace {

constexpr int kTile = 64;       // query rows and keys per tile
constexpr int kThreads = 256;
constexpr int kPad = 4;
constexpr int kLdP = kTile + kPad;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int src_bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros instead
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Rows first .. first+63 of a [seq][D] matrix into a padded shared tile; rows past the end are
// zeros (finite: masked scores stay clean, and zero rows add nothing).
template <int D>
__device__ __forceinline__ void load_tile(float* tile, const float* src, int first, int seq) {
    constexpr int kChunksPerRow = D / 4;
    for (int chunk = threadIdx.x; chunk < kTile * kChunksPerRow; chunk += kThreads) {
        const int r = chunk / kChunksPerRow;
        const int c = (chunk % kChunksPerRow) * 4;
        const bool valid = first + r < seq;
        const float* g = valid ? src + static_cast<size_t>(first + r) * D + c : src;
        cp_async_16(tile + r * (D + kPad) + c, g, valid);
    }
}

// s[i][j] += a[ty*4+i] . b[tx+16j] over d, both tiles [64][D + kPad] in shared memory.
template <int D>
__device__ __forceinline__ void tile_scores(float (&s)[4][4], const float* a, const float* b, int ty, int tx) {
    constexpr int kLd = D + kPad;
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
        float4 av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = *reinterpret_cast<const float4*>(a + (ty * 4 + i) * kLd + d);
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = *reinterpret_cast<const float4*>(b + (tx + 16 * j) * kLd + d);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                s[i][j] = fmaf(av[i].x, bv[j].x, s[i][j]);
                s[i][j] = fmaf(av[i].y, bv[j].y, s[i][j]);
                s[i][j] = fmaf(av[i].z, bv[j].z, s[i][j]);
                s[i][j] = fmaf(av[i].w, bv[j].w, s[i][j]);
            }
        }
    }
}

// ------------------------------------------------------------------ kernel 1: statistics

template <int D>
struct StatsSmem {
    static constexpr int kLd = D + kPad;
    static constexpr int kQ = 0;
    static constexpr int kK = kQ + kTile * kLd;     // two buffers: the next key tile loads meanwhile
    static constexpr int kFloats = kK + 2 * kTile * kLd;
    static constexpr size_t kBytes = kFloats * sizeof(float);
};

template <int D>
__global__ void __launch_bounds__(kThreads)
    statistics_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ o,
                      const float* __restrict__ dO, float* __restrict__ dq, float* __restrict__ lse2,
                      float* __restrict__ delta, int seq, int causal, float c) {
    constexpr int kLd = StatsSmem<D>::kLd;
    constexpr int kGroups = D / 64;
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    float* q_s = smem + StatsSmem<D>::kQ;
    float* k_s = smem + StatsSmem<D>::kK;

    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int q_tile = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;   // long causal rows first
    const int q0 = q_tile * kTile;
    const size_t head = static_cast<size_t>(blockIdx.y) * seq;
    const float* qh = q + head * D;
    const float* kh = k + head * D;

    const int kv_end = causal ? min(seq, q0 + kTile) : seq;
    const int tiles = (kv_end + kTile - 1) / kTile;
    load_tile<D>(q_s, qh, q0, seq);
    load_tile<D>(k_s, kh, 0, seq);
    cp_async_commit();

    // While the tiles load: delta = rowsum(dO * o) for this thread's rows, and zeros into dq.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = q0 + ty * 4 + i;
        float part = 0.0f;
        if (row < seq) {
            const size_t at = (head + row) * D + tx * 4;
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                const float4 a = __ldg(reinterpret_cast<const float4*>(dO + at + 64 * g));
                const float4 b = __ldg(reinterpret_cast<const float4*>(o + at + 64 * g));
                part = fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, part))));
                *reinterpret_cast<float4*>(dq + at + 64 * g) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
#pragma unroll
        for (int offset = 8; offset > 0; offset /= 2) part += __shfl_xor_sync(kFullMask, part, offset);
        if (tx == 0 && row < seq) delta[head + row] = part;
    }

    float row_max[4], row_sum[4];   // row_sum: this thread's share, reduced at the end
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
    }
    for (int t = 0; t < tiles; ++t) {
        const int k0 = t * kTile;
        cp_async_wait_all();
        __syncthreads();   // key tile t has landed, and everyone is done with tile t - 1's buffer
        if (t + 1 < tiles) {
            load_tile<D>(k_s + ((t + 1) % 2) * kTile * kLd, kh, k0 + kTile, seq);
            cp_async_commit();
        }
        float s[4][4] = {};
        tile_scores<D>(s, q_s, k_s + (t % 2) * kTile * kLd, ty, tx);
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
            // A row that has seen only masked keys keeps max -inf: use 0, no -inf - -inf.
            const float shift = new_max == -INFINITY ? 0.0f : new_max * c;
            float sum = row_sum[i] * exp2f(fmaf(row_max[i], c, -shift));
#pragma unroll
            for (int j = 0; j < 4; ++j) sum += exp2f(fmaf(s[i][j], c, -shift));
            row_max[i] = new_max;
            row_sum[i] = sum;
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        // Every share is measured from the same running max (it is the whole row's): add them up.
        float total = row_sum[i];
#pragma unroll
        for (int offset = 8; offset > 0; offset /= 2) total += __shfl_xor_sync(kFullMask, total, offset);
        const int row = q0 + ty * 4 + i;
        if (tx == 0 && row < seq) lse2[head + row] = fmaf(row_max[i], c, log2f(total));
    }
}

// ------------------------------------------------------------------ kernel 2: dK, dV and dQ

template <int D>
struct GradSmem {
    static constexpr int kLd = D + kPad;
    static constexpr int kK = 0;
    static constexpr int kV = kK + kTile * kLd;
    static constexpr int kQ = kV + kTile * kLd;
    static constexpr int kDO = kQ + kTile * kLd;
    static constexpr int kP = kDO + kTile * kLd;
    static constexpr int kDS = kP + kTile * kLdP;
    static constexpr int kL = kDS + kTile * kLdP;
    static constexpr int kDelta = kL + kTile;
    static constexpr int kFloats = kDelta + kTile;
    static constexpr size_t kBytes = kFloats * sizeof(float);
};

template <int D>
__global__ void __launch_bounds__(kThreads, D == 64 ? 2 : 1)
    gradients_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                     const float* __restrict__ dO, const float* __restrict__ lse2,
                     const float* __restrict__ delta, float* __restrict__ dq, float* __restrict__ dk,
                     float* __restrict__ dv, int seq, int causal, float c, float scale) {
    constexpr int kLd = GradSmem<D>::kLd;
    constexpr int kGroups = D / 64;
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    float* k_s = smem + GradSmem<D>::kK;
    float* v_s = smem + GradSmem<D>::kV;
    float* q_s = smem + GradSmem<D>::kQ;
    float* do_s = smem + GradSmem<D>::kDO;
    float* p_s = smem + GradSmem<D>::kP;
    float* ds_s = smem + GradSmem<D>::kDS;
    float* l_s = smem + GradSmem<D>::kL;
    float* delta_s = smem + GradSmem<D>::kDelta;

    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int k0 = blockIdx.x * kTile;   // causal: low key tiles see the most queries, and start first
    const size_t head = static_cast<size_t>(blockIdx.y) * seq;

    load_tile<D>(k_s, k + head * D, k0, seq);
    load_tile<D>(v_s, v + head * D, k0, seq);

    float acc_dk[4][4 * kGroups], acc_dv[4][4 * kGroups];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int n = 0; n < 4 * kGroups; ++n) acc_dk[i][n] = acc_dv[i][n] = 0.0f;
    }

    const int q_tiles = (seq + kTile - 1) / kTile;
    for (int qt = causal ? blockIdx.x : 0; qt < q_tiles; ++qt) {
        const int q0 = qt * kTile;
        load_tile<D>(q_s, q + head * D, q0, seq);
        load_tile<D>(do_s, dO + head * D, q0, seq);
        cp_async_commit();
        if (threadIdx.x < kTile) {
            const int row = q0 + threadIdx.x;
            l_s[threadIdx.x] = row < seq ? __ldg(lse2 + head + row) : 0.0f;
            delta_s[threadIdx.x] = row < seq ? __ldg(delta + head + row) : 0.0f;
        }
        cp_async_wait_all();
        __syncthreads();   // q, dO, L, delta (and, the first time, k and v) are in shared memory

        // S and dP for queries ty*4+i and keys tx+16j, then P and dS into shared memory.
        {
            float s[4][4] = {}, dp[4][4] = {};
            tile_scores<D>(s, q_s, k_s, ty, tx);
            tile_scores<D>(dp, do_s, v_s, ty, tx);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = ty * 4 + i;
                const int row = q0 + r;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int key = k0 + tx + 16 * j;
                    const bool seen = row < seq && key < seq && !(causal && key > row);
                    const float p = seen ? exp2f(fmaf(s[i][j], c, -l_s[r])) : 0.0f;
                    p_s[r * kLdP + tx + 16 * j] = p;
                    ds_s[r * kLdP + tx + 16 * j] = p * (dp[i][j] - delta_s[r]);
                }
            }
        }
        __syncthreads();

        // dV[key][n] += sum_r P[r][key] dO[r][n] and dK[key][n] += sum_r dS[r][key] q[r][n],
        // keys ty*4+i, columns tx*4 + 64g + e.
#pragma unroll 2
        for (int r = 0; r < kTile; ++r) {
            const float4 pa = *reinterpret_cast<const float4*>(p_s + r * kLdP + ty * 4);
            const float4 sa = *reinterpret_cast<const float4*>(ds_s + r * kLdP + ty * 4);
            const float pk[4] = {pa.x, pa.y, pa.z, pa.w};
            const float sk[4] = {sa.x, sa.y, sa.z, sa.w};
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                const float4 gv = *reinterpret_cast<const float4*>(do_s + r * kLd + tx * 4 + 64 * g);
                const float4 qv = *reinterpret_cast<const float4*>(q_s + r * kLd + tx * 4 + 64 * g);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc_dv[i][4 * g + 0] = fmaf(pk[i], gv.x, acc_dv[i][4 * g + 0]);
                    acc_dv[i][4 * g + 1] = fmaf(pk[i], gv.y, acc_dv[i][4 * g + 1]);
                    acc_dv[i][4 * g + 2] = fmaf(pk[i], gv.z, acc_dv[i][4 * g + 2]);
                    acc_dv[i][4 * g + 3] = fmaf(pk[i], gv.w, acc_dv[i][4 * g + 3]);
                    acc_dk[i][4 * g + 0] = fmaf(sk[i], qv.x, acc_dk[i][4 * g + 0]);
                    acc_dk[i][4 * g + 1] = fmaf(sk[i], qv.y, acc_dk[i][4 * g + 1]);
                    acc_dk[i][4 * g + 2] = fmaf(sk[i], qv.z, acc_dk[i][4 * g + 2]);
                    acc_dk[i][4 * g + 3] = fmaf(sk[i], qv.w, acc_dk[i][4 * g + 3]);
                }
            }
        }

        // dQ[row][n] += sum_key dS[row][key] k[key][n], rows ty*4+i, columns tx*4 + 64g + e.
        {
            float acc_dq[4][4 * kGroups] = {};
#pragma unroll 2
            for (int kk = 0; kk < kTile; kk += 4) {
                float sr[4][4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float4 a = *reinterpret_cast<const float4*>(ds_s + (ty * 4 + i) * kLdP + kk);
                    sr[i][0] = a.x;
                    sr[i][1] = a.y;
                    sr[i][2] = a.z;
                    sr[i][3] = a.w;
                }
#pragma unroll
                for (int g = 0; g < kGroups; ++g) {
#pragma unroll
                    for (int cc = 0; cc < 4; ++cc) {
                        const float4 kv = *reinterpret_cast<const float4*>(k_s + (kk + cc) * kLd + tx * 4 + 64 * g);
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            acc_dq[i][4 * g + 0] = fmaf(sr[i][cc], kv.x, acc_dq[i][4 * g + 0]);
                            acc_dq[i][4 * g + 1] = fmaf(sr[i][cc], kv.y, acc_dq[i][4 * g + 1]);
                            acc_dq[i][4 * g + 2] = fmaf(sr[i][cc], kv.z, acc_dq[i][4 * g + 2]);
                            acc_dq[i][4 * g + 3] = fmaf(sr[i][cc], kv.w, acc_dq[i][4 * g + 3]);
                        }
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = q0 + ty * 4 + i;
                if (row < seq) {
                    float* out = dq + (head + row) * D + tx * 4;
#pragma unroll
                    for (int g = 0; g < kGroups; ++g) {
                        atomicAdd(reinterpret_cast<float4*>(out + 64 * g),
                                  make_float4(acc_dq[i][4 * g] * scale, acc_dq[i][4 * g + 1] * scale,
                                              acc_dq[i][4 * g + 2] * scale, acc_dq[i][4 * g + 3] * scale));
                    }
                }
            }
        }
        __syncthreads();   // everyone is done with this query tile's shared memory
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int key = k0 + ty * 4 + i;
        if (key < seq) {
            const size_t at = (head + key) * D + tx * 4;
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                *reinterpret_cast<float4*>(dk + at + 64 * g) =
                    make_float4(acc_dk[i][4 * g] * scale, acc_dk[i][4 * g + 1] * scale, acc_dk[i][4 * g + 2] * scale,
                                acc_dk[i][4 * g + 3] * scale);
                *reinterpret_cast<float4*>(dv + at + 64 * g) =
                    make_float4(acc_dv[i][4 * g], acc_dv[i][4 * g + 1], acc_dv[i][4 * g + 2], acc_dv[i][4 * g + 3]);
            }
        }
    }
}

// L and delta: two floats a query row, in memory allocated on the first call and kept.
float* workspace(size_t floats) {
    static float* buffer = nullptr;
    static size_t capacity = 0;
    if (floats > capacity) {
        cudaFree(buffer);   // waits for the GPU
        buffer = nullptr;
        if (cudaMalloc(&buffer, floats * sizeof(float)) != cudaSuccess) {
            capacity = 0;
            return nullptr;
        }
        capacity = floats;
    }
    return buffer;
}

template <int D>
void launch(const float* q, const float* k, const float* v, const float* o, const float* dO, float* dq, float* dk,
            float* dv, int bh, int seq, int causal) {
    const size_t rows = static_cast<size_t>(bh) * seq;
    float* lse2 = workspace(2 * rows);
    if (lse2 == nullptr) {
        std::fprintf(stderr, "attention_backward: cannot allocate %zu bytes of row statistics\n",
                     2 * rows * sizeof(float));
        return;
    }
    float* delta = lse2 + rows;
    const float scale = 1.0f / sqrtf(static_cast<float>(D));
    const float c = kLog2e * scale;
    const dim3 grid((seq + kTile - 1) / kTile, bh);

    const auto stats = statistics_kernel<D>;
    cudaFuncSetAttribute(stats, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(StatsSmem<D>::kBytes));
    stats<<<grid, kThreads, StatsSmem<D>::kBytes>>>(q, k, o, dO, dq, lse2, delta, seq, causal, c);

    const auto grads = gradients_kernel<D>;
    cudaFuncSetAttribute(grads, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(GradSmem<D>::kBytes));
    grads<<<grid, kThreads, GradSmem<D>::kBytes>>>(q, k, v, dO, lse2, delta, dq, dk, dv, seq, causal, c, scale);
}

}  // namespace

extern "C" void attention_backward(const float* q, const float* k, const float* v, const float* o,
                                   const float* dO, float* dq, float* dk, float* dv, int bh, int seq,
                                   int dim, int causal) {
    if (bh <= 0 || seq <= 0) return;
    if (dim == 64) {
        launch<64>(q, k, v, o, dO, dq, dk, dv, bh, seq, causal);
    } else if (dim == 128) {
        launch<128>(q, k, v, o, dO, dq, dk, dv, bh, seq, causal);
    } else {
        std::fprintf(stderr, "attention_backward: dim must be 64 or 128, got %d\n", dim);
    }
}
