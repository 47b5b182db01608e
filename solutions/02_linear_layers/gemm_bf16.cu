// Reference solution: C = A B^T in bf16 on Hopper tensor cores (wgmma + TMA), fp32 accumulation.
//
// A is M x K, B is N x K, both row-major with K contiguous ("K-major"); C is M x N row-major.
// This is the layout of a linear layer y = x W^T: x is A (tokens x features), W is B
// (out_features x in_features), so no transpose is ever materialised.
//
// ---------------------------------------------------------------------------------------------
// The design in one paragraph
// ---------------------------------------------------------------------------------------------
// A persistent kernel: one block of 384 threads per SM (grid = number of SMs, or of co-resident
// clusters), each block walking a sequence of 128 x BN output tiles (BN = 256, 192 or 128, picked
// per shape on the host). The 384 threads form three warpgroups of 128 with different jobs
// ("warp specialisation"):
//   * warpgroup 0, the producer: one thread issues TMA loads (cp.async.bulk.tensor) of the next
//     128 x 64 slab of A and BN x 64 slab of B into a ring of shared-memory stages. The rest of
//     the warpgroup idles; the whole warpgroup gives registers back (setmaxnreg.dec to 40).
//   * warpgroups 1 and 2, the consumers: each owns 64 rows of the tile and runs
//     wgmma.mma_async m64nBNk16 straight from shared memory (both operands through matrix
//     descriptors) into BN/2 fp32 accumulator registers per thread (128 for BN = 256), after
//     taking the producer's registers (setmaxnreg.inc to 232).
// The stages are handed back and forth with two mbarriers per stage:
//   full[s]  : the producer arms it with the byte count it expects (arrive.expect_tx), TMA
//              decrements the count as bytes land (complete_tx); the phase completes when every
//              byte has arrived. Consumers wait on it.
//   empty[s] : each consumer warp arrives once it no longer reads the stage (after
//              wgmma.wait_group proved the MMAs that read it have finished). The producer waits
//              on it before overwriting the stage.
// While the consumers run the epilogue of one tile (fp32 -> bf16, store), the producer is
// already filling the ring with the next tile's slabs, so the tensor cores restart at full
// speed. The epilogue goes registers -> shared memory (swizzled, bank-conflict free) -> TMA
// store (cp.async.bulk.tensor global <- shared), which clips the ragged edges of C by itself.
//
// One k-block (64 wide) in the life of stage s, pass p of the ring (parity p & 1):
//   producer  wait empty[s] (parity of the previous pass) -> arrive.expect_tx(full[s], A + B bytes)
//             -> TMA A slab, TMA B slab (both signal full[s])                 -> stage s + 1 ...
//   consumer  wait full[s] (parity p) -> wgmma.fence -> 4 x wgmma (k = 0, 16, 32, 48) -> commit
//             -> wait_group 1 (the previous k-block's MMAs are done) -> arrive empty[s - 1]
// so each consumer keeps one k-block of MMAs queued on the tensor cores while it waits for the
// next stage, and the producer runs up to `stages` k-blocks ahead.
//
// Optional (BF16_CLUSTER=2): clusters of two blocks on vertically adjacent tiles (same columns
// of C) share the B slab: each block loads half of it and multicasts it into both blocks'
// shared memory, halving the L2 -> SM traffic for B.
//
// ---------------------------------------------------------------------------------------------
// Shared-memory layout and the 128-byte swizzle (why TMA and wgmma agree)
// ---------------------------------------------------------------------------------------------
// A slab of 64 bf16 along K is exactly 128 bytes, one "swizzle row". TMA with
// CU_TENSOR_MAP_SWIZZLE_128B writes row r of the box at byte r * 128 of the stage, but stores the
// row's 16-byte chunk c at chunk position c ^ (r % 8): address bits [4:6] are XORed with bits
// [7:9]. Eight consecutive rows (1024 bytes) form one swizzle atom. Without the swizzle, the 8
// rows an MMA reads together (a "core matrix" column of 16 bytes each) would all sit in the same
// 4 banks; with it they spread over all 32.
// wgmma understands exactly this layout when its descriptor says "128B swizzle, K-major": it
// computes the unswizzled address start + (row / 8) * SBO + (row % 8) * 128 + k_byte (with
// SBO = 1024 that is simply start + row * 128 + k_byte) and applies the same XOR of bits [4:6]
// with bits [7:9]. Both sides swizzle on absolute shared-memory address bits, so every
// stage must start at a multiple of 1024 bytes (base_offset field = 0). Stepping K by 16
// elements inside the 128-byte row is then a plain +32 bytes on the start address: the
// hardware applies the XOR after adding, which lands on the chunks TMA wrote.
//
// Matrix descriptor (64 bits, PTX ISA "Matrix Descriptor Format" for wgmma):
//   bits  0-13  start address >> 4          (shared-memory byte address of row 0, k = 0)
//   bits 16-29  leading-dimension byte offset >> 4: the distance between core matrices along
//               K. Unused for swizzled K-major layouts whose K extent per instruction (16
//               elements = 32 bytes) stays inside one 128-byte swizzle row; set to 1.
//   bits 32-45  stride-dimension byte offset >> 4: distance between consecutive groups of 8
//               rows (along M for A, along N for B) = 8 rows * 128 bytes = 1024 -> 64.
//   bits 49-51  base offset: 0, since every tile starts on a 1024-byte boundary.
//   bits 62-63  swizzle mode: 0 none, 1 = 128B, 2 = 64B, 3 = 32B.  -> 1.
// Both operands are K-major (A is M x K row-major, B is N x K row-major, which is what wgmma
// calls the non-transposed B), so the instruction's imm-trans-a / imm-trans-b are 0.
//
// ---------------------------------------------------------------------------------------------
// Accumulator layout (PTX ISA, "Register fragment layout for accumulator matrix D", m64nNk16)
// ---------------------------------------------------------------------------------------------
// For thread t of the warpgroup, warp w = t / 32, lane l, g = l / 4, c = l % 4, the fp32
// register d[4 * i + 2 * h + v] (i = 0 .. N/8 - 1, h, v in {0, 1}) holds
//     row = 16 * w + g + 8 * h,   column = 8 * i + 2 * c + v.
// So each thread owns pairs of adjacent columns (v = 0, 1: one packed bf16x2 store) in two rows
// (h = 0, 1), repeated every 8 columns. The epilogue below is written from this formula;
// .gpu_bench/bf16_check.py emulates it on the CPU as well.
//
// ---------------------------------------------------------------------------------------------
// Compile-time configuration (variants, selected with -D...; defaults are the best guess)
// ---------------------------------------------------------------------------------------------
//   BF16_BN        0 (default): the host picks BN in {128, 192, 256} per shape (fewest waves of
//                  tiles over the SMs, weighed by the per-tile efficiency); 128/192/256 forces it.
//   BF16_STAGES    0 (default): as many ring stages as shared memory holds (4 for BN = 256 and
//                  192, 6 for 128); a positive value caps it.
//   BF16_CLUSTER   1 (default) or 2: clusters of two blocks with B multicast.
//   BF16_TMA_STORE 1 (default): epilogue through shared memory + TMA store (whenever N % 8 == 0
//                  and C is 16-byte aligned); 0: direct bf16x2 stores from registers.
//   BF16_GROUP_M   16 (default): tile rows per group of the tile order (L2 reuse, see tile_of).
// Shapes TMA cannot describe (K % 8 != 0: the row pitch of A and B must be a multiple of 16
// bytes; or A, B not 16-byte aligned) go to a plain, bounds-checked SIMT kernel at the end.

