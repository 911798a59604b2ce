// 7-point 3D stencil in double precision, out = c0 * u + c1 * (sum of the 6 face neighbours)
// inside an nz x ny x nx box (x fastest), boundary points copied. HPC-code style: a 3D grid of
// 8x8x8 blocks, `long` sizes and linear indices throughout, one thread per point.
// @warpforge size NZ = 256
// @warpforge size NY = 256
// @warpforge size NX = 256
// @warpforge arg u: in double[NZ*NY*NX] uniform(-1, 1)
// @warpforge arg unew: out double[NZ*NY*NX]
// @warpforge arg nx = NX
// @warpforge arg ny = NY
// @warpforge arg nz = NZ
// @warpforge arg c0 = 0.4
// @warpforge arg c1 = 0.1
// @warpforge launch grid=(cdiv(NX, 8), cdiv(NY, 8), cdiv(NZ, 8)), block=(8, 8, 8)
// @warpforge tol rtol=1e-10 atol=1e-12
// @warpforge flops 8 * NX * NY * NZ
// @warpforge bytes 2 * NX * NY * NZ * sizeof(double)
__global__ void stencil7_3d(const double* u, double* unew, long nx, long ny, long nz, double c0, double c1)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    long j = blockIdx.y * (long)blockDim.y + threadIdx.y;
    long k = blockIdx.z * (long)blockDim.z + threadIdx.z;

    if (i < nx && j < ny && k < nz) {
        long plane = nx * ny;
        long idx = k * plane + j * nx + i;
        if (i == 0 || j == 0 || k == 0 || i == nx - 1 || j == ny - 1 || k == nz - 1) {
            unew[idx] = u[idx];
        } else {
            unew[idx] = c0 * u[idx]
                      + c1 * (u[idx - 1] + u[idx + 1] + u[idx - nx] + u[idx + nx] + u[idx - plane] + u[idx + plane]);
        }
    }
}
