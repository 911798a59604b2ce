// Fully connected layer with a fused epilogue, Y = relu(X * W^T + bias), in the nn.Linear layout
// (X is M x K, W is N x K, both row-major). Written as a templated kernel, the way a small
// deep-learning library instantiates one body for float/double; one thread per output.
// Tolerance: 2048-term dot products (|y| ~ 15) reordered move by ~1e-4.
// @warpforge size M = 2048
// @warpforge size N = 2048
// @warpforge size K = 2048
// @warpforge template T = float
// @warpforge arg X: in float[M*K] uniform(-1, 1)
// @warpforge arg W: in float[N*K] uniform(-1, 1)
// @warpforge arg bias: in float[N] uniform(-1, 1)
// @warpforge arg Y: out float[M*N]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(N, 16), cdiv(M, 16)), block=(16, 16)
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * M * N * K + 2 * M * N
// @warpforge bytes (M * K + N * K + N + M * N) * sizeof(float)
template <typename T>
__global__ void linear_bias_relu(const T* X, const T* W, const T* bias, T* Y, int M, int N, int K)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m < M && n < N) {
        T acc = T(0);
        for (int kk = 0; kk < K; ++kk)
            acc += X[m * K + kk] * W[n * K + kk];
        acc += bias[n];
        Y[m * N + n] = acc > T(0) ? acc : T(0);
    }
}
