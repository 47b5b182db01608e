// Reference solution of step 3 of the ladder of adamw_multi: step 2, four elements at a time.
//
// The index space counts quads: tensor t contributes ceil(sizes[t] / 4) of them, and quad j of a
// tensor is its elements 4j .. 4j + 3. A thread moves a quad with one float4 load or store per
// array where the tensor's four arrays are 16-byte aligned and the quad is whole; the last quad of
// a tensor whose size is not a multiple of 4 (or an unaligned tensor) goes element by element.
//
// Step 2's comment, for the rest:
// Step 1, the naive baseline (baselines/adamw_multi.cu), copies the pointers and sizes to the host,
// which waits for the GPU, and then launches one kernel per tensor: 148 launches for GPT-2 small,
// 500 for the list of tiny tensors, each costing microseconds whatever it does. Here one launch
// does them all, and nothing is copied to the host:
//   * the tensors are laid end to end in one index space of sum(sizes) elements;
//   * every block computes from `sizes` (on the device) where each tensor ends in that space: a
//     running sum (a scan) into shared memory;
//   * a grid of a few blocks per SM strides over the index space; each thread finds the tensor of
//     its element by binary search over those ends and applies adamw.cu's update to it.
// One float of each array per thread and iteration: step 3 makes them float4.
#include <cmath>
#include <cstdint>

namespace {

constexpr int kBlock = 256;
constexpr int kSizesPerThread = 4;
constexpr int kListMax = kBlock * kSizesPerThread;   // tensors one launch takes (more: several launches)

struct Hyper {
    float beta1, beta2;        // the decay rates of the two moving averages
    float eps;
    float shrink;              // 1 - lr * weight_decay
    float lr_corrected;        // lr / (1 - beta1^step)
    float root_bc2;            // sqrt(1 - beta2^step)
};

__device__ __forceinline__ void adamw_update(float& p, float g, float& m, float& v, const Hyper& h) {
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    p = p * h.shrink - h.lr_corrected * m / (sqrtf(v) / h.root_bc2 + h.eps);
}

__device__ __forceinline__ int64_t quads(int64_t n) { return (n + 3) / 4; }

// ends[t] = quads(sizes[0]) + ... + quads(sizes[t]), for t < count, computed by the whole block.
__device__ void tensor_ends(const int64_t* sizes, int count, int64_t* ends) {
    __shared__ int64_t running[kBlock];
    const int first = threadIdx.x * kSizesPerThread;
    int64_t own = 0;                                  // this thread's kSizesPerThread tensors
    for (int t = first; t < first + kSizesPerThread && t < count; ++t) own += quads(sizes[t]);
    running[threadIdx.x] = own;
    __syncthreads();
    for (int offset = 1; offset < kBlock; offset *= 2) {   // Hillis-Steele scan: 8 rounds
        const int64_t before = threadIdx.x >= offset ? running[threadIdx.x - offset] : 0;
        __syncthreads();
        running[threadIdx.x] += before;
        __syncthreads();
    }
    int64_t end = running[threadIdx.x] - own;         // where this thread's first tensor starts
    for (int t = first; t < first + kSizesPerThread && t < count; ++t) {
        end += quads(sizes[t]);
        ends[t] = end;
    }
    __syncthreads();
}

// The tensor that holds index i of the whole list: the first t with ends[t] > i.
__device__ __forceinline__ int tensor_of(const int64_t* ends, int count, int64_t i) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ends[mid] > i) hi = mid; else lo = mid + 1;
    }
    return lo;
}

__global__ void __launch_bounds__(kBlock)
adamw_list(float* const* p, const float* const* g, float* const* m, float* const* v,
           const int64_t* sizes, int count, Hyper h) {
    __shared__ int64_t ends[kListMax];
    tensor_ends(sizes, count, ends);
    const int64_t total = ends[count - 1];
    const int64_t stride = (int64_t)gridDim.x * kBlock;
    for (int64_t i = blockIdx.x * (int64_t)kBlock + threadIdx.x; i < total; i += stride) {
        const int t = tensor_of(ends, count, i);
        const int64_t first_element = 4 * (i - (t > 0 ? ends[t - 1] : 0));
        float* pt = p[t];
        const float* gt = g[t];
        float* mt = m[t];
        float* vt = v[t];
        const bool aligned = ((reinterpret_cast<uintptr_t>(pt) | reinterpret_cast<uintptr_t>(gt) |
                               reinterpret_cast<uintptr_t>(mt) | reinterpret_cast<uintptr_t>(vt)) % 16) == 0;
        if (aligned && first_element + 4 <= sizes[t]) {
            float4 p4 = *reinterpret_cast<const float4*>(pt + first_element);
            const float4 g4 = *reinterpret_cast<const float4*>(gt + first_element);
            float4 m4 = *reinterpret_cast<const float4*>(mt + first_element);
            float4 v4 = *reinterpret_cast<const float4*>(vt + first_element);
            adamw_update(p4.x, g4.x, m4.x, v4.x, h);
            adamw_update(p4.y, g4.y, m4.y, v4.y, h);
            adamw_update(p4.z, g4.z, m4.z, v4.z, h);
            adamw_update(p4.w, g4.w, m4.w, v4.w, h);
            *reinterpret_cast<float4*>(pt + first_element) = p4;
            *reinterpret_cast<float4*>(mt + first_element) = m4;
            *reinterpret_cast<float4*>(vt + first_element) = v4;
        } else {
            const int64_t last = first_element + 4 < sizes[t] ? first_element + 4 : sizes[t];
            for (int64_t j = first_element; j < last; ++j) {
                float pj = pt[j], mj = mt[j], vj = vt[j];
                adamw_update(pj, gt[j], mj, vj, h);
                pt[j] = pj;
                mt[j] = mj;
                vt[j] = vj;
            }
        }
    }
}

// Enough blocks to fill every SM once: more would only wait for a slot.
int blocks_to_fill_the_gpu() {
    static int grid = 0;           // computed at the first call, for this process's GPU
    if (grid == 0) {
        int device_id = 0, sm_count = 0, resident = 0;
        cudaGetDevice(&device_id);
        cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device_id);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, adamw_list, kBlock, 0);
        grid = sm_count * (resident > 0 ? resident : 1);
    }
    return grid;
}

}  // namespace

extern "C" void adamw_multi(float* const* p, const float* const* g, float* const* m, float* const* v,
                            const int64_t* sizes, int count, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int step) {
    Hyper h;
    h.beta1 = beta1;
    h.beta2 = beta2;
    h.eps = eps;
    h.shrink = 1.0f - lr * weight_decay;
    h.lr_corrected = (float)(lr / (1.0 - std::pow((double)beta1, step)));
    h.root_bc2 = (float)std::sqrt(1.0 - std::pow((double)beta2, step));
    for (int first = 0; first < count; first += kListMax) {
        const int n = count - first < kListMax ? count - first : kListMax;
        adamw_list<<<blocks_to_fill_the_gpu(), kBlock>>>(p + first, g + first, m + first, v + first,
                                                         sizes + first, n, h);
    }
}
