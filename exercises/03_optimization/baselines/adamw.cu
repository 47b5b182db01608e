// Naive baseline: AdamW as PyTorch's for-loop implementation runs it, one kernel per tensor
// operation, each a pass through global memory, with the denominator in a temporary:
//   p.mul_(1 - lr wd); m.lerp_(g, 1 - b1); v.mul_(b2).addcmul_(g, g, 1 - b2);
//   denom = (v.sqrt() / sqrt(bc2)).add_(eps); p.addcdiv_(m, denom, -lr / bc1)
#include <cmath>
#include <cstdint>

// The temporary lives in a buffer kept between calls, as PyTorch's caching allocator keeps the
// memory of its temporaries: the naive version pays for the passes, not for allocations.
static float* scratch(int64_t n) {
    static float* buffer = nullptr;
    static int64_t capacity = 0;
    if (n > capacity) {
        cudaFree(buffer);
        cudaMalloc(&buffer, n * sizeof(float));
        capacity = n;
    }
    return buffer;
}

#define ELEMENTWISE(name, params, body)                                          \
    __global__ void name params {                                                \
        int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;              \
        if (i < n) { body; }                                                     \
    }

ELEMENTWISE(scale, (float* x, int64_t n, float a), x[i] *= a)
ELEMENTWISE(lerp, (float* m, const float* g, int64_t n, float w), m[i] += w * (g[i] - m[i]))
ELEMENTWISE(add_square, (float* v, const float* g, int64_t n, float w), v[i] += w * g[i] * g[i])
ELEMENTWISE(square_root, (const float* v, float* d, int64_t n), d[i] = sqrtf(v[i]))
ELEMENTWISE(divide, (float* d, int64_t n, float a), d[i] /= a)
ELEMENTWISE(add, (float* d, int64_t n, float a), d[i] += a)
ELEMENTWISE(add_quotient, (float* p, const float* m, const float* d, int64_t n, float a), p[i] += a * m[i] / d[i])

extern "C" void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int step) {
    const double bias_correction1 = 1.0 - std::pow((double)beta1, step);
    const double bias_correction2 = 1.0 - std::pow((double)beta2, step);
    float* d = scratch(n);
    const unsigned blocks = (unsigned)((n + 255) / 256);
    scale<<<blocks, 256>>>(p, n, 1.0f - lr * weight_decay);
    lerp<<<blocks, 256>>>(m, g, n, 1.0f - beta1);
    scale<<<blocks, 256>>>(v, n, beta2);
    add_square<<<blocks, 256>>>(v, g, n, 1.0f - beta2);
    square_root<<<blocks, 256>>>(v, d, n);
    divide<<<blocks, 256>>>(d, n, (float)std::sqrt(bias_correction2));
    add<<<blocks, 256>>>(d, n, eps);
    add_quotient<<<blocks, 256>>>(p, m, d, n, (float)(-lr / bias_correction1));
}
