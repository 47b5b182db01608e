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
// At M = 16 each byte of W takes 16 FMAs: the FP32 units then limit the rate, not DRAM. Running
// those products on the tensor cores (mma.sync with W as the 16-row operand) is the next step.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 16;                        // e4m3 per lane per row per step

__device__ __forceinline__ float2 e4m3x2_to_float2(unsigned short v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(v, __NV_E4M3);
    return __half22float2(__half2(h));
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
            const uint4 lo = __ldg(xp), hi = __ldg(xp + 1);
            const __nv_bfloat162* h0 = reinterpret_cast<const __nv_bfloat162*>(&lo);
            const __nv_bfloat162* h1 = reinterpret_cast<const __nv_bfloat162*>(&hi);
            float xv[kVec];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 a = __bfloat1622float2(h0[j]), b = __bfloat1622float2(h1[j]);
                xv[2 * j] = a.x;
                xv[2 * j + 1] = a.y;
                xv[8 + 2 * j] = b.x;
                xv[8 + 2 * j + 1] = b.y;
            }
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
                y[(size_t)m * N + n0 + r] = __float2bfloat16(acc[m][r] * scale[n0 + r]);
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

template <int MT>
void launch(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale, __nv_bfloat16* y, int N, int K) {
    // Few tokens: two rows per warp keep more of W in flight; many: four rows share each load of x.
    constexpr int R = MT <= 2 ? 2 : 4;
    const int rows_per_block = (kThreads / 32) * R;
    gemv_fp8_rows<MT, R><<<(N + rows_per_block - 1) / rows_per_block, kThreads>>>(
        x, reinterpret_cast<const uint8_t*>(W), scale, y, N, K);
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
    switch (M) {
        case 1: launch<1>(x, W, scale, y, N, K); break;
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
