// The project's own check: run each kernel through the library and compare with a CPU reference.
#include <cmath>
#include <cstdio>
#include <vector>

#include "act/act.h"

static float leaky_ref(float x) { return x > 0.0f ? x : 0.01f * x; }

static int compare(const char* what, const std::vector<float>& got, const std::vector<double>& want, double rtol,
                   double atol)
{
    if (got.size() != want.size()) {
        std::printf("%s: %zu outputs, want %zu\n", what, got.size(), want.size());
        return 1;
    }
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
            if (bad < 5) std::printf("%s[%zu] = %.7g, want %.7g\n", what, i, got[i], want[i]);
            ++bad;
        }
    }
    std::printf("%s: %s (%zu of %zu outside tolerance)\n", what, bad ? "FAIL" : "ok", bad, got.size());
    return bad ? 1 : 0;
}

int main()
{
    int failed = 0;
    {
        std::vector<float> got = act::gelu_leaky();
        std::vector<double> want(got.size());
        for (size_t i = 0; i < want.size(); ++i) {
            double x = act::input((long)i);
            double g = 0.5 * x * (1.0 + std::tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
            want[i] = leaky_ref((float)(g / 2.0));
        }
        failed |= compare("gelu_leaky", got, want, 1e-3, 1e-4);
    }
    {
        std::vector<float> got = act::row_expsum();
        std::vector<double> want(got.size());
        for (size_t r = 0; r < want.size(); ++r) {
            double s = 0.0;
            for (int c = 0; c < act::kCols; ++c) s += std::exp(act::input((long)(r * act::kCols + c)) * 0.25 - 1.0);
            want[r] = s;
        }
        failed |= compare("row_expsum", got, want, 1e-3, 1e-3);
    }
    std::printf(failed ? "CHECK FAILED\n" : "CHECK PASSED\n");
    return failed;
}
