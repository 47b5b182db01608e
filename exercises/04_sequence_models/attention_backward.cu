// Exercise 04, task 7: the backward pass of attention (task 2), in fp32.
//
// Forward: S = q k^T / sqrt(dim) (-inf above the diagonal when causal), P = softmax(S) row by
// row, o = P v. Given dO = dL/do, compute dq, dk and dv: the chain rule back through P v, the
// softmax and q k^T. Section 5a of the notebook gives dS from dP and asks you to find delta from
// dO and o (the prompt `attention_softmax_backward`), section 5b counts the products: answer
// them first.
//
// Layout: every tensor is [bh][seq][dim] float32, row-major, as in attention.cu; dim is 64 or
// 128; o is the forward pass's output for these q, k and v. The benchmarks are GPT-2 small's
// (96 heads x 1024 x 64, causal), attention's (32 x 2048 x 64) and wider heads (16 x 2048 x 128,
// causal).
//
// Contract: launch your kernels on the default stream and return; no host synchronisation
// is needed. Scratch memory (a few floats per query row) may be allocated on the first call
// and kept. The grader checks dq, dk and dv against a float64 reference (rtol 1e-4, atol
// 2e-4), then times your function against a naive baseline (baselines/attention_backward.cu:
// the bh x seq x seq matrices P and dS in global memory) and PyTorch's
// scaled_dot_product_attention forward and backward, and reports FLOP/s: the backward pass's
// FLOPs as section 5b counts them (about half when causal).
//
// Hints:
//  1. Never store P: recompute it tile by tile as the forward pass computed it. With each
//     query row's log-sum-exp L[i] = m[i] + log l[i] known, P[i][j] = exp(S[i][j] - L[i]):
//     no running max, no rescaling. You are given o, not L: a first kernel finds L (the
//     forward's online softmax without the P v product) and delta, as your
//     `delta_from_output` computes it.
//  2. Then one block per tile of keys (say 64): it keeps its k and v tile and its dK, dV
//     accumulators on chip and walks over the query tiles (causal: only those at or after
//     its keys). Per query tile: S and dP (two 64 x 64 products over dim), P and dS, then the
//     products that add this tile's part to dV, dK and dQ.
//  3. dq gets contributions from every key tile: add them into dq with atomicAdd (dq must be
//     zeroed first: the first kernel can do that) or compute dq in a separate pass.
//  4. Register blocking as in attention.cu: each thread a 4 x 4 block of S and dP, and a
//     4 x 4 (x dim / 64) block of each accumulator. P and dS go through shared memory
//     because the products that follow need them transposed.

#include <cuda_runtime.h>

extern "C" void attention_backward(const float* q, const float* k, const float* v, const float* o,
                                   const float* dO, float* dq, float* dk, float* dv, int bh, int seq,
                                   int dim, int causal) {
    // TODO: launch your kernels here.
    (void)q;
    (void)k;
    (void)v;
    (void)o;
    (void)dO;
    (void)dq;
    (void)dk;
    (void)dv;
    (void)bh;
    (void)seq;
    (void)dim;
    (void)causal;
}
