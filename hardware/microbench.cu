// microbench.cu: measure the real ceilings of the GPU in this machine.
//
//   nvcc -O3 -arch=sm_90 -o microbench hardware/microbench.cu && ./microbench
//   ./microbench --name      prints only the device name (no benchmarks)
//
// Spec sheets quote peaks at the boost clock with nothing else running; a kernel never sees them.
// These small kernels each push one part of the chip as hard as a simple kernel can, so the
// grader can say "your kernel reached 80 % of what this GPU really does" instead of "of what the
// datasheet promises". Each benchmark warms up, times several runs with CUDA events, and keeps
// the median, which shrugs off a stray slow run. Progress goes to stderr (one line per
// benchmark); stdout carries exactly one JSON object with the results.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#define CHECK(call)                                                                     \
    do {                                                                                \
        cudaError_t err_ = (call);                                                      \
        if (err_ != cudaSuccess) {                                                      \
            std::fprintf(stderr, "microbench: %s failed at %s:%d: %s\n", #call, __FILE__, \
                         __LINE__, cudaGetErrorString(err_));                           \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)

#define CHECK_LAUNCH() CHECK(cudaGetLastError())

// Every kernel folds its work into one value and writes it only if it equals this impossible
// value. The compiler cannot prove the condition false, so it must do all the work; the write
// itself never happens, so it costs nothing.
#define SENTINEL (-1234.5678f)

constexpr int kThreads = 256;
constexpr int kTotal = 10;  // benchmarks, for the "[i/10]" progress prefix

struct Gpu {
    cudaDeviceProp prop;
    int clock_khz;
    float* sink;  // where the never-taken writes would go
};

// ---------------------------------------------------------------- timing helpers

// Median of `reps` timed calls of launch(), after one untimed warm-up call. before() runs
// outside the timed region (used to flush the L2 between latency runs).
template <class Launch, class Before>
static float median_ms(int reps, Launch launch, Before before) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    before();
    launch();
    CHECK(cudaDeviceSynchronize());
    std::vector<float> times;
    for (int r = 0; r < reps; ++r) {
        before();
        CHECK(cudaEventRecord(start));
        launch();
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0.f;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

template <class Launch>
static float median_ms(int reps, Launch launch) {
    return median_ms(reps, launch, [] {});
}

// Kernels that loop `iters` times: pick iters so one run lasts about target_ms (long enough that
// launch overhead and clock ramp-up vanish, short enough that the whole program takes seconds).
// Returns the median time and sets iters to the count it was measured with.
template <class LaunchIters>
static float calibrated_ms(int& iters, float target_ms, LaunchIters launch) {
    float probe = median_ms(1, [&] { launch(iters); });
    double scale = target_ms / std::max(probe, 1e-3f);
    iters = (int)std::clamp(iters * scale, 1.0, 1e8);
    return median_ms(7, [&] { launch(iters); });
}

// Blocks that fill every SM exactly once at the kernel's real occupancy: one full wave, so no
// SM idles while a partial last wave finishes.
template <class Kernel>
static int full_wave(const Gpu& gpu, Kernel kernel, size_t smem_bytes = 0) {
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes));
    return gpu.prop.multiProcessorCount * std::max(per_sm, 1);
}

static void progress(int index, const char* what, double value, const char* unit) {
    std::fprintf(stderr, "[%d/%d] %s: %.1f %s\n", index, kTotal, what, value, unit);
    std::fflush(stderr);
}

// ---------------------------------------------------------------- FP32 FMA throughput

constexpr int kFmaChains = 8;  // independent accumulators per thread: enough to hide FMA latency

__global__ void fma_kernel(float* sink, float a, float b, int iters) {
    float x[kFmaChains];
#pragma unroll
    for (int c = 0; c < kFmaChains; ++c) x[c] = threadIdx.x * 1e-3f + c;
#pragma unroll 16
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < kFmaChains; ++c) x[c] = fmaf(x[c], a, b);
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < kFmaChains; ++c) s += x[c];
    if (s == SENTINEL) sink[0] = s;
}

