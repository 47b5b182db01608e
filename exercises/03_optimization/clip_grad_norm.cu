// Exercise 03 · clip_grad_norm: clip a gradient to a maximum global norm, in place.
//
// torch.nn.utils.clip_grad_norm_ on one flat gradient of n elements:
//
//     total        = sqrt(sum_i g[i]^2)                    (the L2 norm)
//     g[i]        *= min(1, max_norm / (total + 1e-6))     (only shrinks, never grows)
//     total_norm[0] = total                                 (a one-element output)
//
// The norm must be complete before the first element is scaled, so the data crosses the memory
// bus at least twice: read for the norm, then read and write to scale, 12 bytes per element.
// n runs from 1 to 2^26. The norm is checked to 1e-5 (relative), which every summation order meets
// as long as no float32 sum adds more than 2^15 (32,768) squares one after the other: keep each
// thread's running sum, and each chain of float32 atomicAdds into one address, that short, and add
// the partial sums in a tree (or accumulate in double, as the naive version does). Why: a square
// added to a large running sum is rounded to the sum's last place, and most squares are small, so
// more of them round down than up. One float32 sum over 2^17 squares comes out about 1e-5 low, one
// over all 2^26 about 10% low.
//
// The naive version adds every square with its own atomicAdd to one address: 67 million atomics
// on one memory location queue up one after the other. In order of payoff:
//   1. A real reduction: each thread sums many elements in a register, each block reduces its
//      threads in shared memory (or with warp shuffles), then one value per block is combined.
//   2. Combine the per-block values without a third pass: atomicAdd of one partial per block, or
//      the last block to finish (a counter and __threadfence) adds them all up.
//   3. The scaling kernel reads the norm from device memory; float4 accesses in both kernels.
#include <cstdint>

extern "C" void clip_grad_norm(float* g, int64_t n, float max_norm, float* total_norm) {
    // Your kernel launches go here.
}