#include <cstdint>

#include <cuda.h>  // CUtensorMap and its enums only: the driver entry point is fetched at run time
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifndef BF16_BN
#define BF16_BN 0
#endif
#ifndef BF16_STAGES
#define BF16_STAGES 0
#endif
#ifndef BF16_CLUSTER
#define BF16_CLUSTER 1
#endif
#ifndef BF16_TMA_STORE
#define BF16_TMA_STORE 1
#endif
#ifndef BF16_GROUP_M
#define BF16_GROUP_M 16
#endif

static_assert(BF16_BN == 0 || BF16_BN == 128 || BF16_BN == 192 || BF16_BN == 256, "BF16_BN: 0, 128, 192 or 256");
static_assert(BF16_CLUSTER == 1 || BF16_CLUSTER == 2, "BF16_CLUSTER: 1 or 2");
static_assert(BF16_GROUP_M >= 1, "BF16_GROUP_M >= 1");

// `nvcc -arch=sm_90a` also builds generic compute_90 PTX, where the sm_90a-only kernel body is
// compiled out (see the end of the kernel): silence "declared but never referenced" there.
// Some variants leave helpers unused as well (the multicast with BF16_CLUSTER=1, the TMA-store
// helpers with BF16_TMA_STORE=0).
#if defined(__CUDA_ARCH__) && (!defined(__CUDA_ARCH_FEAT_SM90_ALL) || BF16_CLUSTER == 1 || BF16_TMA_STORE == 0)
#pragma nv_diag_suppress 177
#endif

