"""Pointer access analysis (roles of buffers) and scope declarations carried into extracted kernels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from warpforge.cuda import parse
from warpforge.cuda.access import param_access
from warpforge.cuda.extract import standalone

WRITES = """struct F { float a; };
__global__ void k(F* fields, F* arrow, float* post, float* later, float* ta, float* tb, const float* r,
                  float* only_read, int c) {
  int i = threadIdx.x;
  fields[i].a = 1; arrow->a = 2; *post++ = 3;
  float* q; q = later + i; q[0] = 4;
  float* t = c ? ta : tb; t[i] = r[i] + only_read[i];
  float e = expf(only_read[i] - 1.0f);
  (void)e;
}
"""


def test_writes_through_fields_post_increment_late_and_conditional_aliases() -> None:
    m = parse(WRITES)
    acc = param_access(WRITES, m.kernels[0])
    for name in ("fields", "arrow", "post", "later", "ta", "tb"):
        assert acc[name].write, name
    assert not acc["r"].write and acc["r"].read
    # an element passed by value to a math function is a read, not an escape of the pointer
    assert not acc["only_read"].write and not acc["only_read"].escapes


CG = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
using namespace std;
__global__ void k(float* p) { cg::thread_block b = cg::this_thread_block(); b.sync(); p[0] = 1; }
int main() { return 0; }
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_namespace_alias_and_using_directives_travel_with_the_kernel(tmp_path: Path) -> None:
    m = parse(CG)
    tu = standalone(CG, m, m.kernels[0])
    assert "namespace cg = cooperative_groups;" in tu and "using namespace std;" in tu
    assert "int main" not in tu
    (tmp_path / "k.cu").write_text(tu)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


SPECIALIZED = """template <int N> struct Depth { static constexpr int value = Depth<N - 1>::value + 1; };
template <> struct Depth<0> { static constexpr int value = 0; };
__global__ void k(int* out) { out[0] = Depth<3>::value; }
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_template_specializations_travel_with_the_kernel(tmp_path: Path) -> None:
    m = parse(SPECIALIZED)
    names = [d.names for d in m.declarations]
    assert ("Depth",) in names and names.count(("Depth",)) == 2  # the primary template and its specialization
    tu = standalone(SPECIALIZED, m, m.kernels[0])
    assert "struct Depth<0>" in tu
    (tmp_path / "k.cu").write_text(tu)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
