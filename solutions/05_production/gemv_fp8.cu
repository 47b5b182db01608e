// Weight-only FP8 GEMV for decoding: y[m][n] = scale[n] * sum over k of x[m][k] W[n][k], with
// W read from DRAM exactly once, 16 bytes per load.
//
// A warp owns R rows of W and runs along K: each lane takes 16 consecutive e4m3 of each row
// (one 16-byte load per row), converts them two at a time in hardware (e4m3x2 -> f16x2 -> float),
// and multiplies them by the same 16 k of every token's x (two 16-byte loads per token, from L1:
// x is a few KB to 256 KB and every warp of the GPU reads it). The M x R sums are reduced across
// the warp with shuffles at the end; the scale is applied once per row. The number of tokens is a
// template parameter so that the sums stay in registers.
//
// At M = 16 each byte of W takes 16 FMAs: the FP32 units would limit the rate, not DRAM. So from
// two tokens on, the products run on the tensor cores (gemv_fp8_mma below); one token stays on the
// FP32 units, which keep up with DRAM there.
//
// Both kernels give a block more rows of W when N leaves enough blocks to fill the GPU (at least
// four blocks a multiprocessor for one token, two for the tensor cores): fewer, larger blocks read
// x fewer times. Measured on the H200 at N = 28672: 97% of copy instead of 92% (M = 1), 78% instead
// of 73% (M = 16).
//
// Its speed at every benchmark size, against copy bandwidth and PyTorch, is in the README's table
// of exercise 05. What limits it at 16 tokens, and the designs tried against that, each measured,
// are in gemv_fp8.notes.md beside this file.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 16;                        // e4m3 per lane per row per step

__device__ __forceinline__ float2 e4m3x2_to_float2(unsigned short v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(v, __NV_E4M3);
    return __half22float2(__half2(h));
}

// 16 consecutive bf16 (two 16-byte loads) as floats, in order.
__device__ __forceinline__ void bf16x16_to_float(const uint4& lo, const uint4& hi, float (&xv)[kVec]) {
    const __nv_bfloat162* h0 = reinterpret_cast<const __nv_bfloat162*>(&lo);
    const __nv_bfloat162* h1 = reinterpret_cast<const __nv_bfloat162*>(&hi);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 a = __bfloat1622float2(h0[j]), b = __bfloat1622float2(h1[j]);
        xv[2 * j] = a.x;
        xv[2 * j + 1] = a.y;
        xv[8 + 2 * j] = b.x;
        xv[8 + 2 * j + 1] = b.y;
    }
}

template <int MT, int R>
__global__ void __launch_bounds__(kThreads, 1)
gemv_fp8_rows(const __nv_bfloat16* __restrict__ x, const uint8_t* __restrict__ W, const float* __restrict__ scale,
              __nv_bfloat16* __restrict__ y, int N, int K) {
    const int lane = threadIdx.x & 31;
    const int n0 = ((blockIdx.x * kThreads + threadIdx.x) >> 5) * R;
    if (n0 >= N) return;

    float acc[MT][R];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    // The scales are read now, not after the loop: their latency then overlaps the loads of W
    // instead of adding to the kernel's end, when nothing else is left in flight.
    float sc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) sc[r] = scale[min(n0 + r, N - 1)];

    for (int k = lane * kVec; k < K; k += 32 * kVec) {
        float w[R][kVec];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            uint4 raw = make_uint4(0, 0, 0, 0);
            if (n0 + r < N) raw = __ldg(reinterpret_cast<const uint4*>(W + (size_t)(n0 + r) * K + k));
            const unsigned short* pairs = reinterpret_cast<const unsigned short*>(&raw);
#pragma unroll
            for (int j = 0; j < kVec / 2; ++j) {
                const float2 f = e4m3x2_to_float2(pairs[j]);
                w[r][2 * j] = f.x;
                w[r][2 * j + 1] = f.y;
            }
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const uint4* xp = reinterpret_cast<const uint4*>(x + (size_t)m * K + k);
            float xv[kVec];
            bf16x16_to_float(__ldg(xp), __ldg(xp + 1), xv);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int j = 0; j < kVec; ++j) acc[m][r] = fmaf(xv[j], w[r][j], acc[m][r]);
        }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1)
                acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], offset);
    // Lane (m * R + r) % 32 writes y[m][n0 + r]: the writes are spread over the lanes.
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (lane == (m * R + r) % 32 && n0 + r < N)
                y[(size_t)m * N + n0 + r] = __float2bfloat16(acc[m][r] * sc[r]);
}

