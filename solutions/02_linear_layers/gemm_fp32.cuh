// The fp32 GEMM core shared by sgemm.cu, linear_forward.cu and linear_backward.cu.
//
//     C[i][j] (+)= sum over k in this block's share of K of A(i, k) B(k, j)
//
// Each operand is read in either layout, a template parameter: kAlongK when k is the contiguous
// index (A(i, k) = A[i * lda + k]: sgemm's A, nn.Linear's X and W), kAlongMN when the output
// index is (A(i, k) = A[k * lda + i]: sgemm's B, dZ^T in dW = dZ^T X). In shared memory both land
// as S[k][i], so the inner loop does not depend on the layouts.
//
// Tiling (256 threads, 128 x 128 x 8 block tiles, 8 x 8 accumulators per thread):
//   * The 8 warps form a 4 x 2 grid of 32 x 64 warp tiles; in a warp, 4 x 8 lanes (tm, tn) each
//     own rows {tm * 4 + r, 16 + tm * 4 + r} and columns {tn * 4 + c, 32 + tn * 4 + c} (r, c < 4).
//     Per k a lane reads two float4 of A (4 distinct addresses in the warp, broadcast to 8 lanes
//     each) and two float4 of B (8 distinct addresses): no bank conflicts, 4 LDS.128 per 64 FMA.
//     An 8 x 8 tile is exactly at shared memory's ridge (2 FLOP per byte at 128 bytes per clock
//     per SM): an LDS.128 returns 4 registers per lane, 4 clocks of the SM's 128 bytes per clock,
//     as long as its FMAs take. Shared memory packs the return of lanes that read the same
//     address in pairs (l and l ^ 1, or l and l ^ 2: seen on Volta and Turing, assumed here) into
//     2 clocks, so tm is taken from lane bits 1 and 4 and tn from bits 0, 2 and 3: A's loads pair
//     lanes l and l ^ 1, B's lanes l and l ^ 2, and shared memory is half busy instead of full.
//     A row of C is still written by 8 lanes as 128 contiguous bytes.
//   * Shared tiles are double-buffered and the next global tile is loaded into registers while
//     the current one is computed on: one __syncthreads per 8-deep k step. Fragments are
//     double-buffered in registers too, so the LDS of step kk + 1 overlap the FMAs of step kk,
//     and the next tile's first fragments are read right after the barrier.
//   * The main loop is one straight block: besides its 512 FFMA and 32 LDS.128 it issues only
//     the loads and stores of the next tile, one barrier and the loop's own count. Two things
//     keep tests out of it. The ragged tile of a share (its length mod BK) is its FIRST tile, which
//     starts before the share and holds zeros there; every later tile is whole and loads with no
//     test of k. And the last tile, which loads nothing further, is peeled off after the loop.
//   * A tile read along k (kAlongK) is stored transposed, each thread writing 4 scalars; rows of
//     shared memory are padded to 132 floats so those stores are free of bank conflicts
//     (thread t writes row 4 (t & 1) + j, column t >> 1: banks 16 (t & 1) + (t >> 1) + 4 j).
//   * 2 blocks per SM (<= 128 registers, 17 KB of shared memory): 16 warps to hide latency.
//   * Blocks walk the tiles in groups of 8 tile rows, so the B tiles a group reads stay in L2.
//   * Split-K: blockIdx.z takes a share of K and adds its partial tile into C with float4
//     atomics (C zeroed first). The host picks the split that fills the last wave of blocks.
//   * Edges: rows (i) past an operand's edge are redirected to row 0 (their accumulators are never
//     stored); k is tested only in the first tile; a row read along i (kAlongMN) that ends inside
//     a float4 is tested per element. Vector (16-byte) accesses need every leading dimension to
//     be a multiple of 4 (kVec); otherwise a separate instantiation moves scalars.
#pragma once

