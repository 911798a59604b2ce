// One Jacobi sweep of the 2D Laplace equation on an ny x nx grid: each interior point becomes
// the mean of its four neighbours, boundary points are copied. Textbook CUDA-course style:
// (x, y) from a 2D grid of 32x8 blocks, early returns, one thread per point.
// @warpforge size NY = 4096
// @warpforge size NX = 4096
// @warpforge arg in: in float[NY*NX] uniform(-1, 1)
// @warpforge arg out: out float[NY*NX]
// @warpforge arg nx = NX
// @warpforge arg ny = NY
// @warpforge launch grid=(cdiv(NX, 32), cdiv(NY, 8)), block=(32, 8)
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 4 * NX * NY
// @warpforge bytes 2 * NX * NY * sizeof(float)
__global__ void jacobi2d_step(const float* in, float* out, int nx, int ny)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;

    int idx = y * nx + x;
    if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
        out[idx] = in[idx];
        return;
    }
    out[idx] = 0.25f * (in[idx - 1] + in[idx + 1] + in[idx - nx] + in[idx + nx]);
}