namespace {

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------
// Tile configuration
// ---------------------------------------------------------------------------------------------
constexpr int kBM = 128;                   // rows of C per tile: 2 consumer warpgroups x 64
constexpr int kBK = 64;                    // K per stage: 64 bf16 = one 128-byte swizzle row
constexpr int kThreads = 384;              // producer warpgroup + 2 consumer warpgroups
constexpr int kConsumerWarps = 8;          // arrivals on an empty barrier, per block
constexpr int kEpiCols = 64;               // columns per TMA-store chunk (128 bytes: one swizzle row)
constexpr int kEpiChunkBytes = 64 * kEpiCols * 2;  // 64 rows (one warpgroup) x 64 columns, bf16
constexpr int kSmemLimit = 232448;         // 227 KiB: the most dynamic shared memory a block may use
constexpr int kProducerRegs = 40;          // setmaxnreg targets: 128 * 40 + 256 * 232 = 64512 <= 65536
constexpr int kConsumerRegs = 232;

template <int BN_, int CLUSTER_, bool TMA_STORE_>
struct Config {
    static constexpr int BN = BN_;
    static constexpr int kCluster = CLUSTER_;
    static constexpr bool kTmaStore = TMA_STORE_;
    static constexpr int kABytes = kBM * kBK * 2;  // 16 KiB
    static constexpr int kBBytes = BN * kBK * 2;   // 32 / 24 / 16 KiB
    static constexpr int kStageBytes = kABytes + kBBytes;
    // Two 8 KiB staging buffers per consumer warpgroup (double buffering of the TMA store).
    static constexpr int kEpiBytes = kTmaStore ? 2 * 2 * kEpiChunkBytes : 0;
    static constexpr int kBarrierBytes = 256;      // room for 2 x 16 mbarriers of 8 bytes
    // 1024 bytes of slack: the dynamic shared memory is rounded up to a 1024-byte boundary.
    static constexpr int kMaxStages = (kSmemLimit - 1024 - kEpiBytes - kBarrierBytes) / kStageBytes;
    static constexpr int kStages =
        (BF16_STAGES > 0 && BF16_STAGES < kMaxStages) ? BF16_STAGES : (kMaxStages < 8 ? kMaxStages : 8);
    static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kEpiBytes + kBarrierBytes;
    static constexpr int kAcc = BN / 2;            // fp32 accumulators per consumer thread

    static_assert(BN % 64 == 0, "the epilogue stores 64-column chunks");
    static_assert(BN <= 256, "wgmma N and the TMA box are at most 256");
    static_assert(kStages >= 2, "a ring needs two stages");
    static_assert(2 * kStages * 8 <= kBarrierBytes, "barrier area too small");
    static_assert(kSmemBytes <= kSmemLimit, "shared memory over the 227 KiB limit");
    static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0 && (kBBytes / kCluster) % 1024 == 0,
                  "every tile (and multicast half) must start on a 1024-byte swizzle atom");
};

// ---------------------------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier: a 64-bit shared-memory object with a phase bit, a pending-arrival count and a
// transaction (byte) count. A phase completes when both counts reach zero; then the phase bit
// flips and the counts re-arm for the next phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Arrive (count one arrival) and announce `bytes` more bytes to wait for, in one step.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Arrive on a barrier of this block.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrive on the barrier at the same offset in block `cta` of the cluster (possibly this one):
// mapa turns our shared address into that block's address in the cluster's shared window.
// What the arrival announces is that our wgmma reads of the stage are over, which
// wgmma.wait_group has already established; no memory written by this thread needs to become
// visible to the other block, so the default (.release.cta) semantics suffice. (Asking for
// .release.cluster here costs a MEMBAR.ALL.GPU per arrival in the main loop.)
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}

// Wait until the phase with parity `parity` has completed. try_wait suspends the thread for a
// while (rather than spinning flat out) and returns whether the phase is done; we loop on it.
// "Phase with parity p has completed" means: the barrier's current phase parity is != p. A
// freshly initialised barrier is in phase 0, so waiting for parity 1 returns at once; that is
// how the producer treats every stage as free on its first pass round the ring.
// (Default semantics, .acquire.cta: the data behind a full barrier is written by TMA, whose
// complete_tx makes it visible to the waiting threads; behind an empty barrier there is no data
// at all, only the fact that the readers are done. An .acquire.cluster wait would add an L1
// invalidation per wait.)
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// mbarrier.init is an ordinary (generic-proxy) store; TMA's complete_tx and other blocks of
// the cluster access the barrier through the async proxy / the cluster. This fence makes the
// initialisation visible to them (it must be followed by a block- or cluster-wide barrier).
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// All threads of all blocks of the cluster: release our shared-memory writes, acquire theirs.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Named barrier for the 128 threads of one consumer warpgroup (id 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_bar(int id) {
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// Register budget per warpgroup (must be executed by all 128 threads of the warpgroup).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// TMA: copy the box at coordinates (inner = k, outer = row) of the tensor described by `map`
// into shared memory at `dst`, swizzled as the map says; the bytes are counted on `bar`.
// Out-of-bounds parts of the box (ragged M, N, K) are filled with zeros and still counted.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int inner, int outer,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
            "r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar)
        : "memory");
}

// The same, delivered to the same shared-memory offset (and barrier offset) in every block of
// the cluster named in `mask`.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, int inner, int outer,
                                                      uint32_t bar, uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar), "h"(mask)
        : "memory");
}

