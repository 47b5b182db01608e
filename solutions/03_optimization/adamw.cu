// Reference solution: AdamW in one pass at close to the device's copy bandwidth.
//
// 28 bytes per parameter and about 16 FLOPs: the kernel is data movement. Each thread loads
// kUnroll float4 of p, g, m and v (a block apart, so warp-wide loads are 512 contiguous bytes)
// before it computes and stores any of them; the bias corrections come from the host.
#include <stdint.h>

#include "adamw_step.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;

__global__ void __launch_bounds__(kThreads)
adamw_vec4(float4* __restrict__ p, const float4* __restrict__ g, float4* __restrict__ m, float4* __restrict__ v,
           int64_t n4, AdamHyper h) {
    const int64_t base = (int64_t)blockIdx.x * (kThreads * kUnroll) + threadIdx.x;
    float4 pv[kUnroll], gv[kUnroll], mv[kUnroll], vv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + (int64_t)u * kThreads;
        if (i < n4) { pv[u] = p[i]; gv[u] = g[i]; mv[u] = m[i]; vv[u] = v[i]; }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + (int64_t)u * kThreads;
        if (i < n4) {
            adam_update4(pv[u], gv[u], mv[u], vv[u], h);
            p[i] = pv[u];
            m[i] = mv[u];
            v[i] = vv[u];
        }
    }
}

__global__ void adamw_scalar(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t begin, int64_t n, AdamHyper h) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pi = p[i], mi = m[i], vi = v[i];
        adam_update(pi, g[i], mi, vi, h);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

extern "C" void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int step) {
    if (n <= 0) return;
    const AdamHyper h = adam_hyper(lr, beta1, beta2, eps, weight_decay, step);
    int64_t done = 0;
    if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
        const int64_t n4 = n / 4;
        if (n4 > 0) {
            const int64_t per_block = (int64_t)kThreads * kUnroll;
            adamw_vec4<<<(unsigned)((n4 + per_block - 1) / per_block), kThreads>>>(
                reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(m),
                reinterpret_cast<float4*>(v), n4, h);
        }
        done = n4 * 4;
    }
    if (done < n) {
        const int64_t rest = n - done;
        const int64_t blocks = (rest + 255) / 256;
        adamw_scalar<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(p, g, m, v, done, n, h);
    }
}