static double bench_fp32(const Gpu& gpu) {
    int blocks = full_wave(gpu, fma_kernel);
    int iters = 4096;
    float ms = calibrated_ms(iters, 5.f, [&](int n) {
        fma_kernel<<<blocks, kThreads>>>(gpu.sink, 0.999f, 1e-4f, n);
        CHECK_LAUNCH();
    });
    double flops = 2.0 * kFmaChains * (double)iters * blocks * kThreads;
    return flops / (ms * 1e-3) / 1e12;
}

// ---------------------------------------------------------------- shared-memory bandwidth

constexpr int kSmemElems = 1024;  // per block; 16 KB of float4 still lets every SM fill up
constexpr int kSmemLoads = 8;     // loads per loop trip

__device__ inline float fold(float v) { return v; }
__device__ inline float fold(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// Shared-memory loads the compiler must issue as written. The addresses repeat every few trips
// over a buffer nothing writes, so both compilers merge the repeats of plain loads (fewer LDS in
// the SASS than loads counted, a bandwidth inflated past the hardware's peak): an `asm volatile`
// stops the front end, and only a PTX `ld.volatile` stops ptxas as well.
__device__ inline float lds(const float* p) {
    float v;
    asm volatile("ld.volatile.shared.f32 %0, [%1];" : "=f"(v) : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
}
__device__ inline float4 lds(const float4* p) {
    float4 v;
    asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
}

// Each warp reads 32 consecutive elements: 32 distinct banks (float) or four full 128-byte
// wavefronts (float4), so there are no bank conflicts. The offset moves every trip so the
// compiler cannot hoist the loads out of the loop.
template <class T>
__global__ void smem_kernel(float* sink, int iters) {
    __shared__ T buf[kSmemElems];
    for (int i = threadIdx.x; i < kSmemElems; i += blockDim.x) {
        float v = (float)i;
        if constexpr (sizeof(T) == 4) {
            buf[i] = v;
        } else {
            buf[i] = make_float4(v, v + 1, v + 2, v + 3);
        }
    }
    __syncthreads();
    T acc0{}, acc1{};
    // One trip per loop body: the SASS then shows exactly kSmemLoads LDS per trip (a CPU test
    // checks it), and no unrolled copy can share a load with another.
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
        int base = (it * 32 * kSmemLoads + threadIdx.x) & (kSmemElems - 1);
#pragma unroll
        for (int j = 0; j < kSmemLoads; j += 2) {
            T v0 = lds(&buf[(base + j * 32) & (kSmemElems - 1)]);
            T v1 = lds(&buf[(base + (j + 1) * 32) & (kSmemElems - 1)]);
            if constexpr (sizeof(T) == 4) {
                acc0 += v0;
                acc1 += v1;
            } else {
                acc0.x += v0.x; acc0.y += v0.y; acc0.z += v0.z; acc0.w += v0.w;
                acc1.x += v1.x; acc1.y += v1.y; acc1.z += v1.z; acc1.w += v1.w;
            }
        }
    }
    float s = fold(acc0) + fold(acc1);
    if (s == SENTINEL) sink[0] = s;
}

template <class T>
static double bench_smem_variant(const Gpu& gpu) {
    int blocks = full_wave(gpu, smem_kernel<T>);
    int iters = 1024;
    float ms = calibrated_ms(iters, 3.f, [&](int n) {
        smem_kernel<T><<<blocks, kThreads>>>(gpu.sink, n);
        CHECK_LAUNCH();
    });
    double bytes = (double)iters * kSmemLoads * sizeof(T) * blocks * kThreads;
    return bytes / (ms * 1e-3) / 1e9;
}

static double bench_smem(const Gpu& gpu) {
    return std::max(bench_smem_variant<float>(gpu), bench_smem_variant<float4>(gpu));
}

// ---------------------------------------------------------------- L2 bandwidth

// Reads a buffer that fits in L2, `passes` times. __ldcg caches in L2 only, so the L1 cannot
// serve repeats; each pass starts one block further on, so a thread's data comes from another
// SM's previous share.
__global__ void l2_kernel(const float4* __restrict__ buf, unsigned n, int passes, float* sink) {
    const unsigned stride = gridDim.x * blockDim.x;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    auto load = [&](unsigned i, unsigned shift) {
        unsigned k = i + shift;
        k = k >= n ? k - n : k;  // wrap without a division in the hot loop
        return __ldcg(buf + k);
    };
    for (int p = 0; p < passes; ++p) {
        unsigned shift = (unsigned)(((unsigned long long)p * blockDim.x) % n);
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        // Four independent loads per trip keep several requests in flight per thread.
        for (; i + 3 * stride < n; i += 4 * stride) {
            float4 v0 = load(i, shift), v1 = load(i + stride, shift);
            float4 v2 = load(i + 2 * stride, shift), v3 = load(i + 3 * stride, shift);
            acc.x += (v0.x + v1.x) + (v2.x + v3.x);
            acc.y += (v0.y + v1.y) + (v2.y + v3.y);
            acc.z += (v0.z + v1.z) + (v2.z + v3.z);
            acc.w += (v0.w + v1.w) + (v2.w + v3.w);
        }
        for (; i < n; i += stride) {
            float4 v = load(i, shift);
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
    }
    float s = fold(acc);
    if (s == SENTINEL) sink[0] = s;
}

static double bench_l2(const Gpu& gpu) {
    size_t bytes = (size_t)gpu.prop.l2CacheSize / 2 / sizeof(float4) * sizeof(float4);
    size_t n = bytes / sizeof(float4);
    float4* buf = nullptr;
    CHECK(cudaMalloc(&buf, bytes));
    CHECK(cudaMemset(buf, 0, bytes));
    int blocks = full_wave(gpu, l2_kernel);
    int passes = 8;
    float ms = calibrated_ms(passes, 3.f, [&](int p) {
        l2_kernel<<<blocks, kThreads>>>(buf, (unsigned)n, p, gpu.sink);
        CHECK_LAUNCH();
    });
    CHECK(cudaFree(buf));
    return (double)bytes * passes / (ms * 1e-3) / 1e9;
}

// ---------------------------------------------------------------- DRAM copy bandwidth

static double bench_copy(const Gpu& gpu) {
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t bytes = std::min<size_t>(size_t(1) << 30, free_b / 4);  // ~1 GiB each way
    (void)gpu;
    void *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, bytes));
    CHECK(cudaMalloc(&dst, bytes));
    CHECK(cudaMemset(src, 1, bytes));
    float ms = median_ms(9, [&] { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    return 2.0 * bytes / (ms * 1e-3) / 1e9;  // every byte is read once and written once
}

// ---------------------------------------------------------------- latency (pointer chase)

// One thread follows a chain of pointers: each load's address is the previous load's value, so
// nothing overlaps and the time per step is the load-to-use latency of wherever the chain lives.
template <bool kBypassL1>
__global__ void chase_kernel(const uintptr_t* start, int steps, uintptr_t* sink,
                             long long* cycles) {
    uintptr_t p = (uintptr_t)start;
    long long t0 = clock64();
    for (int i = 0; i < steps; ++i) {
        if constexpr (kBypassL1) {
            p = (uintptr_t)__ldcg((const unsigned long long*)p);
        } else {
            p = (uintptr_t)__ldca((const unsigned long long*)p);
        }
    }
    long long t1 = clock64();
    sink[0] = p;  // the chain's end must be stored, or the whole loop is dead code
    cycles[0] = t1 - t0;
}

struct Latency {
    double ns, cycles;
};

// A random cyclic permutation (Sattolo's algorithm) over nodes one cache line apart: every step
// lands on an unpredictable line, so neither the prefetcher nor spatial locality helps.
static Latency chase(const Gpu& gpu, size_t region_bytes, int steps, bool bypass_l1,
                     bool flush_l2) {
    constexpr size_t kLine = 128;
    size_t nodes = region_bytes / kLine;
    size_t words = region_bytes / sizeof(uintptr_t);
    uintptr_t* buf = nullptr;
    CHECK(cudaMalloc(&buf, region_bytes));
    std::vector<size_t> order(nodes);
    for (size_t i = 0; i < nodes; ++i) order[i] = i;
    std::mt19937_64 rng(42);
    for (size_t i = nodes - 1; i > 0; --i) {
        std::uniform_int_distribution<size_t> pick(0, i - 1);
        std::swap(order[i], order[pick(rng)]);
    }
    std::vector<uintptr_t> host(words, 0);
    const size_t per_node = kLine / sizeof(uintptr_t);
    for (size_t i = 0; i < nodes; ++i) {
        size_t next = order[i];  // Sattolo: i -> order[i] is one single cycle through all nodes
        host[i * per_node] = (uintptr_t)(buf + next * per_node);
    }
    CHECK(cudaMemcpy(buf, host.data(), region_bytes, cudaMemcpyHostToDevice));

    // Flushing writes twice the L2's size elsewhere, evicting the chain between runs.
    void* flush = nullptr;
    size_t flush_bytes = 2 * (size_t)gpu.prop.l2CacheSize;
    if (flush_l2) CHECK(cudaMalloc(&flush, flush_bytes));
    uintptr_t* sink = nullptr;
    long long* cycles = nullptr;
    CHECK(cudaMalloc(&sink, sizeof(uintptr_t)));

    // Each launch stores its cycle count in the next slot: warm-up first, then kReps timed runs.
    constexpr int kReps = 5;
    CHECK(cudaMalloc(&cycles, (kReps + 1) * sizeof(long long)));
    int run = 0;
    auto launch = [&] {
        long long* slot = cycles + run++;
        if (bypass_l1) chase_kernel<true><<<1, 1>>>(buf, steps, sink, slot);
        else chase_kernel<false><<<1, 1>>>(buf, steps, sink, slot);
        CHECK_LAUNCH();
    };
    auto before = [&] {
        if (flush_l2) CHECK(cudaMemsetAsync(flush, 0, flush_bytes));
    };
    float ms = median_ms(kReps, launch, before);
    std::vector<long long> cyc(kReps + 1);
    CHECK(cudaMemcpy(cyc.data(), cycles, cyc.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    std::sort(cyc.begin() + 1, cyc.end());
    double median_cycles = (double)cyc[1 + kReps / 2];

    CHECK(cudaFree(buf));
    CHECK(cudaFree(sink));
    CHECK(cudaFree(cycles));
    if (flush) CHECK(cudaFree(flush));
    return {ms * 1e6 / steps, median_cycles / steps};
}

// ---------------------------------------------------------------- BF16 tensor cores (mma.sync)

constexpr int kMmaChains = 8;  // independent accumulator tiles per warp
constexpr double kMmaFlops = 2.0 * 16 * 8 * 16;  // one m16n8k16 MMA

__global__ void mma_kernel(float* sink, unsigned seed, int iters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // Fragments are any bit patterns the compiler cannot predict; the values do not matter for
    // speed, only that they are finite (0x3c00 in each half is a small bf16 number).
    unsigned a0 = 0x3c003c00u ^ (seed & 0x00ff00ffu), a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
    unsigned b0 = a0 ^ 0x00010001u, b1 = b0 + 4;
    float acc[kMmaChains][4];
#pragma unroll
    for (int c = 0; c < kMmaChains; ++c)
        acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < kMmaChains; ++c) {
            asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < kMmaChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    if (s == SENTINEL) sink[0] = s;
#endif
}

// The result is only meaningful if the kernel was compiled for sm_80 or newer (a binary built
// for sm_75 also runs on an sm_80 GPU, with the MMA loop compiled out).
static bool mma_compiled_in() {
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, mma_kernel));
    return attr.binaryVersion >= 80;
}

static double bench_mma(const Gpu& gpu) {
    int blocks = full_wave(gpu, mma_kernel);
    int iters = 1024;
    float ms = calibrated_ms(iters, 5.f, [&](int n) {
        mma_kernel<<<blocks, kThreads>>>(gpu.sink, 0x1234u, n);
        CHECK_LAUNCH();
    });
    double warps = (double)blocks * kThreads / 32;
    return kMmaFlops * kMmaChains * iters * warps / (ms * 1e-3) / 1e12;
}

// ---------------------------------------------------------------- BF16 tensor cores (wgmma)
// Hopper's full tensor-core rate needs wgmma (sm_90a): a warpgroup of 4 warps multiplies 64 x 16
// by 16 x 256 per instruction, both operands read from shared memory through descriptors. The
// values do not matter for speed; the operands are small bf16 numbers without swizzle.

constexpr double kWgmmaFlops = 2.0 * 64 * 256 * 16;  // one m64n256k16
constexpr int kWgmmaPerGroup = 8;                     // products between two waits

// The 128 accumulators as the asm's read-write operands d[0] .. d[127].
#define S2S_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define S2S_F16(i) S2S_F4(i), S2S_F4(i + 4), S2S_F4(i + 8), S2S_F4(i + 12)
#define S2S_F64(i) S2S_F16(i), S2S_F16(i + 16), S2S_F16(i + 32), S2S_F16(i + 48)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 }, %128, %129, 1, 1, 1, 0, 0;\n"
        : S2S_F64(0), S2S_F64(64)
        : "l"(desc_a), "l"(desc_b));
}