// One token when N leaves too few rows for four a warp: the same order as gemv_fp8_rows<1, 2>, but a
// warp loads four steps of its two rows at once (2 KB of each row, 8 loads a lane), then sums them.
// A step covers 512 k of every row; the lanes past K load zeros and add nothing. Rows past N read row
// N - 1, whose sums are never written.
//
// At one token the arithmetic per byte is the largest (each e4m3 costs a conversion and an FMA, with
// few loads to share it), so a warp that loads one step and then sums it leaves DRAM idle while it
// works. Measured at N = 8192, % of copy:
// - one step at a time, the next step's loads issued before this one's sums and "w = next" at the
//   end of the loop: 77 to 78%. The compiler copies the registers that the next loads write into,
//   and a copy waits for its load, so the warp stalls at the end of every step all the same;
// - the same with two register sets that trade roles (no copies): 78.7 and 77.5% in two runs;
// - four steps loaded together (this kernel): 80.4 and 78.9% in the same two runs, and 79.8 against
//   76.8% for the first form in a third. A pass that only reads, in the same order, gains the same
//   way with the steps it loads together: 79, 82, 84.5 and 83% for 1, 2, 4 and 8;
// - keeping more in flight measured worse: the next four steps loaded during these (78%), three or
//   four steps in a ring of register sets (74 to 75%).
// At other shapes it runs (one token, N x K = 4096 x 4096, 4096 x 14336, 14336 x 4096, 1024 x 8192,
// 16384 x 8192, 8192 x 28672) it measured 1 to 9 points of copy above the first form, in one run.
// The 4 of __launch_bounds__ holds the kernel to 64 registers (it takes them all, without spilling):
// four blocks a multiprocessor, so that every block of an 8192-row W runs at once.
template <int R>
__global__ void __launch_bounds__(kThreads, 4)
gemv_fp8_one(const __nv_bfloat16* __restrict__ x, const uint8_t* __restrict__ W, const float* __restrict__ scale,
             __nv_bfloat16* __restrict__ y, int N, int K) {
    constexpr int kBatch = 4;                           // steps loaded together
    constexpr int kStep = 32 * kVec;                    // k a step covers
    const int lane = threadIdx.x & 31;
    const int n0 = ((blockIdx.x * kThreads + threadIdx.x) >> 5) * R;
    if (n0 >= N) return;
    float acc[R], sc[R];
    const uint8_t* wlane[R];                            // this lane's 16 bytes of each row, first step
#pragma unroll
    for (int r = 0; r < R; ++r) {
        acc[r] = 0.0f;
        sc[r] = scale[min(n0 + r, N - 1)];
        wlane[r] = W + (size_t)min(n0 + r, N - 1) * K + lane * kVec;
    }
    const int batches = (K + kBatch * kStep - 1) / (kBatch * kStep);
    for (int b = 0; b < batches; ++b) {
        uint4 w[kBatch][R];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int k0 = (b * kBatch + u) * kStep;
            const bool in = k0 + lane * kVec < K;
#pragma unroll
            for (int r = 0; r < R; ++r)
                w[u][r] = in ? __ldg(reinterpret_cast<const uint4*>(wlane[r] + k0)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int k = (b * kBatch + u) * kStep + lane * kVec;
            const bool in = k < K;
            const uint4* xp = reinterpret_cast<const uint4*>(x + k);
            float xv[kVec];
            bf16x16_to_float(in ? __ldg(xp) : make_uint4(0, 0, 0, 0), in ? __ldg(xp + 1) : make_uint4(0, 0, 0, 0), xv);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned short* pairs = reinterpret_cast<const unsigned short*>(&w[u][r]);
#pragma unroll
                for (int j = 0; j < kVec / 2; ++j) {
                    const float2 f = e4m3x2_to_float2(pairs[j]);
                    acc[r] = fmaf(xv[2 * j], f.x, acc[r]);
                    acc[r] = fmaf(xv[2 * j + 1], f.y, acc[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (lane == r && n0 + r < N) y[n0 + r] = __float2bfloat16(acc[r] * sc[r]);
}

// 2 to 16 tokens on the tensor cores: mma.sync m16n8k16 (bf16 in, float32 sums) with 16 rows of
// W as the A operand and up to 8 tokens of x as B. A block of 8 warps owns T tiles of 16 rows of W;
// its warps take turns along K in steps of 64, each warp reading its k of x once for all T tiles,
// and add their sums in shared memory at the end.
//
// The sum over k does not care about the order of the k, so each lane reads the 16 bytes of W it
// is given (k = 64 s + 16 t .. + 15 for lane t of a quad) and the 4 instructions of a step each take
// 4 of those k per lane: logical k (2t, 2t + 1) of the fragment is physical k 64 s + 16 t + 4 j +
// (0, 1), and (2t + 8, 2t + 9) is + (2, 3). B uses the same map, so x is read 16 values per lane
// too, and every byte of W arrives in one 16-byte load.

// W for the tensor cores, read once: past L1 (nothing reuses it there), and with a hint that the L2
// fetch the whole 256-byte block around each miss. A warp's load covers 64 bytes of each of its 16
// rows, and the rest of each 128-byte line comes from the next warp's step a moment later; fetching
// the block at once suits DRAM better. Measured at M = 16 in one run of both: 72% of copy instead of
// 69% at N = 8192, 85% instead of 80% at N = 28672. (The one-token kernel reads 512 bytes of a row
// per load; there the hint cost 4 points at N = 28672, so it reads W plainly.)
__device__ __forceinline__ uint4 load_w_stream(const uint8_t* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(unsigned short v) {
    const float2 f = e4m3x2_to_float2(v);
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);     // exact: e4m3 has 3 mantissa bits
    return *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

constexpr int kMmaWarps = kThreads / 32;
constexpr int kStepK = 64;

// The 1 of __launch_bounds__ matters: with it ptxas issues every load of a step before the step's
// first conversion; without it, it held back the loads of x until the tensor cores needed them,
// and DRAM saw fewer bytes in flight (measured: 55% of copy at M = 16, N = 8192).
template <int TT, int T>     // TT token tiles of 8 (1 for M <= 8, 2 for M <= 16), T row tiles of 16
__global__ void __launch_bounds__(kThreads, 1)
gemv_fp8_mma(const __nv_bfloat16* __restrict__ x, const uint8_t* __restrict__ W, const float* __restrict__ scale,
             __nv_bfloat16* __restrict__ y, int M, int N, int K) {
    constexpr int kRows = 16 * T;
    __shared__ float partial[kMmaWarps][kRows][8 * TT + 1];      // + 1: the final sums read without bank conflicts
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int nb = blockIdx.x * kRows;
    // Rows past N read row N - 1 instead: a row of A reaches only its own row of the sums, and those
    // are never written.
    const uint8_t* w[T][2];
#pragma unroll
    for (int i = 0; i < T; ++i) {
        w[i][0] = W + (size_t)min(nb + 16 * i + g, N - 1) * K + 16 * t;
        w[i][1] = W + (size_t)min(nb + 16 * i + g + 8, N - 1) * K + 16 * t;
    }
    // Tokens past M read token M - 1 the same way, so that no load depends on a condition.
    const __nv_bfloat16* xs[TT];
#pragma unroll
    for (int tt = 0; tt < TT; ++tt) xs[tt] = x + (size_t)min(tt * 8 + g, M - 1) * K + 16 * t;
    float c[T][TT][4];
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
        for (int tt = 0; tt < TT; ++tt) c[i][tt][0] = c[i][tt][1] = c[i][tt][2] = c[i][tt][3] = 0.0f;

    // The scale of the one row this thread finishes (below: row e % kRows for e = threadIdx.x + j
    // kThreads, the same row for every j since kRows divides kThreads), read before the loop, not
    // after it. Measured: 73% of copy instead of 72% at N = 8192 in two runs of both, no change at
    // N = 28672.
    static_assert(kThreads % kRows == 0, "each thread finishes rows of one index");
    const float row_scale = scale[min(nb + (int)threadIdx.x % kRows, N - 1)];
    const int steps = K / kStepK;
    for (int s = warp; s < steps; s += kMmaWarps) {
        const int k = s * kStepK;
        uint4 raw[T][2];
#pragma unroll
        for (int i = 0; i < T; ++i) {
            raw[i][0] = load_w_stream(w[i][0] + k);
            raw[i][1] = load_w_stream(w[i][1] + k);
        }
        uint4 xv[TT][2];
#pragma unroll
        for (int tt = 0; tt < TT; ++tt) {
            const uint4* p = reinterpret_cast<const uint4*>(xs[tt] + k);
            xv[tt][0] = __ldg(p);
            xv[tt][1] = __ldg(p + 1);
        }
#pragma unroll
        for (int i = 0; i < T; ++i) {
            const unsigned short* lo = reinterpret_cast<const unsigned short*>(&raw[i][0]);
            const unsigned short* hi = reinterpret_cast<const unsigned short*>(&raw[i][1]);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint32_t a0 = e4m3x2_to_bf16x2(lo[2 * j]), a2 = e4m3x2_to_bf16x2(lo[2 * j + 1]);
                const uint32_t a1 = e4m3x2_to_bf16x2(hi[2 * j]), a3 = e4m3x2_to_bf16x2(hi[2 * j + 1]);
#pragma unroll
                for (int tt = 0; tt < TT; ++tt) {
                    const uint32_t* words = reinterpret_cast<const uint32_t*>(&xv[tt][0]);   // 8 bf16 pairs
                    mma_bf16(c[i][tt], a0, a1, a2, a3, words[2 * j], words[2 * j + 1]);
                }
            }
        }
    }
    // c[i][tt]: rows 16 i + g (0, 1) and 16 i + g + 8 (2, 3), tokens tt * 8 + 2t (+ 1).
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
        for (int tt = 0; tt < TT; ++tt) {
            partial[warp][16 * i + g][tt * 8 + 2 * t] = c[i][tt][0];
            partial[warp][16 * i + g][tt * 8 + 2 * t + 1] = c[i][tt][1];
            partial[warp][16 * i + g + 8][tt * 8 + 2 * t] = c[i][tt][2];
            partial[warp][16 * i + g + 8][tt * 8 + 2 * t + 1] = c[i][tt][3];
        }
    __syncthreads();
    // Consecutive threads take consecutive rows of one token: the writes of y are coalesced.
    for (int e = threadIdx.x; e < kRows * 8 * TT; e += kThreads) {
        const int token = e / kRows, r = e % kRows;
        if (nb + r >= N || token >= M) continue;
        float sum = 0.0f;
#pragma unroll
        for (int v = 0; v < kMmaWarps; ++v) sum += partial[v][r][token];
        y[(size_t)token * N + nb + r] = __float2bfloat16(sum * row_scale);
    }
}

// Any K and alignment: a warp per row of W and token, element by element.
__global__ void gemv_fp8_any(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale,
                             __nv_bfloat16* y, int M, int N, int K) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= M * N) return;
    const int m = warp / N, n = warp % N;
    float acc = 0.0f;
    for (int k = lane; k < K; k += 32)
        acc = fmaf(__bfloat162float(x[(size_t)m * K + k]), float(W[(size_t)n * K + k]), acc);
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) y[(size_t)m * N + n] = __float2bfloat16(acc * scale[n]);
}

int sm_count() {
    static int sms = 0;
    if (sms == 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    return sms;
}

// Blocks for N rows when each warp of a block owns R of them (the CUDA-core kernels).
template <int R>
unsigned row_blocks(int N) {
    constexpr int kRowsPerBlock = (kThreads / 32) * R;
    return (N + kRowsPerBlock - 1) / kRowsPerBlock;
}

template <int MT, int R>
void launch_rows(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale, __nv_bfloat16* y, int N,
                 int K) {
    gemv_fp8_rows<MT, R><<<row_blocks<R>(N), kThreads>>>(x, reinterpret_cast<const uint8_t*>(W), scale, y, N, K);
}

// One token: four rows a warp when that still leaves four blocks a multiprocessor; else two, four
// steps loaded at a time (gemv_fp8_one). (The four-row kernel with the next step's loads in flight took
// registers that left two blocks a multiprocessor instead of four, and measured 90% of copy at
// N = 28672 against 96% without; it reaches 95 to 97% there as it is.)
void launch_one(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale, __nv_bfloat16* y, int N,
                int K) {
    if (N >= 4 * sm_count() * (kThreads / 32) * 4) {
        launch_rows<1, 4>(x, W, scale, y, N, K);
        return;
    }
    gemv_fp8_one<2><<<row_blocks<2>(N), kThreads>>>(x, reinterpret_cast<const uint8_t*>(W), scale, y, N, K);
}

// Few tokens: two rows per warp keep more of W in flight; many: four rows share each load of x.
template <int MT>
void launch(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale, __nv_bfloat16* y, int N, int K) {
    launch_rows<MT, MT <= 2 ? 2 : 4>(x, W, scale, y, N, K);
}

template <int TT>
void launch_mma(const __nv_bfloat16* x, const uint8_t* W, const float* scale, __nv_bfloat16* y, int M, int N,
                int K) {
    // Four tiles of 16 rows a block when that still leaves two blocks a multiprocessor, else one.
    if (N >= 2 * sm_count() * 64) {
        gemv_fp8_mma<TT, 4><<<(N + 63) / 64, kThreads>>>(x, W, scale, y, M, N, K);
    } else {
        gemv_fp8_mma<TT, 1><<<(N + 15) / 16, kThreads>>>(x, W, scale, y, M, N, K);
    }
}

}  // namespace

extern "C" void gemv_fp8(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale,
                         __nv_bfloat16* y, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    const bool fast = K % kVec == 0 && M <= 16 && reinterpret_cast<size_t>(W) % 16 == 0 &&
                      reinterpret_cast<size_t>(x) % 16 == 0;
    if (!fast) {
        const long long warps = (long long)M * N;
        gemv_fp8_any<<<(unsigned)((warps * 32 + kThreads - 1) / kThreads), kThreads>>>(x, W, scale, y, M, N, K);
        return;
    }
    if (M >= 2 && K % kStepK == 0) {       // the tensor cores, for every token count but one
        const uint8_t* W8 = reinterpret_cast<const uint8_t*>(W);
        if (M <= 8) launch_mma<1>(x, W8, scale, y, M, N, K);
        else launch_mma<2>(x, W8, scale, y, M, N, K);
        return;
    }
    switch (M) {
        case 1: launch_one(x, W, scale, y, N, K); break;
        case 2: launch<2>(x, W, scale, y, N, K); break;
        case 3: launch<3>(x, W, scale, y, N, K); break;
        case 4: launch<4>(x, W, scale, y, N, K); break;
        case 5: launch<5>(x, W, scale, y, N, K); break;
        case 6: launch<6>(x, W, scale, y, N, K); break;
        case 7: launch<7>(x, W, scale, y, N, K); break;
        case 8: launch<8>(x, W, scale, y, N, K); break;
        case 9: launch<9>(x, W, scale, y, N, K); break;
        case 10: launch<10>(x, W, scale, y, N, K); break;
        case 11: launch<11>(x, W, scale, y, N, K); break;
        case 12: launch<12>(x, W, scale, y, N, K); break;
        case 13: launch<13>(x, W, scale, y, N, K); break;
        case 14: launch<14>(x, W, scale, y, N, K); break;
        case 15: launch<15>(x, W, scale, y, N, K); break;
        default: launch<16>(x, W, scale, y, N, K); break;
    }
}
