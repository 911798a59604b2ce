/* The norm kernels, written C-style with macros, and their runners. */
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "vec_ops.cuh"
#include "norm_api.h"

#define CUDA_OK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

using elem_t = float;

/* y[r][c] = x[r][c] / sqrt(mean of row r's squares + eps), one thread per row */
__global__ void scale_rows(elem_t* __restrict__ y, const elem_t* __restrict__ x, int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float acc = 0.0f;
    for (int c = 0; c < cols; c++) acc += nrm::square(x[row * cols + c]);
    const float inv = 1.0f / sqrtf(acc / cols + NORM_EPS);
    for (int c = 0; c < cols; c++) y[row * cols + c] = x[row * cols + c] * inv;
}

/* double-precision softplus: fast math must leave it alone */
__global__ void softplus_fp64(double* out, const double* in, long n)
{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = log1p(exp(in[i])) / 1.0;
}

std::vector<float> run_scale_rows(int* rows_out, int* cols_out)
{
    const int ROWS = 4096, COLS = 256;
    std::vector<float> h((size_t)ROWS * COLS);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)nrm_input((long)i);
    elem_t *dx, *dy;
    CUDA_OK(cudaMalloc((void**)&dx, sizeof(elem_t) * ROWS * COLS));
    CUDA_OK(cudaMalloc((void**)&dy, sizeof(elem_t) * ROWS * COLS));
    CUDA_OK(cudaMemcpy(dx, h.data(), sizeof(elem_t) * ROWS * COLS, cudaMemcpyHostToDevice));
    dim3 block(128);
    dim3 grid((ROWS + block.x - 1) / block.x);
    scale_rows<<<grid, block>>>(dy, dx, ROWS, COLS);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(h.data(), dy, sizeof(elem_t) * ROWS * COLS, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dy);
    *rows_out = ROWS;
    *cols_out = COLS;
    return h;
}

std::vector<double> run_softplus(long* n_out)
{
    const long N = 300000;
    std::vector<double> h(N);
    for (long i = 0; i < N; i++) h[i] = nrm_input(i);
    double *din, *dout;
    CUDA_OK(cudaMalloc((void**)&din, sizeof(double) * N));
    CUDA_OK(cudaMalloc((void**)&dout, sizeof(double) * N));
    CUDA_OK(cudaMemcpy(din, h.data(), sizeof(double) * N, cudaMemcpyHostToDevice));
    softplus_fp64<<<(N + 255) / 256, 256>>>(dout, din, N);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(h.data(), dout, sizeof(double) * N, cudaMemcpyDeviceToHost));
    cudaFree(din);
    cudaFree(dout);
    *n_out = N;
    return h;
}
