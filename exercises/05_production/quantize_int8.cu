// Symmetric per-row INT8 quantization, the first step of a W8A8 layer (activations quantized on the
// fly, once per token):
//
//     scale[r] = max_c |x[r][c]| / 127          (1 for a row of zeros)
//     q[r][c]  = round-to-nearest(x[r][c] / scale[r]), clamped to [-127, 127]
//
// x: rows x cols float32, row-major. q: rows x cols int8. scale: rows float32.
//
// What the grader checks: q exactly, except at a tie: where x / scale lies within 1e-6 of a
// half-way point, either neighbour is accepted. So ties may go to even (the reference, like
// __float2int_rn and rintf) or away from zero (roundf): both pass, and dividing in float32, which
// may land a hair either side of a tie, passes too. scale is checked to 1e-6.
// Cases include a row of one element, rows of zeros, outlier channels 50 times larger than the
// rest, odd lengths and rows of 300,007 elements; it is timed on 8192 x 8192 and 32768 x 768.
//
// It is memory-bound: 5 bytes an element. Hints, in order of payoff:
//   * One block (or one warp, for short rows) per row: a reduction for the row's maximum
//     (warp shuffles, then shared memory), then a second pass over the row, which is now in L1 or
//     L2, to write q. Every load of a warp should be 32 consecutive floats, or float4s.
//   * __float2int_rn rounds to nearest in one instruction; a multiply by 127 / amax is cheaper
//     than a divide, and the tie allowance covers its rounding.
//   * Write q four bytes at a time (char4) where you can.
#include <cstdint>

extern "C" void quantize_int8(const float* x, int8_t* q, float* scale, int rows, int cols) {
    // Your kernel launch goes here.
}
