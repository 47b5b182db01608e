// Exercise 03 · adamw: one step of AdamW (decoupled weight decay), in place.
//
// For every parameter i < n, with step >= 1: exactly what PyTorch's torch.optim.AdamW does, which
// is what your `adamw_step` of section 2 of the notebook computes, here in float32. In its order:
//
//     the decay shrinks p[i] directly (it does not go through the moving averages);
//     m[i] and v[i] become the moving averages of g[i] and g[i]^2 (section 1's recursions);
//     m_hat and v_hat are m[i] and v[i] divided by their bias corrections, the c(beta1, step) and
//         c(beta2, step) you derive in section 1;
//     p[i] -= lr * m_hat / (sqrt(v_hat) + eps)            (eps outside the square root: section 3)
//
// Answer sections 1 and 2 first: their checks tell you when your formulas are PyTorch's.
// p, m and v are updated in place. The grader calls your function for steps 1, 2, 3 and 10000 on
// the same state with fresh gradients, and compares p, m and v with a float64 reference after
// each call. n can be any size from 1 to 2^26 (a 64-bit integer).
//
// A few FLOPs against the bytes of reading p, g, m, v and writing p, m, v (section 5 counts
// them): memory-bound. The naive version runs PyTorch's for-loop recipe, eight kernels and a
// temporary through memory. In order of payoff:
//   1. One kernel, one pass over the four arrays.
//   2. The bias corrections depend on step only: compute them once on the host, in double, and
//      pass them (or lr divided by the first and one over the square root of the second) as
//      kernel arguments.
//   3. float4 accesses, a scalar tail, a grid-stride loop.
#include <cstdint>

extern "C" void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int step) {
    // Your kernel launch goes here.
}
