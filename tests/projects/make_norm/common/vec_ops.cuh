/* Warp-level helpers of the norm kernels. */
#ifndef VEC_OPS_CUH
#define VEC_OPS_CUH

namespace nrm {
__device__ __forceinline__ float square(float v) { return v * v; }
}  // namespace nrm

#endif
