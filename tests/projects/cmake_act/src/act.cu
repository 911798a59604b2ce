// Kernels of the act library and the launchers that run them on host data.
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>

#include "act/act.h"
#include "act/device_math.cuh"

// the library's element type: the kernels are written against it, the host API uses float
typedef float real_t;

__device__ float gelu_tanh(float x)
{
    const float k = 0.7978845608f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_leaky_kernel(real_t* out, const real_t* x, real_t scale, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        real_t g = gelu_tanh(x[i]) / scale;
        out[i] = leaky(g);
    }
}

template <typename T>
__global__ void row_expsum_kernel(T* out, const T* x, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    T s = 0;
    for (int c = 0; c < cols; ++c)
        s += expf(x[(size_t)r * cols + c] - T(1));
    out[r] = s;
}

static void check(cudaError_t e, const char* what)
{
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

static void gelu_leaky_device(real_t* d_out, const real_t* d_x, real_t scale, int n)
{
    const int threads = 256;
    gelu_leaky_kernel<<<(n + threads - 1) / threads, threads>>>(d_out, d_x, scale, n);
}

std::vector<float> act::gelu_leaky()
{
    const int n = 1 << 20;
    std::vector<real_t> x(n);
    for (int i = 0; i < n; ++i) x[i] = act::input(i);
    real_t* d_x = nullptr;
    real_t* d_out = nullptr;
    check(cudaMalloc(&d_x, n * sizeof(real_t)), "cudaMalloc");
    check(cudaMalloc(&d_out, n * sizeof(real_t)), "cudaMalloc");
    check(cudaMemcpy(d_x, x.data(), n * sizeof(real_t), cudaMemcpyHostToDevice), "copy in");
    gelu_leaky_device(d_out, d_x, 2.0f, n);
    check(cudaGetLastError(), "gelu_leaky_kernel");
    std::vector<float> out(n);
    check(cudaMemcpy(out.data(), d_out, n * sizeof(real_t), cudaMemcpyDeviceToHost), "copy out");
    cudaFree(d_x);
    cudaFree(d_out);
    return out;
}

std::vector<float> act::row_expsum()
{
    const int rows = 1000;
    const int cols = 1536;
    std::vector<float> x((size_t)rows * cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = act::input((long)i) * 0.25f;
    float* d_x = nullptr;
    float* d_out = nullptr;
    check(cudaMalloc(&d_x, (size_t)rows * cols * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&d_out, rows * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "copy in");
    constexpr int kRowsPerBlock = 128;
    row_expsum_kernel<float><<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kRowsPerBlock>>>(d_out, d_x, rows, cols);
    check(cudaGetLastError(), "row_expsum_kernel");
    std::vector<float> out(rows);
    check(cudaMemcpy(out.data(), d_out, rows * sizeof(float), cudaMemcpyDeviceToHost), "copy out");
    cudaFree(d_x);
    cudaFree(d_out);
    return out;
}
