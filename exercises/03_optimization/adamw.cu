// Exercise 03 · adamw: one step of AdamW (decoupled weight decay), in place.
//
// PyTorch's torch.optim.AdamW, for every parameter i < n, with step >= 1:
//
//     p[i] *= 1 - lr * weight_decay                       (the decay does not go through Adam)
//     m[i]  = beta1 * m[i] + (1 - beta1) * g[i]           (first moment)
//     v[i]  = beta2 * v[i] + (1 - beta2) * g[i]^2         (second moment)
//     m_hat = m[i] / (1 - beta1^step)                     (bias corrections: section 1 of the
//     v_hat = v[i] / (1 - beta2^step)                      notebook derives them)
//     p[i] -= lr * m_hat / (sqrt(v_hat) + eps)            (eps outside the square root)
//
// p, m and v are updated in place. The grader calls your function for steps 1, 2, 3 and 10000 on
// the same state with fresh gradients, and compares p, m and v with a float64 reference after
// each call. n can be any size from 1 to 2^26 (a 64-bit integer).
//
// 28 bytes per parameter (read p, g, m, v; write p, m, v) against about 16 FLOPs: memory-bound.
// The naive version runs PyTorch's for-loop recipe, eight kernels and a temporary through memory.
// In order of payoff:
//   1. One kernel, one pass over the four arrays.
//   2. The bias corrections depend on step only: compute them once on the host, in double, and
//      pass them (or lr / (1 - beta1^step) and 1 / sqrt(1 - beta2^step)) as kernel arguments.
//   3. float4 accesses, a scalar tail, a grid-stride loop.
#include <cstdint>

extern "C" void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int step) {
    // Your kernel launch goes here.
}
