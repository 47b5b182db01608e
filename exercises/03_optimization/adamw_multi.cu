// Exercise 03 · adamw_multi: the AdamW step of adamw.cu over every parameter tensor of a model.
//
// p, g, m and v are device arrays of `count` device pointers (tensor t has sizes[t] elements, and
// sizes is a device array too): p[t], m[t] and v[t] are updated in place exactly as in adamw.cu.
// The grader's lists: GPT-2 small's 148 tensors (124,439,808 values, from 768 to 38,597,376 each),
// one tensor of one value, and 500 tiny tensors (1 to 64 values) where launches are what counts.
//
// A launch costs a few microseconds whatever it does; the naive version launches once per tensor.
// PyTorch's answer is "multi-tensor apply": one launch whose blocks each take a chunk of some
// tensor. In order of payoff:
//   1. One launch (two at most) for the whole list. The sizes live on the device: let each block
//      find its work there instead of copying them to the host, which would wait for the GPU.
//   2. Cut every tensor into chunks of a few thousand elements; block b handles chunks b,
//      b + gridDim.x, ... Finding the tensor of chunk c is a binary search over the running sum of
//      chunk counts, which every block can compute into shared memory from sizes.
//   3. Inside a chunk, what adamw.cu does: float4 where the chunk is 16-byte aligned, a tail.
#include <cstdint>

extern "C" void adamw_multi(float* const* p, const float* const* g, float* const* m, float* const* v,
                            const int64_t* sizes, int count, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int step) {
    // Your kernel launches go here.
}
