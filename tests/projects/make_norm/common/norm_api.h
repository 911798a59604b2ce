/* Runners of the norm kernels: each makes its own input with nrm_input, runs, and returns the output. */
#ifndef NORM_API_H
#define NORM_API_H
#include <vector>

static inline double nrm_input(long i) { return (double)((i * 2654435761L) % 1000L) / 250.0 - 2.0; }

std::vector<float> run_scale_rows(int* rows_out, int* cols_out);
std::vector<double> run_softplus(long* n_out);
#endif
