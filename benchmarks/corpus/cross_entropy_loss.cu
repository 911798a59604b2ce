// Per-row softmax cross-entropy loss from logits (B x V) and integer class targets:
// loss[b] = logsumexp(logits[b, :]) - logits[b, target[b]].
// Style: one thread per sample, numerically-stable max-subtraction, row pointer computed once.
#include <math.h>

// @warpforge size B = 4096
// @warpforge size V = 8192
// @warpforge arg logits: in float[B*V] normal(0, 4)
// @warpforge arg targets: in int[B] int(0, V)
// @warpforge arg losses: out float[B]
// @warpforge arg B = B
// @warpforge arg V = V
// @warpforge launch grid=cdiv(B, 128), block=128
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 4 * B * V
// @warpforge bytes (B * V + 2 * B) * sizeof(float)
__global__ void cross_entropy_forward(const float* logits, const int* targets, float* losses,
                                      int B, int V)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B) {
        const float* row = logits + (size_t)b * V;
        float maxv = row[0];
        for (int v = 1; v < V; v++) {
            maxv = fmaxf(maxv, row[v]);
        }
        float sumexp = 0.0f;
        for (int v = 0; v < V; v++) {
            sumexp += expf(row[v] - maxv);
        }
        int t = targets[b];
        losses[b] = logf(sumexp) + maxv - row[t];
    }
}
