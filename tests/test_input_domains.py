"""Issue 30 on the CPU: every input stays inside the domain its spec declares, and every parameter gets its
real type.

- the sensitivity run (``inputs.perturb_tail``) keeps ``int(lo, hi)`` inputs inside [lo, hi) whatever their
  element type (ids stored as floats included), moves floating-point data as before, and leaves out (with the
  reason) a buffer whose domain it cannot keep; the perturbed (odd) size draws its domains from the perturbed
  sizes;
- scalar and pointer types resolve through template arguments, typedefs, ``using`` and enums (an enum is passed
  as its integer type, an enumerator by its value); what cannot be resolved is an error at its line;
- a crash of the original names the run and, when it runs cleanly on plain inputs, the inputs as the cause;
  end to end with real nvcc builds on the CPU stand-in for pycuda (``fake_pycuda``: its ``gather_rows`` reads
  outside the table, a sticky illegal address, exactly when a GPU would).

The GPU half (the four self-written kernels verified on a GPU) is tests/test_gpu_domains.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, needs_nvcc
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator
from warpforge.gpu.inputs import (
    TAIL,
    TAIL_SCALE,
    ArgLayout,
    InputError,
    Layout,
    bfloat16_to_float32,
    generate,
    perturb_tail,
    tail_plan,
)
from warpforge.gpu.reports import crash_context
from warpforge.gpu.timing import TimingSettings
from warpforge.spec import SpecError, load_spec

DOMAINS = ROOT / "tests" / "fixtures" / "domains"
FAKE_PYCUDA = ROOT / "tests" / "fake_pycuda"


# --------------------------------------------------------------------------- input domains
def test_float_stored_ids_are_reflected_inside_their_range_and_data_still_moves_far() -> None:
    ids = ArgLayout("ids", "in", "float32", 4096, dist=("int", 0.0, 50000.0))
    x = generate(ids, 0)
    assert np.all(x == np.floor(x)) and x.min() >= 0 and x.max() < 50000
    y = perturb_tail(ids, x)
    assert np.array_equal(y[:-TAIL], x[:-TAIL])
    assert np.array_equal(y[-TAIL:], 49999 - x[-TAIL:])  # moved, and still a row of the table
    assert y.min() >= 0 and y.max() < 50000
    # the same for float64 and float16 ids, and bfloat16 ids within what bfloat16 holds exactly
    for dtype, hi in (("float64", 1 << 30), ("float16", 2048.0), ("bfloat16", 256.0)):
        a = ArgLayout("i", "in", dtype, 256, dist=("int", 0.0, float(hi)))
        d = generate(a, 1)
        p = perturb_tail(a, d)
        vals = bfloat16_to_float32(p) if dtype == "bfloat16" else p.astype(np.float64)
        assert vals.min() >= 0 and vals.max() < hi, dtype
        assert not np.array_equal(p[-TAIL:], d[-TAIL:]), dtype
    # data keeps its move of 10^4 times its scale
    data = ArgLayout("dout", "in", "float32", 100, dist=("uniform", 0.0, 1.0))
    dd = generate(data, 2)
    assert np.allclose(perturb_tail(data, dd)[-TAIL:] - dd[-TAIL:], TAIL_SCALE, rtol=1e-6)


def test_a_float_index_range_the_type_cannot_hold_exactly_is_refused() -> None:
    # bfloat16 rounds 999 to 1000: drawn ids could leave [0, 1000)
    with pytest.raises(InputError, match="cannot store exactly"):
        generate(ArgLayout("ids", "in", "bfloat16", 16, dist=("int", 0.0, 1000.0)), 0)
    with pytest.raises(InputError, match="cannot store exactly"):
        generate(ArgLayout("ids", "in", "float32", 16, dist=("int", 0.0, float(1 << 25))), 0)


def test_buffers_whose_domain_cannot_be_kept_are_left_out_with_the_reason() -> None:
    layout = Layout("spec", (
        ArgLayout("x", "in", "float32", 64, dist=("normal", 0.0, 1.0)),
        ArgLayout("flags", "in", "int8", 64, dist=("const", 1.0, 0.0)),
        ArgLayout("lens", "in", "int32", 64, dist=("uniform", 0.0, 9.0)),
        ArgLayout("one", "in", "float32", 64, dist=("int", 3.0, 4.0)),
        ArgLayout("idx", "in", "int64", 64, dist=("int", 0.0, 10.0)),
        ArgLayout("y", "out", "float32", 64),
    ))
    moved, left = tail_plan(layout)
    assert moved == ("x", "idx")
    assert set(left) == {"flags", "lens", "one"}
    assert "int(LO, HI)" in left["lens"] and "single value" in left["one"]
    for a in layout.buffers:
        if a.name in left:  # left exactly as drawn
            assert np.array_equal(perturb_tail(a, generate(a, 4)), generate(a, 4))


def test_the_odd_size_run_draws_its_domains_from_the_perturbed_sizes(tmp_path: Path) -> None:
    path = tmp_path / "gather.cu"
    path.write_text((DOMAINS / "embed_gather.cu").read_text().replace("size K = 50000", "size K = 1000"))
    spec = load_spec(path, "gather_rows")
    odd = spec.resolve(perturbed=True)
    k_odd = odd.sizes["K"]
    assert k_odd < 1000 and k_odd % 2 == 1
    layout = Layout.from_resolved(odd, "odd")
    ids = next(a for a in layout.buffers if a.name == "ids")
    assert ids.dist == ("int", 0.0, float(k_odd))  # the table's rows at this size, not the spec size's
    for seed in (0, 1):
        drawn = generate(ids, seed)
        moved = perturb_tail(ids, drawn)
        assert drawn.max() < k_odd and moved.max() < k_odd and moved.min() >= 0
        assert drawn.max() > 0.9 * k_odd  # the whole perturbed range is used


# --------------------------------------------------------------------------- types
def _spec_json(path: Path, kernel: str) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-m", "warpforge", "spec", str(path), "--kernel", kernel, "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "server"),
                                                                         os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stderr
    data: dict[str, object] = json.loads(r.stdout)
    return data


def _types(spec_json: dict[str, object]) -> dict[str, tuple[str, object]]:
    args = spec_json["args"]
    assert isinstance(args, list)
    return {a["name"]: (a["dtype"], a.get("value")) for a in args}


def test_spec_json_gives_the_fixtures_scalars_their_real_types() -> None:
    hist = _types(_spec_json(DOMAINS / "histogram_tpl.cu", "histogram"))
    assert hist["nbins"] == ("int32", "NB") and hist["n"] == ("int32", "N")
    assert hist["minvalue"][0] == "float32" and hist["hist"][0] == "int32"
    act = _types(_spec_json(DOMAINS / "act_enum.cu", "activate"))
    assert act["act"] == ("int32", "1")  # the enum's integer type; ACT_GELU by its value
    gather = _types(_spec_json(DOMAINS / "embed_gather.cu", "gather_rows"))
    assert gather["ids"][0] == "float32" and gather["m"][0] == "int32"


def test_an_unresolvable_template_type_is_an_error_at_its_line(tmp_path: Path) -> None:
    line_text = "// @warpforge template IndexType = int, input_t = float\n"
    text = (DOMAINS / "histogram_tpl.cu").read_text().replace(line_text, "")
    path = tmp_path / "hist.cu"
    path.write_text(text)
    with pytest.raises(SpecError) as e:
        load_spec(path, "histogram")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "arg nbins" in t)
    assert e.value.line == line
    assert "cannot tell the type of `nbins` (`IndexType`)" in str(e.value)
    assert "template IndexType = int" in str(e.value) and "arg nbins: int = ..." in str(e.value)


TYPES = """\
#include <cstdint>
typedef float real;
using index_t = long long;
enum class Mode : uint8_t { Sum, Max };
struct Params { int a; float b; };
// @warpforge size N = 4096
// @warpforge arg in: in real[N]
// @warpforge arg idx: in index_t[N] int(0, N)
// @warpforge arg out: out real[N]
// @warpforge arg n = N
// @warpforge arg mode = Mode::Max
// @warpforge arg scale = 2
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const real* in, const index_t* idx, real* out, index_t n, Mode mode, real scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = mode == Mode::Max ? in[idx[i]] * scale : in[i];
}
"""


def test_annotations_accept_the_files_own_types_and_enums(tmp_path: Path) -> None:
    path = tmp_path / "types.cu"
    path.write_text(TYPES)
    spec = load_spec(path, "k")
    got = {a.name: (a.dtype, a.value) for a in spec.args}
    assert got["in"][0] == "float32" and got["out"][0] == "float32" and got["idx"][0] == "int64"
    assert got["n"] == ("int64", "N") and got["mode"] == ("uint8", "1") and got["scale"] == ("float32", "2")
    assert str(spec.arg("in").distribution) == "uniform(-1, 1)"  # the default of the resolved type
    # an explicit scalar type must agree with the parameter's
    bad = TYPES.replace("arg scale = 2", "arg scale: int = 2")
    path.write_text(bad)
    with pytest.raises(SpecError, match="`scale` is declared `real scale` \\(float32\\)"):
        load_spec(path, "k")
    # a struct passed by value has no scalar type: an error at the kernel's line, never a silent float
    path.write_text(TYPES.replace("real scale)", "Params scale)"))
    with pytest.raises(SpecError, match="cannot tell the type of `scale` \\(`Params`\\)"):
        load_spec(path, "k")
    # an unknown element type is still an error at its line
    path.write_text(TYPES.replace("in real[N]", "in reel[N]"))
    with pytest.raises(SpecError, match="unknown element type `reel`") as e:
        load_spec(path, "k")
    assert e.value.line == 7


INFERRED = """\
enum Op { OP_ADD, OP_MUL = 4 };
template <typename IndexType, typename T>
__global__ void apply(T* y, const T* x, IndexType n, Op op) {
    IndexType i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = op == OP_MUL ? x[i] * x[i] : x[i] + x[i];
}

