// Hand-tuned 7-point 3D stencil (double): 2.5D blocking. A 32x8 block owns a 32x8 column of the
// box and marches up a 32-plane slab in z; the z-1, z and z+1 values of its own point stay in
// registers (the next plane is prefetched before the barrier), the current plane is staged with
// its x/y halo in shared memory, so every value is read from DRAM about once.
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
// @warpforge launch grid=(cdiv(NX, 32), cdiv(NY, 8), cdiv(NZ, 32)), block=(32, 8)
// @warpforge tol rtol=1e-10 atol=1e-12
// @warpforge flops 8 * NX * NY * NZ
// @warpforge bytes 2 * NX * NY * NZ * sizeof(double)
__global__ void __launch_bounds__(256) stencil7_3d(const double* u, double* unew, long nx, long ny, long nz, double c0, double c1)
{
    constexpr int BX = 32, BY = 8, ZSLAB = 32;
    __shared__ double plane_s[BY + 2][BX + 2];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const long i = blockIdx.x * (long)BX + tx;
    const long j = blockIdx.y * (long)BY + ty;
    const long z0 = blockIdx.z * (long)ZSLAB;
    const long z1 = z0 + ZSLAB < nz ? z0 + ZSLAB : nz;
    const long plane = nx * ny;
    const bool inside = i < nx && j < ny;
    const bool interior_xy = i > 0 && j > 0 && i < nx - 1 && j < ny - 1;

    long idx = z0 * plane + j * nx + i;
    double below = (inside && z0 > 0) ? u[idx - plane] : 0.0;
    double cur = inside ? u[idx] : 0.0;

    for (long k = z0; k < z1; ++k, idx += plane) {
        const double above = (inside && k + 1 < nz) ? u[idx + plane] : 0.0;

        __syncthreads();   // the previous plane's readers are done
        plane_s[ty + 1][tx + 1] = cur;
        if (ty == 0)
            plane_s[0][tx + 1] = (i < nx && j > 0) ? u[idx - nx] : 0.0;
        if (ty == BY - 1)
            plane_s[BY + 1][tx + 1] = (i < nx && j + 1 < ny) ? u[idx + nx] : 0.0;
        if (tx == 0)
            plane_s[ty + 1][0] = (j < ny && i > 0) ? u[idx - 1] : 0.0;
        if (tx == BX - 1)
            plane_s[ty + 1][BX + 1] = (j < ny && i + 1 < nx) ? u[idx + 1] : 0.0;
        __syncthreads();

        if (inside) {
            if (!interior_xy || k == 0 || k == nz - 1) {
                unew[idx] = cur;
            } else {
                unew[idx] = c0 * cur
                          + c1 * (plane_s[ty + 1][tx] + plane_s[ty + 1][tx + 2] + plane_s[ty][tx + 1]
                                  + plane_s[ty + 2][tx + 1] + below + above);
            }
        }
        below = cur;
        cur = above;
    }
}