// TMA store: shared memory -> the box at (inner = column, outer = row) of C. Elements outside
// the tensor are not written. Tracked per thread in "bulk async-groups".
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int inner, int outer) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(inner), "r"(outer), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N bulk groups of this thread are still reading their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Wait until all bulk groups of this thread are complete (writes done).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Ordinary st.shared writes belong to the generic proxy, the TMA store reads through the async
// proxy: this fence orders the former before the latter (each writing thread issues it, then a
// barrier lets one thread launch the store).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lower address) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------------------------------------
// wgmma
// ---------------------------------------------------------------------------------------------
// Descriptor of a K-major, 128B-swizzled operand tile whose row 0 / k 0 sits at `addr` (see
// the bit layout in the header).
__device__ __forceinline__ uint64_t make_desc_sw128(uint32_t addr) {
    uint64_t desc = 0;
    desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);  // bits 0-13: start address >> 4
    desc |= static_cast<uint64_t>(1) << 16;                // bits 16-29: LBO (unused here) = 1
    desc |= static_cast<uint64_t>(1024 >> 4) << 32;        // bits 32-45: SBO = 1024 bytes
    desc |= static_cast<uint64_t>(1) << 62;                // bits 62-63: 1 = 128-byte swizzle
    return desc;
}
// Moving 16 elements (32 bytes) along K adds 32 >> 4 = 2 to the start-address field. The
// field cannot overflow: shared addresses are below 2^18, so (addr >> 4) + 6 < 2^14.
constexpr uint64_t kDescStepK16 = 2;

// The async proxy (wgmma) and ordinary register traffic must be ordered explicitly:
//   wgmma.fence        before the first wgmma that touches accumulator registers which the
//                      thread's ordinary instructions have written (or read) since, e.g. the
//                      epilogue of the previous tile read them; we issue it per k-block.
//   commit_group       closes the batch of wgmma issued so far into one "wgmma-group".
//   wait_group N       blocks until at most N groups are pending: the stage those groups read
//                      may be released and, for N = 0, the accumulators may be read.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// The C++ compiler does not know that wgmma writes the accumulators asynchronously: this empty
// asm "rewrites" every accumulator after wait_group, so no read of d is hoisted above the wait.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, fp32, registers) = A (64 x 16, shared) * B (16 x N, shared) + (accumulate ? D : 0)
// "accumulate" becomes the scale-d predicate: 0 on the first k-step of a tile, so the
// accumulators never need zeroing. The immediates after it: scale-a = 1, scale-b = 1 (no
// negation), trans-a = 0, trans-b = 0 (both operands K-major).
template <int N>
struct Wgmma;

