// Reference solution: SGD with momentum in one pass at close to the device's copy bandwidth.
//
// 20 bytes per parameter and 6 FLOPs: pure data movement. Each thread loads kUnroll float4 of p,
// g and buf (spaced a block apart, so every warp-wide load is 512 contiguous bytes) before it
// computes and stores any of them: twelve independent 16-byte loads in flight per thread.
#include <stdint.h>

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

struct Hyper {
    float lr, momentum, weight_decay;
};

__device__ __forceinline__ void step(float& p, float g, float& buf, const Hyper& h) {
    buf = fmaf(h.momentum, buf, fmaf(h.weight_decay, p, g));
    p = fmaf(-h.lr, buf, p);
}

__device__ __forceinline__ void step4(float4& p, const float4& g, float4& buf, const Hyper& h) {
    step(p.x, g.x, buf.x, h);
    step(p.y, g.y, buf.y, h);
    step(p.z, g.z, buf.z, h);
    step(p.w, g.w, buf.w, h);
}

__global__ void __launch_bounds__(kThreads)
sgd_vec4(float4* __restrict__ p, const float4* __restrict__ g, float4* __restrict__ buf, int64_t n4, Hyper h) {
    const int64_t base = (int64_t)blockIdx.x * (kThreads * kUnroll) + threadIdx.x;
    float4 pv[kUnroll], gv[kUnroll], bv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + (int64_t)u * kThreads;
        if (i < n4) { pv[u] = p[i]; gv[u] = g[i]; bv[u] = buf[i]; }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + (int64_t)u * kThreads;
        if (i < n4) {
            step4(pv[u], gv[u], bv[u], h);
            p[i] = pv[u];
            buf[i] = bv[u];
        }
    }
}

// The last n % 4 parameters, and all of them when a pointer is not 16-byte aligned.
__global__ void sgd_scalar(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                           int64_t begin, int64_t n, Hyper h) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pi = p[i], bi = buf[i];
        step(pi, g[i], bi, h);
        p[i] = pi;
        buf[i] = bi;
    }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

extern "C" void sgd_momentum(float* p, const float* g, float* buf, int64_t n, float lr, float momentum,
                             float weight_decay) {
    if (n <= 0) return;
    const Hyper h{lr, momentum, weight_decay};
    int64_t done = 0;
    if (aligned16(p) && aligned16(g) && aligned16(buf)) {
        const int64_t n4 = n / 4;
        if (n4 > 0) {
            const int64_t per_block = (int64_t)kThreads * kUnroll;
            sgd_vec4<<<(unsigned)((n4 + per_block - 1) / per_block), kThreads>>>(
                reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(buf),
                n4, h);
        }
        done = n4 * 4;
    }
    if (done < n) {
        const int64_t rest = n - done;
        const int64_t blocks = (rest + 255) / 256;
        sgd_scalar<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(p, g, buf, done, n, h);
    }
}
