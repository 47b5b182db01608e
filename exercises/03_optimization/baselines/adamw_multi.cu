// Naive baseline: copy the pointers and sizes to the host (which waits for the GPU), then one
// launch of a simple fused AdamW kernel per tensor, one thread per element.
#include <cmath>
#include <cstdint>
#include <vector>

__global__ void adamw_one(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, float bias_correction1,
                          float bias_correction2_sqrt) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
    p[i] = p[i] * (1.0f - lr * weight_decay) - lr / bias_correction1 * mi / denom;
}

extern "C" void adamw_multi(float* const* p, const float* const* g, float* const* m, float* const* v,
                            const int64_t* sizes, int count, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int step) {
    std::vector<float*> ps(count), ms(count), vs(count);
    std::vector<const float*> gs(count);
    std::vector<int64_t> ns(count);
    cudaMemcpy(ps.data(), p, count * sizeof(float*), cudaMemcpyDeviceToHost);
    cudaMemcpy(gs.data(), g, count * sizeof(float*), cudaMemcpyDeviceToHost);
    cudaMemcpy(ms.data(), m, count * sizeof(float*), cudaMemcpyDeviceToHost);
    cudaMemcpy(vs.data(), v, count * sizeof(float*), cudaMemcpyDeviceToHost);
    cudaMemcpy(ns.data(), sizes, count * sizeof(int64_t), cudaMemcpyDeviceToHost);
    const float bias_correction1 = (float)(1.0 - std::pow((double)beta1, step));
    const float bias_correction2_sqrt = (float)std::sqrt(1.0 - std::pow((double)beta2, step));
    for (int t = 0; t < count; ++t)
        adamw_one<<<(unsigned)((ns[t] + 255) / 256), 256>>>(ps[t], gs[t], ms[t], vs[t], ns[t], lr, beta1, beta2,
                                                             eps, weight_decay, bias_correction1,
                                                             bias_correction2_sqrt);
}