namespace gemm {

enum Layout { kAlongK, kAlongMN };

// What happens to the accumulators at the end.
enum Epilogue {
    kStore,          // C = acc
    kAtomic,         // C += acc (split-K; C zeroed beforehand)
    kBiasGelu,       // C = acc + bias[j]; Y = gelu(C) or C
    kAtomicBias,     // C += acc (+ bias[j] from the first split)
};

constexpr int BM = 128, BN = 128, BK = 8;
constexpr int kThreads = 256;
constexpr int kLds = BM + 4;        // padded row of a shared tile, in floats
constexpr int kGroupRows = 8;       // tile rows per L2-friendly group

struct Params {
    const float* A;
    const float* B;
    float* C;
    float* Y;               // kBiasGelu: gelu(C) or a copy of C
    const float* bias;      // kBiasGelu, kAtomicBias: one value per column j
    long long lda, ldb, ldc;
    int M, N, K;            // C is M x N; the sum runs over K
    int k_chunk;            // share of K per split, a multiple of BK
    int gelu;
};

__device__ __forceinline__ float gelu_erf(float z) {
    return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
}

// One operand's 128 x 8 tile: global memory -> 4 registers -> shared memory S[k][i].
//
// Rows (i) past the operand's edge only feed accumulators that are never stored, so their
// loads are redirected to row 0 rather than predicated. Only the K direction needs care: the
// first tile of a share starts `lead` elements before it (lead = (-length) mod BK) and must hold
// zeros there. So that one tile takes the checked path and every later tile loads without a test.
template <Layout L, bool kVec>
struct TileLoader {
    const float* ptr;       // this thread's 4 elements of the current tile start here
    long long step;         // from one tile to the next
    int i, k;               // where they go in the tile: S[k][i..i+3] (kAlongMN) or S[k..k+3][i]
    int room;               // kAlongMN, scalar path: elements left in the row from this thread's i

    // kt0: where the first tile starts along K (kbeg - lead, so possibly before the operand:
    // those addresses are formed but never read).
    __device__ __forceinline__ void init(const float* base, long long ld, int i0, int extent, int kt0, int tid) {
        if (L == kAlongK) {
            i = tid >> 1;
            k = (tid & 1) * 4;
            const int row = i0 + i < extent ? i0 + i : 0;
            ptr = base + (long long)row * ld + kt0 + k;
            step = BK;
            room = 4;
        } else {
            k = tid >> 5;
            i = (tid & 31) * 4;
            room = extent - i0 - i;
            // With kVec every row is a whole number of float4, so room is >= 4 or <= 0.
            const int col = (kVec && room <= 0) ? 0 : i0 + i;
            ptr = base + (long long)(kt0 + k) * ld + col;
            step = (long long)BK * ld;
        }
    }

    // The first tile, of which the first `lead` k lie before the share (0 <= lead < BK).
    __device__ __forceinline__ float4 load_first(int lead) const {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (L == kAlongK) {
            lead -= k;                            // elements of this thread's 4 before the share
            if (kVec) {
                if (lead <= 0) v = __ldg(reinterpret_cast<const float4*>(ptr));   // lead: -4, 0 or 4
            } else {
                if (lead <= 0) v.x = __ldg(ptr + 0);
                if (lead <= 1) v.y = __ldg(ptr + 1);
                if (lead <= 2) v.z = __ldg(ptr + 2);
                if (lead <= 3) v.w = __ldg(ptr + 3);
            }
        } else if (k >= lead) {
            v = load();
        }
        return v;
    }

    // A later tile: whole, inside the share.
    __device__ __forceinline__ float4 load() const {
        if (kVec) return __ldg(reinterpret_cast<const float4*>(ptr));
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (L == kAlongK) {
            v.x = __ldg(ptr + 0);
            v.y = __ldg(ptr + 1);
            v.z = __ldg(ptr + 2);
            v.w = __ldg(ptr + 3);
        } else {
            if (room > 0) v.x = __ldg(ptr + 0);
            if (room > 1) v.y = __ldg(ptr + 1);
            if (room > 2) v.z = __ldg(ptr + 2);
            if (room > 3) v.w = __ldg(ptr + 3);
        }
        return v;
    }

    __device__ __forceinline__ void advance() { ptr += step; }

