// Reference solution of step 3 of the ladder of gemv_fp8: step 2 with 16-byte loads.
//
// Where every row of W and of x starts on a 16-byte boundary (K a multiple of 16, aligned bases),
// each lane reads 16 bytes of its row of W per iteration (LDG.E.128: a warp's load covers 512
// consecutive bytes), converts them two at a time (__nv_cvt_fp8x2_to_halfraw2, then to float) and
// reads the matching 16 bf16 values of each row of x as two more 16-byte loads. Any other K takes
// step 2's loop, a byte per lane.
//
// Step 2's comment, for the rest:
// Step 1, the naive baseline (baselines/gemv_fp8.cu), writes a bf16 copy of W to memory and reads
// it back with the lanes of a warp K elements apart: five bytes moved per byte of W, and badly
// coalesced. Here every byte of W is read once, straight from its e4m3 form:
//   * warp w of a block owns row n of W and computes y[m][n] for every token m (up to 16 at once,
//     in registers), so W is streamed once whatever M is;
//   * its lanes take consecutive k: one load instruction reads 32 consecutive bytes of the row;
//   * each lane converts its e4m3 value to float in a register, multiplies it by x[m][k] for every
//     m (x is small and stays in L1 and L2), then the warp sums its 32 partial sums with shuffles
//     and scales by scale[n] once.
// One byte per lane per load: a warp's load moves 32 bytes, a single sector. Step 3 makes each
// lane load 16 bytes at once.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxTokens = 16;        // rows of x per launch: their sums live in registers

// Two e4m3 values (the low byte first) as two floats.
__device__ __forceinline__ float2 e4m3_pair(unsigned two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return __half22float2(__half2(h));
}

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
gemv_rows(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale, __nv_bfloat16* y,
          int M, int N, int K) {
    const int n = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;                                // a whole warp leaves together
    const __nv_fp8_e4m3* w = W + (size_t)n * K;
    float sums[kMaxTokens] = {};
    const bool rows_16b_aligned = K % 16 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 &&
                                  reinterpret_cast<uintptr_t>(x) % 16 == 0;
    if (rows_16b_aligned) {
        for (int k = lane * 16; k < K; k += 32 * 16) {
            const uint4 bytes = *reinterpret_cast<const uint4*>(w + k);
            const unsigned words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
            float wv[16];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float2 lo = e4m3_pair(words[q] & 0xffffu), hi = e4m3_pair(words[q] >> 16);
                wv[4 * q] = lo.x;
                wv[4 * q + 1] = lo.y;
                wv[4 * q + 2] = hi.x;
                wv[4 * q + 3] = hi.y;
            }
#pragma unroll
            for (int m = 0; m < kMaxTokens; ++m) {
                if (m < M) {
                    const uint4* xm = reinterpret_cast<const uint4*>(x + (size_t)m * K + k);
                    const uint4 first = xm[0], second = xm[1];
                    const unsigned xw[8] = {first.x, first.y, first.z, first.w, second.x, second.y, second.z, second.w};
                    float partial = 0.0f;
#pragma unroll
                    for (int q = 0; q < 8; ++q) {     // a bf16 is the top half of a float
                        partial += wv[2 * q] * __uint_as_float(xw[q] << 16);
                        partial += wv[2 * q + 1] * __uint_as_float(xw[q] & 0xffff0000u);
                    }
                    sums[m] += partial;
                }
            }
        }
    } else for (int k = lane; k < K; k += warpSize) {
        const float wk = float(w[k]);
#pragma unroll
        for (int m = 0; m < kMaxTokens; ++m)
            if (m < M) sums[m] += wk * __bfloat162float(x[(size_t)m * K + k]);
    }
#pragma unroll
    for (int m = 0; m < kMaxTokens; ++m) {
        if (m < M) {
            const float total = warp_sum(sums[m]);
            if (lane == 0) y[(size_t)m * N + n] = __float2bfloat16(total * scale[n]);
        }
    }
}

}  // namespace

extern "C" void gemv_fp8(const __nv_bfloat16* x, const __nv_fp8_e4m3* W, const float* scale,
                         __nv_bfloat16* y, int M, int N, int K) {
    const unsigned blocks = (unsigned)((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
    for (int m0 = 0; m0 < M; m0 += kMaxTokens) {      // more than 16 tokens: W again per 16
        const int tokens = M - m0 < kMaxTokens ? M - m0 : kMaxTokens;
        gemv_rows<<<blocks, kWarpsPerBlock * 32>>>(x + (size_t)m0 * K, W, scale, y + (size_t)m0 * N, tokens, N, K);
    }
}
