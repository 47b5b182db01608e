// The AdamW update of one parameter and four of them, shared by adamw.cu and adamw_multi.cu.
//
// The bias corrections depend on the step only, so the host computes them once, in double:
// step_size = lr / (1 - beta1^step) and inv_root_bc2 = 1 / sqrt(1 - beta2^step). Then
//     p = p (1 - lr wd) - step_size m / (sqrt(v) inv_root_bc2 + eps),
// which is PyTorch's m_hat / (sqrt(v_hat) + eps) with the divisions by the corrections moved out.
#pragma once
#include <cmath>

struct AdamHyper {
    float beta1, beta2, eps;
    float decay;          // 1 - lr * weight_decay
    float step_size;      // lr / (1 - beta1^step)
    float inv_root_bc2;   // 1 / sqrt(1 - beta2^step)
};

inline AdamHyper adam_hyper(float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
    const double bc1 = 1.0 - std::pow((double)beta1, step);
    const double bc2 = 1.0 - std::pow((double)beta2, step);
    return AdamHyper{beta1, beta2, eps, 1.0f - lr * weight_decay, (float)(lr / bc1), (float)(1.0 / std::sqrt(bc2))};
}

__device__ __forceinline__ void adam_update(float& p, float g, float& m, float& v, const AdamHyper& h) {
    m = fmaf(h.beta1, m, (1.0f - h.beta1) * g);
    v = fmaf(h.beta2, v, (1.0f - h.beta2) * g * g);
    const float denom = fmaf(sqrtf(v), h.inv_root_bc2, h.eps);
    p = fmaf(p, h.decay, -h.step_size * (m / denom));
}

__device__ __forceinline__ void adam_update4(float4& p, const float4& g, float4& m, float4& v, const AdamHyper& h) {
    adam_update(p.x, g.x, m.x, v.x, h);
    adam_update(p.y, g.y, m.y, v.y, h);
    adam_update(p.z, g.z, m.z, v.z, h);
    adam_update(p.w, g.w, m.w, v.w, h);
}
