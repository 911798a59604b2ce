/* The project's check: compare each runner's output with a CPU computation; exit 1 on a mismatch. */
#include <cmath>
#include <cstdio>
#include "norm_api.h"

int main()
{
    int bad = 0, rows = 0, cols = 0;
    std::vector<float> y = run_scale_rows(&rows, &cols);
    for (int r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int c = 0; c < cols; c++) ss += nrm_input((long)r * cols + c) * nrm_input((long)r * cols + c);
        double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
        for (int c = 0; c < cols; c++) {
            double want = nrm_input((long)r * cols + c) * inv;
            if (std::fabs(y[(size_t)r * cols + c] - want) > 1e-4 + 1e-3 * std::fabs(want) && bad++ < 5)
                printf("scale_rows[%d][%d] = %g, want %g\n", r, c, y[(size_t)r * cols + c], want);
        }
    }
    long n = 0;
    std::vector<double> sp = run_softplus(&n);
    for (long i = 0; i < n; i++) {
        double want = std::log1p(std::exp(nrm_input(i)));
        if (std::fabs(sp[i] - want) > 1e-12 + 1e-12 * std::fabs(want) && bad++ < 5)
            printf("softplus[%ld] = %.17g, want %.17g\n", i, sp[i], want);
    }
    printf(bad ? "CHECK FAILED (%d)\n" : "CHECK PASSED\n", bad);
    return bad ? 1 : 0;
}