    __device__ __forceinline__ void store(float (*S)[kLds], const float4& v) const {
        if (L == kAlongK) {
            S[k + 0][i] = v.x;
            S[k + 1][i] = v.y;
            S[k + 2][i] = v.z;
            S[k + 3][i] = v.w;
        } else {
            *reinterpret_cast<float4*>(&S[k][i]) = v;
        }
    }
};

template <bool kVec>
__device__ __forceinline__ void add_to(float* p, int valid, float4 v) {
#if __CUDA_ARCH__ >= 900
    if (kVec && valid >= 4) {
        atomicAdd(reinterpret_cast<float4*>(p), v);
        return;
    }
#endif
    if (valid > 0) atomicAdd(p + 0, v.x);
    if (valid > 1) atomicAdd(p + 1, v.y);
    if (valid > 2) atomicAdd(p + 2, v.z);
    if (valid > 3) atomicAdd(p + 3, v.w);
}

template <bool kVec>
__device__ __forceinline__ void store_to(float* p, int valid, float4 v) {
    if (kVec && valid >= 4) {
        *reinterpret_cast<float4*>(p) = v;
        return;
    }
    if (valid > 0) p[0] = v.x;
    if (valid > 1) p[1] = v.y;
    if (valid > 2) p[2] = v.z;
    if (valid > 3) p[3] = v.w;
}

template <Layout LA, Layout LB, bool kVec, Epilogue E>
__global__ void __launch_bounds__(kThreads, 2) gemm_kernel(const Params p) {
    __shared__ __align__(16) float As[2][BK][kLds];
    __shared__ __align__(16) float Bs[2][BK][kLds];

    // Which tile: groups of kGroupRows tile rows, column-major inside a group.
    const int tiles_m = (p.M + BM - 1) / BM;
    const int tiles_n = (p.N + BN - 1) / BN;
    const int per_group = kGroupRows * tiles_n;
    const int group = blockIdx.x / per_group;
    const int first_row = group * kGroupRows;
    const int rows_here = min(tiles_m - first_row, kGroupRows);
    const int in_group = blockIdx.x - group * per_group;
    const int m0 = (first_row + in_group % rows_here) * BM;
    const int n0 = (in_group / rows_here) * BN;

    // This block's share of K, [kbeg, kend), in tiles_k tiles; the first starts at kt0 <= kbeg.
    const int kbeg = blockIdx.z * p.k_chunk;
    const int kend = min(p.K, kbeg + p.k_chunk);
    const int tiles_k = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
    const int kt0 = kend - tiles_k * BK;

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 64;
    // Lane bits 1 and 4 pick tm, bits 0, 2 and 3 pick tn (see the header): lanes l and l ^ 1 read
    // the same A address, lanes l and l ^ 2 the same B address.
    const int tm = ((lane >> 1) & 1) | ((lane >> 3) & 2);
    const int tn = (lane & 1) | ((lane >> 1) & 6);
    const int ra = wm + tm * 4;       // this thread's rows: ra + r and ra + 16 + r
    const int cb = wn + tn * 4;       // its columns: cb + c and cb + 32 + c

    TileLoader<LA, kVec> la;
    TileLoader<LB, kVec> lb;
    la.init(p.A, p.lda, m0, p.M, kt0, tid);
    lb.init(p.B, p.ldb, n0, p.N, kt0, tid);
    float4 va, vb;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float fa[2][8], fb[2][8];
    auto load_fragments = [&](int stage, int kk, float (&a)[8], float (&b)[8]) {
        const float4 a0 = *reinterpret_cast<const float4*>(&As[stage][kk][ra]);
        const float4 a1 = *reinterpret_cast<const float4*>(&As[stage][kk][ra + 16]);
        const float4 b0 = *reinterpret_cast<const float4*>(&Bs[stage][kk][cb]);
        const float4 b1 = *reinterpret_cast<const float4*>(&Bs[stage][kk][cb + 32]);
        a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
        a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
        b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
        b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
    };
    auto fma_step = [&](const float (&a)[8], const float (&b)[8]) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    };

    if (tiles_k > 0) {
        va = la.load_first(kbeg - kt0);
        vb = lb.load_first(kbeg - kt0);
        la.store(As[0], va);
        lb.store(Bs[0], vb);
        __syncthreads();
        load_fragments(0, 0, fa[0], fb[0]);
    }