template <>
struct Wgmma<128> {
    __device__ __forceinline__ static void mma(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                               uint32_t accumulate) {
        asm volatile(
            "{\n.reg .pred p;\n"
            "setp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16\n"
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
            " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
            " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
            " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
            " %64, %65, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    }
};

template <>
struct Wgmma<192> {
    __device__ __forceinline__ static void mma(float (&d)[96], uint64_t desc_a, uint64_t desc_b,
                                               uint32_t accumulate) {
        asm volatile(
            "{\n.reg .pred p;\n"
            "setp.ne.b32 p, %98, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16\n"
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
            " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
            " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
            " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"
            " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"
            " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95},\n"
            " %96, %97, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
              "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
              "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
              "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
              "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
            : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    }
};

template <>
struct Wgmma<256> {
    __device__ __forceinline__ static void mma(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                               uint32_t accumulate) {
        asm volatile(
            "{\n.reg .pred p;\n"
            "setp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16\n"
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
            " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
            " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
            " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"
            " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"
            " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,\n"
            " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,\n"
            " %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},\n"
            " %128, %129, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
              "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
              "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
              "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
              "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
              "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
              "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
              "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
              "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(desc_a), "l"(desc_b), "r"(accumulate));
    }
};

// ---------------------------------------------------------------------------------------------
// Tile order
// ---------------------------------------------------------------------------------------------
// Work units: a unit is kCluster vertically adjacent 128 x BN tiles (one per block of the
// cluster). Units are visited in groups of kGroupUnits unit-rows: within a group the unit-row
// index varies fastest, then the column. The ~132 tiles in flight at any moment then cover
// about 16 tile-rows of A and 8 tile-columns of B (at BN = 256) instead of 1 row and 132
// columns, so each slab of A and B fetched from DRAM is reused from L2 by many blocks.
struct TileCoord {
    int m0, n0;
};
template <class Cfg>
__device__ __forceinline__ TileCoord tile_of(int unit, int units_m, int tiles_n, uint32_t rank) {
    constexpr int kGroupUnits = BF16_GROUP_M / Cfg::kCluster > 0 ? BF16_GROUP_M / Cfg::kCluster : 1;
    const int per_group = kGroupUnits * tiles_n;
    const int group = unit / per_group;
    const int first = group * kGroupUnits;
    const int rows = min(units_m - first, kGroupUnits);
    const int r = unit - group * per_group;
    const int um = first + r % rows;
    const int tn = r / rows;
    return {(um * Cfg::kCluster + static_cast<int>(rank)) * kBM, tn * Cfg::BN};
}

// ---------------------------------------------------------------------------------------------
// Epilogues
// ---------------------------------------------------------------------------------------------
// (a) TMA store. The 64 x BN slab of this warpgroup leaves in 64 x 64 chunks. A chunk is
// written into an 8 KiB staging buffer in the 128B-swizzled layout the C tensor map declares:
// row r (128 bytes) at r * 128, its 16-byte chunk j (columns 8j .. 8j+7) at position j ^ (r % 8).
// A warp's st.shared.b32 for one register pair covers rows g = 0..7 (lanes 4g..4g+3) and 16
// bytes per row: chunk positions j ^ g are 8 distinct 16-byte slots, i.e. all 32 banks once,
// conflict-free (without the swizzle all 8 rows would hit the same 4 banks).
// Two buffers alternate: before refilling one, the storing thread waits until at most one bulk
// group (the other buffer's) is still reading, then a warpgroup barrier releases the writers.
template <class Cfg>
__device__ __forceinline__ void epilogue_tma(float (&d)[Cfg::kAcc], const CUtensorMap* map_c, uint32_t stage_buf,
                                             int m0, int n0, int M, int N, int cw, int t, uint32_t& epi_iter) {
    const int row0 = m0 + 64 * cw;  // first row of this warpgroup's slab
    if (row0 >= M) return;          // the whole slab is below C (ragged M, or a padding tile)
    const int warp = t / 32, lane = t % 32, g = lane / 4, c = lane % 4;
    const int r = 16 * warp + g;    // row within the slab for h = 0; h = 1 adds 8 (same r % 8)
#pragma unroll
    for (int j = 0; j < Cfg::BN / kEpiCols; ++j) {
        if (n0 + kEpiCols * j >= N) break;  // chunk entirely right of C (uniform over the warpgroup)
        const uint32_t buf = stage_buf + (epi_iter & 1) * kEpiChunkBytes;
        if (t == 0) bulk_wait_read<1>();  // the store that last read `buf` has finished reading
        warpgroup_bar(1 + cw);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {   // 8-column group i = 8j + jj of the slab
            const int i = 8 * j + jj;
            const uint32_t off = static_cast<uint32_t>(((jj ^ g) << 4) + 4 * c);
            st_shared_b32(buf + r * 128 + off, pack_bf16x2(d[4 * i + 0], d[4 * i + 1]));
            st_shared_b32(buf + (r + 8) * 128 + off, pack_bf16x2(d[4 * i + 2], d[4 * i + 3]));
        }
        fence_proxy_async_smem();  // make the generic-proxy writes visible to the TMA engine
        warpgroup_bar(1 + cw);     // all 128 threads have written and fenced
        if (t == 0) {
            tma_store_2d(map_c, buf, n0 + kEpiCols * j, row0);
            bulk_commit();
        }
        ++epi_iter;
    }
}

// (b) Direct stores from registers: one bf16x2 (4 bytes) per register pair where the pair is
// inside C and 4-byte aligned (N even), element by element otherwise. Used when the TMA store
// is disabled or impossible (N % 8 != 0 makes C's row pitch not a multiple of 16 bytes).
template <class Cfg>
__device__ __forceinline__ void epilogue_direct(float (&d)[Cfg::kAcc], bf16* __restrict__ C, int m0, int n0,
                                                int M, int N, int cw, int t) {
    const int warp = t / 32, lane = t % 32, g = lane / 4, c = lane % 4;
    const bool pairs = (N % 2) == 0 && (reinterpret_cast<uintptr_t>(C) & 3) == 0;  // 4-byte aligned pairs
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + 64 * cw + 16 * warp + g + 8 * h;
        if (row >= M) continue;
        bf16* crow = C + static_cast<size_t>(row) * N;
#pragma unroll
        for (int i = 0; i < Cfg::BN / 8; ++i) {
            const int col = n0 + 8 * i + 2 * c;
            const float v0 = d[4 * i + 2 * h], v1 = d[4 * i + 2 * h + 1];
            if (pairs && col + 1 < N) {
                *reinterpret_cast<__nv_bfloat162*>(crow + col) = __floats2bfloat162_rn(v0, v1);
            } else {
                if (col < N) crow[col] = __float2bfloat16_rn(v0);
                if (col + 1 < N) crow[col + 1] = __float2bfloat16_rn(v1);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------
template <class Cfg>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_bf16_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_c, bf16* __restrict__ C, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma, setmaxnreg: sm_90a only (see the note below)
    constexpr int BN = Cfg::BN;
    constexpr int kStages = Cfg::kStages;
    constexpr int kCluster = Cfg::kCluster;

    // Shared memory, from a 1024-byte aligned base (the swizzle atom):
    //   [A stage 0 .. A stage S-1][B stage 0 .. B stage S-1][epilogue buffers][full[S]][empty[S]]
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t smem_a = base;
    const uint32_t smem_b = smem_a + kStages * Cfg::kABytes;
    const uint32_t smem_epi = smem_b + kStages * Cfg::kBBytes;
    const uint32_t bar_full = smem_epi + Cfg::kEpiBytes;
    const uint32_t bar_empty = bar_full + 8 * kStages;

    const int tid = threadIdx.x;
    const int wg = tid / 128;
    const uint32_t rank = kCluster > 1 ? cluster_ctarank() : 0;

    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(bar_full + 8 * s, 1);                                // the producer's arrive
            mbar_init(bar_empty + 8 * s, kConsumerWarps * kCluster);        // every consumer warp
        }
        fence_barrier_init();
    }
    // Nobody may touch a barrier (or, in a cluster, multicast into a peer) before it is
    // initialised everywhere.
    if constexpr (kCluster > 1) cluster_sync();
    else __syncthreads();

    const int tiles_m = (M + kBM - 1) / kBM;
    const int tiles_n = (N + BN - 1) / BN;
    const int units_m = (tiles_m + kCluster - 1) / kCluster;
    const int num_units = units_m * tiles_n;
    const int first_unit = blockIdx.x / kCluster;
    const int unit_step = gridDim.x / kCluster;
    const int num_kb = (K + kBK - 1) / kBK;

    if (wg == 0) {
        // ------------------------------ producer ------------------------------
        setmaxnreg_dec<kProducerRegs>();
        if (tid == 0) {
            prefetch_tensormap(&map_a);
            prefetch_tensormap(&map_b);
            int stage = 0;
            uint32_t phase = 0;  // parity of the ring's current pass
            for (int unit = first_unit; unit < num_units; unit += unit_step) {
                const TileCoord tc = tile_of<Cfg>(unit, units_m, tiles_n, rank);
                for (int kb = 0; kb < num_kb; ++kb) {
                    // Wait until the consumers (of both blocks, in a cluster) released this
                    // stage in the previous pass; the first pass waits on parity 1 and passes.
                    mbar_wait(bar_empty + 8 * stage, phase ^ 1);
                    const uint32_t full = bar_full + 8 * stage;
                    // This block receives a whole A slab and a whole B slab per stage (in a
                    // cluster, half of B comes from the peer's multicast).
                    mbar_arrive_expect_tx(full, Cfg::kStageBytes);
                    tma_load_2d(smem_a + stage * Cfg::kABytes, &map_a, kb * kBK, tc.m0, full);
                    if constexpr (kCluster == 1) {
                        tma_load_2d(smem_b + stage * Cfg::kBBytes, &map_b, kb * kBK, tc.n0, full);
                    } else {
                        constexpr int kHalf = BN / kCluster;  // rows of B this block fetches
                        tma_load_2d_multicast(smem_b + stage * Cfg::kBBytes + rank * (Cfg::kBBytes / kCluster),
                                              &map_b, kb * kBK, tc.n0 + static_cast<int>(rank) * kHalf, full,
                                              static_cast<uint16_t>((1u << kCluster) - 1));
                    }
                    if (++stage == kStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        // ------------------------------ consumers ------------------------------
        setmaxnreg_inc<kConsumerRegs>();
        const int cw = wg - 1;      // 0: rows 0-63 of the tile, 1: rows 64-127
        const int t = tid % 128;    // thread within the warpgroup
        const int lane = tid % 32;
        const uint32_t epi_buf = smem_epi + cw * 2 * kEpiChunkBytes;
        uint32_t epi_iter = 0;

        float d[Cfg::kAcc];
#pragma unroll
        for (int i = 0; i < Cfg::kAcc; ++i) d[i] = 0.f;  // defined values; scale-d = 0 ignores them

        // Release a stage: one arrival per consumer warp on the empty barrier of every block
        // that wrote into it (in a cluster, both: the peer's multicast filled half of it).
        auto release = [&](int s) {
            if (lane == 0) {
                if constexpr (kCluster == 1) {
                    mbar_arrive(bar_empty + 8 * s);
                } else {
#pragma unroll
                    for (int r = 0; r < kCluster; ++r) mbar_arrive_cluster(bar_empty + 8 * s, r);
                }
            }
        };

        int stage = 0;
        uint32_t phase = 0;
        for (int unit = first_unit; unit < num_units; unit += unit_step) {
            const TileCoord tc = tile_of<Cfg>(unit, units_m, tiles_n, rank);
            int prev = 0;
            for (int kb = 0; kb < num_kb; ++kb) {
                mbar_wait(bar_full + 8 * stage, phase);  // TMA bytes of this stage landed
                const uint64_t desc_a = make_desc_sw128(smem_a + stage * Cfg::kABytes + cw * 64 * 128);
                const uint64_t desc_b = make_desc_sw128(smem_b + stage * Cfg::kBBytes);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < kBK / 16; ++kk) {
                    Wgmma<BN>::mma(d, desc_a + kk * kDescStepK16, desc_b + kk * kDescStepK16,
                                   (kb > 0 || kk > 0) ? 1u : 0u);
                }
                wgmma_commit();
                // Keep this k-block's group in flight; wait for the previous one, whose stage
                // can then be handed back to the producer.
                if (kb > 0) {
                    wgmma_wait<1>();
                    release(prev);
                }
                prev = stage;
                if (++stage == kStages) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
            fence_accumulators(d);
            release(prev);

            if constexpr (Cfg::kTmaStore) {
                epilogue_tma<Cfg>(d, &map_c, epi_buf, tc.m0, tc.n0, M, N, cw, t, epi_iter);
            } else {
                epilogue_direct<Cfg>(d, C, tc.m0, tc.n0, M, N, cw, t);
            }
        }
        if constexpr (Cfg::kTmaStore) {
            if (t == 0) bulk_wait_all();  // shared memory must outlive the last TMA store
        }
    }
    // In a cluster, no block may exit while its peer can still multicast into its shared memory
    // or arrive on its barriers: everyone (idle producer warps included) meets here.
    if constexpr (kCluster > 1) cluster_sync();
#else
    // `nvcc -arch=sm_90a` also embeds generic compute_90 PTX, in which wgmma and setmaxnreg do
    // not exist. That image is never chosen on an sm_90 GPU (the sm_90a binary is), so this body
    // is empty there.
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------------
// Fallback: any shape, any alignment. A 64 x 64 tile per block of 256 threads, K in steps of
// 16 through shared memory (fp32), each thread 4 x 4 outputs strided by 16 so that the
// shared-memory reads broadcast and the global stores coalesce. Correct, not fast.
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(256) gemm_bf16_simt(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                                       bf16* __restrict__ C, int M, int N, int K) {
    constexpr int T = 64, TK = 16;
    __shared__ float As[TK][T + 1];
    __shared__ float Bs[TK][T + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * T, n0 = blockIdx.x * T;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = threadIdx.x; e < T * TK; e += 256) {
            const int r = e / TK, k = e % TK, gk = k0 + k;
            const int gm = m0 + r, gn = n0 + r;
            As[k][r] = (gm < M && gk < K) ? __bfloat162float(A[static_cast<size_t>(gm) * K + gk]) : 0.f;
            Bs[k][r] = (gn < N && gk < K) ? __bfloat162float(B[static_cast<size_t>(gn) * K + gk]) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TK; ++k) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = m0 + ty + 16 * i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + tx + 16 * j;
            if (col < N) C[static_cast<size_t>(row) * N + col] = __float2bfloat16_rn(acc[i][j]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------
// cuTensorMapEncodeTiled is a driver-API function; we do not link libcuda but ask the runtime
// for the driver's entry point once (the runtime has loaded the driver anyway).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
    static const EncodeTiledFn fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t err =
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status);
#else
        const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &status);
#endif
        if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
            cudaGetLastError();  // leave no sticky error behind: we fall back to the SIMT kernel
            return static_cast<EncodeTiledFn>(nullptr);
        }
        return reinterpret_cast<EncodeTiledFn>(p);
    }();
    return fn;
}

// A row-major rows x cols bf16 matrix (cols contiguous) as a 2-D tensor map whose box is
// box_rows x box_cols, 128B-swizzled. TMA lists dimensions innermost first.
bool make_map(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows, int box_cols) {
    const EncodeTiledFn encode = encode_tiled();
    if (encode == nullptr) return false;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(bf16)};  // bytes, dims 1..
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box,
                  elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

constexpr int kMaxDevices = 64;

int sm_count(int dev) {
    static int cache[kMaxDevices] = {};
    if (dev < 0 || dev >= kMaxDevices) return 132;
    if (cache[dev] == 0) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
        cache[dev] = n;
    }
    return cache[dev];
}

template <class Cfg>
cudaLaunchConfig_t launch_config(unsigned grid, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = Cfg::kSmemBytes;
    cfg.stream = 0;  // the legacy default stream
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = Cfg::kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = Cfg::kCluster > 1 ? 1 : 0;
    return cfg;
}

// Once per device and configuration: allow the large dynamic shared memory, and find how many
// blocks (clusters x kCluster) can be resident at once: the persistent grid.
template <class Cfg>
int resident_blocks(int dev) {
    static int cache[kMaxDevices] = {};
    if (dev < 0 || dev >= kMaxDevices) dev = 0;
    if (cache[dev] == 0) {
        cudaFuncSetAttribute(gemm_bf16_wgmma<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
        int blocks = (sm_count(dev) / Cfg::kCluster) * Cfg::kCluster;
        if (Cfg::kCluster > 1) {
            cudaLaunchAttribute attr[1];
            const cudaLaunchConfig_t cfg = launch_config<Cfg>(static_cast<unsigned>(blocks), attr);
            int clusters = 0;
            if (cudaOccupancyMaxActiveClusters(&clusters, gemm_bf16_wgmma<Cfg>, &cfg) == cudaSuccess && clusters > 0)
                blocks = clusters * Cfg::kCluster;
            cudaGetLastError();
        }
        cache[dev] = blocks > 0 ? blocks : Cfg::kCluster;
    }
    return cache[dev];
}

template <class Cfg>
bool launch_wgmma(const bf16* A, const bf16* B, bf16* C, int M, int N, int K, int dev) {
    CUtensorMap map_a, map_b, map_c;
    if (!make_map(&map_a, A, M, K, kBM, kBK)) return false;
    if (!make_map(&map_b, B, N, K, Cfg::BN / Cfg::kCluster, kBK)) return false;
    if (Cfg::kTmaStore) {
        if (!make_map(&map_c, C, M, N, 64, kEpiCols)) return false;
    } else {
        map_c = map_a;  // unused by this configuration
    }
    const int blocks = resident_blocks<Cfg>(dev);
    const long long tiles_m = (M + kBM - 1) / kBM;
    const long long units = (tiles_m + Cfg::kCluster - 1) / Cfg::kCluster * ((N + Cfg::BN - 1) / Cfg::BN);
    const long long grid = units * Cfg::kCluster < blocks ? units * Cfg::kCluster : blocks;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = launch_config<Cfg>(static_cast<unsigned>(grid), attr);
    cudaLaunchKernelEx(&cfg, gemm_bf16_wgmma<Cfg>, map_a, map_b, map_c, C, M, N, K);
    return true;
}

template <int BN>
bool launch_bn(const bf16* A, const bf16* B, bf16* C, int M, int N, int K, int dev) {
    // The TMA store needs C's row pitch (N * 2 bytes) and base to be multiples of 16 bytes.
    if constexpr (BF16_TMA_STORE != 0) {
        if (N % 8 == 0 && reinterpret_cast<uintptr_t>(C) % 16 == 0)
            return launch_wgmma<Config<BN, BF16_CLUSTER, true>>(A, B, C, M, N, K, dev);
    }
    return launch_wgmma<Config<BN, BF16_CLUSTER, false>>(A, B, C, M, N, K, dev);
}

// The tile width for this shape. A persistent grid runs ceil(tiles / blocks) "waves" of tiles;
// the time is about waves x (work per tile), and a wider tile does its work a little more
// efficiently (less shared-memory and L2 traffic per FLOP). Example, M = 8192, N = 768 on 132
// SMs: BN = 256 gives 192 tiles = 2 waves of 256 columns, BN = 192 gives 256 tiles = 2 waves of
// 192 columns: 25% less time.
int pick_bn(int M, int N, int sms) {
    if (BF16_BN != 0) return BF16_BN;
    const int bns[3] = {256, 192, 128};
    const double cost_per_col[3] = {1.0, 1.03, 1.12};  // relative cost of a column of work
    const long long tiles_m = (M + kBM - 1) / kBM;
    int best = 256;
    double best_cost = 0;
    for (int i = 0; i < 3; ++i) {
        const long long tiles = tiles_m * ((N + bns[i] - 1) / bns[i]);
        const long long waves = (tiles + sms - 1) / sms;
        const double cost = static_cast<double>(waves) * bns[i] * cost_per_col[i];
        if (i == 0 || cost < best_cost) {
            best = bns[i];
            best_cost = cost;
        }
    }
    return best;
}

}  // namespace

// C = A B^T in bf16 storage with fp32 accumulation, on tensor cores. A: M x K, B: N x K (both
// K-contiguous, row-major), C: M x N bf16 (row-major).
extern "C" void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                          int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    // TMA needs 16-byte aligned bases and row pitches (K * 2 bytes) that are multiples of 16.
    const bool tma_ok = K > 0 && K % 8 == 0 && reinterpret_cast<uintptr_t>(A) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(B) % 16 == 0;
    if (tma_ok) {
        int dev = 0;
        cudaGetDevice(&dev);
        bool launched = false;
        switch (pick_bn(M, N, sm_count(dev))) {
            case 128: launched = launch_bn<128>(A, B, C, M, N, K, dev); break;
            case 192: launched = launch_bn<192>(A, B, C, M, N, K, dev); break;
            default: launched = launch_bn<256>(A, B, C, M, N, K, dev); break;
        }
        if (launched) return;
    }
    const dim3 grid((N + 63) / 64, (M + 63) / 64);
    gemm_bf16_simt<<<grid, 256>>>(A, B, C, M, N, K);
}