int main() {
    long long n = 1 << 20;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    apply<long long, float><<<(n + 255) / 256, 256>>>(y, x, n, OP_MUL);
    return 0;
}
"""


def test_inference_types_scalars_through_template_arguments_and_enums(tmp_path: Path) -> None:
    path = tmp_path / "apply.cu"
    path.write_text(INFERRED)
    got = _types(_spec_json(path, "apply"))
    assert got["n"] == ("int64", "n") and got["op"] == ("int32", "4")
    assert got["y"][0] == "float32" and got["x"][0] == "float32"


# --------------------------------------------------------------------------- crash reports
def test_a_crash_names_its_run_and_blames_the_inputs_when_the_plain_run_is_fine() -> None:
    during = {"side": "original", "variant": "spec", "seed": 0, "tail": True, "sizes": "M=4096, K=50000",
              "perturbed": ["ids", "table"], "left": {"flags": "x"}, "plain_ok": True}
    text = crash_context(during, 32, {"ids": "// @warpforge arg ids: in float[M] int(0, HI)"})
    assert text.startswith("the original kernel crashed in the sensitivity run at the spec size (M=4096, K=50000), "
                           "seed 0, with the last 32 elements of `ids`, `table` perturbed (`flags` left as drawn)")
    assert "runs cleanly on plain inputs at the spec size" in text and "the verification inputs" in text
    assert "`// @warpforge arg ids: in float[M] int(0, HI)`" in text
    # the candidate's crash, or the original's plain run: the run alone, nothing about inputs
    plain = crash_context({**during, "tail": False, "perturbed": [], "left": {}}, 32)
    assert plain == "the original kernel crashed in the verification run at the spec size (M=4096, K=50000), seed 0"
    odd = crash_context({**during, "tail": False, "variant": "odd"}, 32)
    assert "perturbed (odd) size" in odd and "`fixed`" in odd
    cand = crash_context({**during, "side": "candidate"}, 32)
    assert cand.startswith("the candidate crashed in the sensitivity run") and "cause" not in cand


# --------------------------------------------------------------------------- end to end on the CPU stand-in
@pytest.fixture(scope="module")
def fake_backend() -> Iterator[Backend]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"), env.get("PYTHONPATH", "")])
    b = Backend(worker_env=env, compile_workers=2, start_timeout=60)
    yield b
    b.close()


# events, never CUDA graphs: the stand-in has no graph capture (on a machine with a GPU, the worker would reach for
# the real driver's)
SETTINGS = EngineSettings(kernel_timeout=2.0, compile_timeout=60.0,
                          timing=TimingSettings(max_seconds=0.2, graph_below_ms=0.0))


@needs_nvcc
def test_float_ids_verify_end_to_end_and_an_undeclared_domain_is_named_as_the_cause(
        fake_backend: Backend, tmp_path: Path) -> None:
    small = (DOMAINS / "embed_gather.cu").read_text().replace("size M = 4096", "size M = 512") \
        .replace("size K = 50000", "size K = 5000").replace("size C = 64", "size C = 16")
    loop = asyncio.new_event_loop()
    try:
        path = tmp_path / "gather.cu"
        path.write_text(small)
        ev = Evaluator(path, "gather_rows", backend=fake_backend, settings=SETTINGS)
        try:
            base = loop.run_until_complete(ev.baseline())
            assert base.status == "ok", base.reason
            assert any(r.purpose == "sensitivity" for r in base.correctness.runs)  # the original ran it too
            good = loop.run_until_complete(ev.evaluate(ev.original.derive(block=("128",),
                                                                          grid=("cdiv(M*C, 128)",))))
            assert good.status == "ok", good.reason
            src = ev.original.source.replace("{", "{\n    if (m < 0) { wf_fake_skip_last = 1; }", 1)
            skip = ev.original.derive(source=f"__device__ int wf_fake_skip_last;\n{src}", family="skip-last")
            bad = loop.run_until_complete(ev.evaluate(skip))
            assert bad.status == "incorrect", (bad.status, bad.reason)
        finally:
            loop.run_until_complete(ev.close())
        # the same ids drawn from uniform(0, K): fine on plain inputs, out of the table once moved by 10^4 K
        path2 = tmp_path / "gather_uniform.cu"
        path2.write_text(small.replace("float[M] int(0, K)", "float[M] uniform(0, K)"))
        ev2 = Evaluator(path2, "gather_rows", backend=fake_backend, settings=SETTINGS)
        try:
            base2 = loop.run_until_complete(ev2.baseline())
        finally:
            loop.run_until_complete(ev2.close())
        assert base2.status == "crashed", (base2.status, base2.reason)
        why = base2.reason
        assert "the original kernel crashed in the sensitivity run at the spec size (M=512, K=5000, C=16), seed 0" \
            in why, why
        assert "`ids`, `table` perturbed" in why and "runs cleanly on plain inputs at the spec size" in why, why
        assert "`// @warpforge arg ids: in float[M] int(0, HI)`" in why and "illegal memory access" in why, why
    finally:
        loop.close()


# --------------------------------------------------------------------------- offsets (issue 29, item 4)
def test_offsets_are_sorted_csr_row_pointers_at_both_sizes_and_stay_sorted_when_perturbed() -> None:
    spec = load_spec(DOMAINS / "spmv_csr.cu", "spmv_csr")
    assert str(spec.arg("rowptr").distribution) == "offsets(0, NNZ)"
    for perturbed in (False, True):
        r = spec.resolve(perturbed=perturbed)
        layout = Layout.from_resolved(r, "odd" if perturbed else "spec")
        rp = next(a for a in layout.buffers if a.name == "rowptr")
        assert rp.count == r.sizes["ROWS"] + 1 and rp.dist == ("offsets", 0.0, float(r.sizes["NNZ"]))
        for seed in (0, 1):
            d = generate(rp, seed)
            assert d.dtype == np.int32 and d[0] == 0 and d[-1] == r.sizes["NNZ"]
            assert np.all(np.diff(d) >= 0)
            assert np.array_equal(d, generate(rp, seed))  # a seed gives the same offsets
            p = perturb_tail(rp, d)
            assert np.all(np.diff(p) >= 0) and p[0] == 0 and p[-1] == d[-1]
            assert np.array_equal(p[:-TAIL], d[:-TAIL]) and not np.array_equal(p, d)
        assert "rowptr" in tail_plan(layout)[0]
    with pytest.raises(InputError, match="offsets are integers"):
        generate(ArgLayout("o", "in", "float32", 8, dist=("offsets", 0.0, 10.0)), 0)


@pytest.mark.parametrize(("line", "message"), [
    ("arg rowptr: in float[ROWS + 1] offsets(0, NNZ)", "offsets are integers"),
    ("arg rowptr: in int[ROWS + 1] offsets(NNZ, 0)", "ends below its start"),
])
def test_offsets_mistakes_are_errors_at_their_line(tmp_path: Path, line: str, message: str) -> None:
    text = (DOMAINS / "spmv_csr.cu").read_text()
    bad = text.replace("arg rowptr: in int[ROWS + 1] offsets(0, NNZ)", line)
    if "float[" in line:
        bad = bad.replace("const int* rowptr", "const float* rowptr")
    path = tmp_path / "spmv.cu"
    path.write_text(bad)
    with pytest.raises(SpecError, match=message) as e:
        load_spec(path, "spmv_csr")
    assert e.value.line == 6
