// Broken: a compile that does not end in any reasonable time. Each constant below asks
// the host compiler to try 8 billion steps of arithmetic at compile time (static
// constant initialisation) before it gives up and leaves the work to run time: about
// a quarter of a minute each, forty of them. The grader stops nvcc at its compile
// deadline and says why.
#include <cuda_runtime.h>

constexpr unsigned long long churn(unsigned long long seed) {
    unsigned long long s = seed;
    for (int j = 0; j < 40000; ++j)
        for (int i = 0; i < 200000; ++i) s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s;
}

#define ROW(k) static const unsigned long long kRow##k = churn(k);
#define TEN(t) ROW(t##0) ROW(t##1) ROW(t##2) ROW(t##3) ROW(t##4) ROW(t##5) ROW(t##6) ROW(t##7) ROW(t##8) ROW(t##9)
TEN(1) TEN(2) TEN(3) TEN(4)
#define SUM10(t) (kRow##t##0 ^ kRow##t##1 ^ kRow##t##2 ^ kRow##t##3 ^ kRow##t##4 ^ kRow##t##5 ^ kRow##t##6 ^ \
                  kRow##t##7 ^ kRow##t##8 ^ kRow##t##9)

__global__ void add(const float* a, const float* b, float* c, int n, float bias) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + bias;
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    unsigned long long mix = SUM10(1) ^ SUM10(2) ^ SUM10(3) ^ SUM10(4);
    add<<<(n + 255) / 256, 256>>>(a, b, c, n, mix == 1 ? 1.0f : 0.0f);
}