// No-swizzle K-major descriptor: 8 x 16-byte core matrices, LBO = 128 bytes between the two along
// K, SBO = 256 bytes between 8-row groups.
__device__ __forceinline__ uint64_t plain_desc(const void* p) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>(128 >> 4) << 16 |
           static_cast<uint64_t>(256 >> 4) << 32;
}
#endif

__global__ void wgmma_kernel(float* sink, int iters) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(128) unsigned short a[64 * 16];
    __shared__ __align__(128) unsigned short b[256 * 16];
    for (int i = threadIdx.x; i < 256 * 16; i += blockDim.x) {
        b[i] = 0x3c00 + (i & 7);
        if (i < 64 * 16) a[i] = 0x3c00 - (i & 7);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma
    __syncthreads();
    const uint64_t da = plain_desc(a);
    const uint64_t db = plain_desc(b);
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < kWgmmaPerGroup; ++k) wgmma_n256(d, da, db);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += d[i];
    if (s == SENTINEL) sink[0] = s;
#endif
}

// 1 where wgmma_kernel was compiled with its body (sm_90a), 0 elsewhere.
__global__ void wgmma_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}

static bool wgmma_compiled_in() {
    int* flag = nullptr;
    int host = 0;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    wgmma_probe<<<1, 1>>>(flag);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(flag));
    return host == 1;
}

