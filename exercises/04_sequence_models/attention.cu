// Exercise 04, task 2: scaled dot-product attention in fp32, fused into one pass.
//
//   o = softmax(q k^T / sqrt(dim)) v      softmax along each row (one row per query)
//
// Layout: q, k, v and o are [bh][seq][dim] float32, row-major: element (b, i, d) lives at
// (b * seq + i) * dim + d. bh = batch * heads independent problems; dim is 64 or 128.
// With causal != 0, query i may only attend to keys 0..i (key j > i gets weight exactly 0).
// Sequence lengths range from 1 to 2048 and include odd ones (17, 129, 1000); one case
// multiplies the inputs by 6, which makes scores of several hundred.
//
// Contract: launch your kernels on the default stream and return; no host synchronisation
// is needed and no memory allocation should be. The grader checks o against a float64
// reference (rtol 1e-4, atol 1e-3), then times your function against a naive baseline
// (baselines/attention.cu: writes the bh x seq x seq score matrix to global memory, runs a
// softmax over it, multiplies by v) and against PyTorch's scaled_dot_product_attention, and
// reports FLOP/s: 4 * bh * seq^2 * dim (about half that when causal).
//
// Hints:
//  1. Fuse. One block owns a tile of query rows (say 64) and loops over the keys in tiles
//     (say 64 at a time), copying each tile of k and v into shared memory once for all of
//     its queries. The seq x seq score matrix never has to exist.
//  2. Online softmax per query row: keep the running max m, the running sum l and an
//     unnormalised output accumulator acc, and update them after each tile of scores as your
//     `flash_update` of section 3 of the notebook does (answer that prompt first: its check
//     tells you when the update is right); o comes out at the very end, as `flash_finalize`.
//  3. Register blocking: let each thread compute a small block of scores (e.g. 4 queries x
//     4 keys) from float4 reads of shared memory, so each value loaded feeds several FMAs.
//  4. Masks: keys at or past seq and (causal) keys after the query get score -inf. With
//     causal, key tiles entirely after a query tile can be skipped altogether.
//  5. Mind __syncthreads(): before overwriting a shared tile, every thread must be done
//     reading it; after writing it, before anyone reads it.

#include <cuda_runtime.h>

extern "C" void attention(const float* q, const float* k, const float* v, float* o, int bh,
                          int seq, int dim, int causal) {
    // TODO: launch your fused attention kernel here.
    (void)q;
    (void)k;
    (void)v;
    (void)o;
    (void)bh;
    (void)seq;
    (void)dim;
    (void)causal;
}
