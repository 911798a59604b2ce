// Device helpers shared by the project's kernels.
#pragma once

__device__ __forceinline__ float leaky(float x) { return x > 0.0f ? x : LEAKY_SLOPE * x; }
