"""Input distributions inferred from how the host fills the inputs (``spec.domains``).

Self-written host programs in several styles: a ``generate`` lambda of letters copied from ``h.data()``, an
index loop with ``rand() % K`` into the device buffer's source, ``(float)rand() / RAND_MAX``, a
``std::uniform_int_distribution`` and a ``uniform_real_distribution`` with constant bounds, a named host
constant in the range, and the fills that must leave the default alone (the loop index, values that wrap in
the element type, an output buffer).
"""

from __future__ import annotations

import pytest

from warpforge.cuda import SourceText, parse
from warpforge.spec import KernelSpec, build_spec

KERNEL = """
__global__ void k(const ELEM* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)a[i];
}
"""

HOST = """
#include <vector>
#include <random>
#include <algorithm>
const int LIMIT = 40;
int main() {
    const int n = 1 << 20;
    std::vector<ELEM> h(n);
    FILL
    ELEM* d_a; int* d_out;
    cudaMalloc(&d_a, n * sizeof(ELEM));
    cudaMalloc(&d_out, n * sizeof(int));
    cudaMemcpy(d_a, h.data(), n * sizeof(ELEM), cudaMemcpyHostToDevice);
    k<<<(n + 255) / 256, 256>>>(d_a, d_out, n);
    return 0;
}
"""


def spec_for(elem: str, fill: str) -> KernelSpec:
    text = (KERNEL + HOST).replace("ELEM", elem).replace("FILL", fill)
    model = parse(text)
    kernel = model.kernel("k")
    assert kernel is not None
    return build_spec(SourceText(text), model, kernel, "t.cu")


def dist(spec: KernelSpec, name: str) -> str:
    arg = next(a for a in spec.args if a.name == name)
    assert arg.distribution is not None
    d = arg.distribution
    return f"{d.kind}({d.a}, {d.b})"


@pytest.mark.parametrize(("elem", "fill", "want"), [
    # letters, by a generate lambda over the host vector the device buffer is copied from
    ("char", "std::generate(begin(h), end(h), []() { return 'a' + (rand() % 26); });", "int(97, 123)"),
    ("char", "generate(h.begin(), h.end(), [] { return 'A' + rand() % 26; });", "int(65, 91)"),
    # an index loop; a named host constant in the range
    ("int", "for (int i = 0; i < n; i++) { h[i] = rand() % LIMIT - 20; }", "int(-20, 20)"),
    ("float", "for (int i = 0; i < n; ++i) h[i] = (float)rand() / RAND_MAX;", "uniform(0, 1)"),
    ("float", "for (int i = 0; i < n; ++i) h[i] = static_cast<float>(rand()) / static_cast<float>(RAND_MAX) * 2.0f "
              "- 1.0f;", "uniform(-1, 1)"),
    # floats holding small integers are drawn as such
    ("float", "for (int i = 0; i < n; ++i) h[i] = rand() % 10;", "int(0, 10)"),
    # the standard library's distributions with constant bounds
    ("int", "std::mt19937 gen(1); std::uniform_int_distribution<int> pick(3, 9);\n"
            "    for (int i = 0; i < n; ++i) h[i] = pick(gen);", "int(3, 10)"),
    ("float", "std::mt19937 gen(1); std::uniform_real_distribution<float> u{-0.5f, 0.5f};\n"
              "    std::generate(h.begin(), h.end(), [&]() { return u(gen); });", "uniform(-0.5, 0.5)"),
])
def test_the_hosts_fill_gives_the_inputs_distribution(elem: str, fill: str, want: str) -> None:
    assert dist(spec_for(elem, fill), "a") == want


@pytest.mark.parametrize(("elem", "fill"), [
    ("int", "for (int i = 0; i < n; ++i) h[i] = i;"),  # the loop index: not a random draw
    ("char", "std::generate(begin(h), end(h), []() { return 'a' + rand() % 200; });"),  # wraps in a char
    ("int", "for (int i = 0; i < n; ++i) h[i] = f(i);"),  # a value computed elsewhere
    ("int", ""),  # not filled here
])
def test_fills_that_cannot_be_told_keep_the_default(elem: str, fill: str) -> None:
    assert dist(spec_for(elem, fill), "a") in ("int(0, 100)", "uniform(-1, 1)")


def test_an_output_gets_no_distribution_from_a_fill() -> None:
    spec = spec_for("int", "for (int i = 0; i < n; ++i) h[i] = rand() % 5;")
    out = next(a for a in spec.args if a.name == "out")
    assert out.distribution is None