    // Every tile but the last: load the next one while computing on this one.
    int stage = 0;
    for (int t = 0; t + 1 < tiles_k; ++t) {
        la.advance();
        lb.advance();
        va = la.load();
        vb = lb.load();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk < BK - 1) {
                load_fragments(stage, kk + 1, fa[(kk + 1) & 1], fb[(kk + 1) & 1]);
            } else {
                // The other stage was last read before the previous __syncthreads: free.
                la.store(As[stage ^ 1], va);
                lb.store(Bs[stage ^ 1], vb);
                __syncthreads();
                load_fragments(stage ^ 1, 0, fa[0], fb[0]);
            }
            fma_step(fa[kk & 1], fb[kk & 1]);
        }
        stage ^= 1;
    }
    // The last tile.
    if (tiles_k > 0) {
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk < BK - 1) load_fragments(stage, kk + 1, fa[(kk + 1) & 1], fb[(kk + 1) & 1]);
            fma_step(fa[kk & 1], fb[kk & 1]);
        }
    }

    // Epilogue: row i of acc is row m0 + ra + (i & 3) + 16 (i >> 2); columns j < 4 start at
    // n0 + cb, j >= 4 at n0 + cb + 32.
    float bias[8];
    if (E == kBiasGelu || E == kAtomicBias) {
        const bool add_bias = (E == kBiasGelu) || blockIdx.z == 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int col = n0 + cb + (j & 3) + (j >> 2) * 32;
            bias[j] = (add_bias && col < p.N) ? __ldg(p.bias + col) : 0.f;
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + ra + (i & 3) + (i >> 2) * 16;
        if (row >= p.M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = n0 + cb + h * 32;
            const int valid = p.N - col;
            if (valid <= 0) continue;
            float4 v = make_float4(acc[i][4 * h + 0], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            if (E == kBiasGelu || E == kAtomicBias) {
                v.x += bias[4 * h + 0];
                v.y += bias[4 * h + 1];
                v.z += bias[4 * h + 2];
                v.w += bias[4 * h + 3];
            }
            float* out = p.C + (long long)row * p.ldc + col;
            if (E == kAtomic || E == kAtomicBias) {
                add_to<kVec>(out, valid, v);
            } else {
                store_to<kVec>(out, valid, v);
                if (E == kBiasGelu) {
                    if (p.gelu) {
                        v.x = gelu_erf(v.x);
                        v.y = gelu_erf(v.y);
                        v.z = gelu_erf(v.z);
                        v.w = gelu_erf(v.w);
                    }
                    store_to<kVec>(p.Y + (long long)row * p.ldc + col, valid, v);
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------ host side

inline int sm_count() {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return sms > 0 ? sms : 1;
}

// How many blocks share each tile's sum over K. A grid of few tiles leaves SMs idle in its last
// wave (the 144 tiles of a 3072 x 768 weight gradient fill 132 SMs x 2 blocks 55%); splitting K
// s ways multiplies the blocks by s. The split is taken only when it fills the waves better by
// more than 3%, and each share keeps at least 1024 of K so the atomics stay a small cost.
inline int choose_splits(int M, int N, int K) {
    const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    const long long slots = 2LL * sm_count();
    auto fill = [&](long long s) {
        const long long blocks = tiles * s;
        return (double)blocks / (double)(((blocks + slots - 1) / slots) * slots);
    };
    int best = 1;
    double best_fill = fill(1);
    for (int s = 2; s <= 16 && K / s >= 1024; ++s) {
        const double f = fill(s);
        if (f > best_fill + 0.03) {
            best = s;
            best_fill = f;
        }
    }
    return best;
}

// Launch C (M x N) = op(A) op(B) with K-way sums split `splits` ways. For kAtomic / kAtomicBias
// the caller has zeroed C.
template <Layout LA, Layout LB, Epilogue E>
void launch(Params p, int splits) {
    const int tiles = ((p.M + BM - 1) / BM) * ((p.N + BN - 1) / BN);
    const int per_split = (p.K + splits - 1) / splits;
    p.k_chunk = ((per_split + BK - 1) / BK) * BK;
    splits = (p.K + p.k_chunk - 1) / p.k_chunk;
    const dim3 grid(tiles, 1, splits);
    // 16-byte accesses: every row starts 16-byte aligned, a share of K read along k ends at a
    // multiple of 4 (its start is a multiple of BK) and so do its tiles, counted back from its end,
    // and a row read along i is whole float4.
    const bool vec = p.lda % 4 == 0 && p.ldb % 4 == 0 && p.ldc % 4 == 0 && p.K % 4 == 0 &&
                     (LA == kAlongK || p.M % 4 == 0) && (LB == kAlongK || p.N % 4 == 0) && p.K % 4 == 0 &&
                     reinterpret_cast<size_t>(p.A) % 16 == 0 && reinterpret_cast<size_t>(p.B) % 16 == 0 &&
                     reinterpret_cast<size_t>(p.C) % 16 == 0 &&
                     (p.Y == nullptr || reinterpret_cast<size_t>(p.Y) % 16 == 0);
    if (vec) {
        gemm_kernel<LA, LB, true, E><<<grid, kThreads>>>(p);
    } else {
        gemm_kernel<LA, LB, false, E><<<grid, kThreads>>>(p);
    }
}

}  // namespace gemm
