// Host API of the act library: each call makes its inputs with `act::input`, runs one kernel and
// returns the output, so the check program can compute the same thing on the CPU.
#pragma once
#include <cmath>
#include <vector>

namespace act {
// a deterministic input in [-4, 4): what both the library and its check use
inline float input(long i) { return static_cast<float>((i * 7919L) % 8000L) / 1000.0f - 4.0f; }
// out[i] = leaky(gelu(x[i]) / scale) over 1M elements, with scale = 2
std::vector<float> gelu_leaky();
// out[r] = sum over c of exp(x[r, c] - 1) for a 1000 x 1536 matrix
std::vector<float> row_expsum();
constexpr int kCols = 1536;
}