static double bench_wgmma(const Gpu& gpu) {
    int blocks = full_wave(gpu, wgmma_kernel);
    int iters = 256;
    float ms = calibrated_ms(iters, 5.f, [&](int n) {
        wgmma_kernel<<<blocks, kThreads>>>(gpu.sink, n);
        CHECK_LAUNCH();
    });
    double warpgroups = (double)blocks * kThreads / 128;
    return kWgmmaFlops * kWgmmaPerGroup * iters * warpgroups / (ms * 1e-3) / 1e12;
}

// ---------------------------------------------------------------- main

static std::string json_escape(const char* s) {
    std::string out;
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\') out += '\\';
        if ((unsigned char)*s >= 0x20) out += *s;
    }
    return out;
}

int main(int argc, char** argv) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count == 0) {
        std::fprintf(stderr, "microbench: no CUDA device found\n");
        return 1;
    }
    Gpu gpu{};
    CHECK(cudaSetDevice(0));
    CHECK(cudaGetDeviceProperties(&gpu.prop, 0));
    if (argc > 1 && std::string(argv[1]) == "--name") {  // lets a caller look up its cache
        std::printf("%s\n", gpu.prop.name);
        return 0;
    }
    CHECK(cudaDeviceGetAttribute(&gpu.clock_khz, cudaDevAttrClockRate, 0));
    CHECK(cudaMalloc(&gpu.sink, sizeof(float)));
    std::fprintf(stderr, "microbench: %s, %d SMs, sm_%d%d\n", gpu.prop.name,
                 gpu.prop.multiProcessorCount, gpu.prop.major, gpu.prop.minor);

    double copy = bench_copy(gpu);
    progress(1, "device-to-device copy", copy, "GB/s");
    double fp32 = bench_fp32(gpu);
    progress(2, "FP32 FMA", fp32, "TFLOP/s");
    double smem = bench_smem(gpu);
    progress(3, "shared memory", smem, "GB/s");
    double l2 = bench_l2(gpu);
    progress(4, "L2 read", l2, "GB/s");

    Latency l1_lat = chase(gpu, 16 << 10, 100000, false, false);
    progress(5, "L1 latency", l1_lat.ns, "ns");
    size_t l2_region = std::min<size_t>(1 << 20, gpu.prop.l2CacheSize / 4);
    Latency l2_lat = chase(gpu, l2_region, 20000, true, false);
    progress(6, "L2 latency", l2_lat.ns, "ns");
    size_t hbm_region = std::max<size_t>(size_t(64) << 20, 2 * (size_t)gpu.prop.l2CacheSize);
    Latency hbm_lat = chase(gpu, hbm_region, 4096, true, true);
    progress(7, "DRAM latency", hbm_lat.ns, "ns");

    bool has_mma = gpu.prop.major >= 8 && mma_compiled_in();
    double mma = has_mma ? bench_mma(gpu) : 0.0;
    if (has_mma) {
        progress(8, "BF16 mma.sync", mma, "TFLOP/s");
    } else {
        std::fprintf(stderr, "[8/%d] BF16 mma.sync: skipped (needs sm_80 or newer)\n", kTotal);
    }
    bool has_wgmma = gpu.prop.major == 9 && wgmma_compiled_in();
    double wgmma = has_wgmma ? bench_wgmma(gpu) : 0.0;
    if (has_wgmma) {
        progress(9, "BF16 wgmma", wgmma, "TFLOP/s");
    } else {
        std::fprintf(stderr, "[9/%d] BF16 wgmma: skipped (needs a Hopper GPU and sm_90a)\n", kTotal);
    }
    std::fprintf(stderr, "[10/%d] done\n", kTotal);
    CHECK(cudaFree(gpu.sink));

    std::printf("{\"device\": \"%s\", \"sm_count\": %d, \"clock_mhz\": %.0f, ",
                json_escape(gpu.prop.name).c_str(), gpu.prop.multiProcessorCount,
                gpu.clock_khz / 1000.0);
    std::printf("\"copy_gbs\": %.1f, \"fp32_tflops\": %.2f, \"smem_gbs\": %.1f, \"l2_gbs\": %.1f, ",
                copy, fp32, smem, l2);
    std::printf("\"latency_l1_ns\": %.2f, \"latency_l2_ns\": %.2f, \"latency_hbm_ns\": %.2f, ",
                l1_lat.ns, l2_lat.ns, hbm_lat.ns);
    std::printf("\"latency_l1_cycles\": %.1f, \"latency_l2_cycles\": %.1f, "
                "\"latency_hbm_cycles\": %.1f, ",
                l1_lat.cycles, l2_lat.cycles, hbm_lat.cycles);
    if (has_mma) std::printf("\"bf16_mma_tflops\": %.1f, ", mma);
    else std::printf("\"bf16_mma_tflops\": null, ");
    if (has_wgmma) std::printf("\"bf16_wgmma_tflops\": %.1f}\n", wgmma);
    else std::printf("\"bf16_wgmma_tflops\": null}\n");
    return 0;
}
