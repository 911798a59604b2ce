"""Type aliases declared in a project header (issue 18: llm.c's ``typedef float floatX;`` lives in a header).

A kernel file that only includes the header must read ``floatX*`` as ``float*``: spec inference from its host
code, and the signature guard that lets a variant spell the type either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warpforge.cuda import SourceText, parse, types
from warpforge.cuda.types import HEADER_DEPTH, file_aliases, header_aliases
from warpforge.gpu import guards
from warpforge.spec import load_spec

KERNEL = """#include "llmc/common.cuh"
#include <cuda_runtime.h>
__global__ void scale_kernel(floatX* out, const floatX* inp, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (floatX)(s * (float)inp[i]);
}
void scale(floatX* out, const floatX* inp, float s, int n) {
    scale_kernel<<<(n + 255) / 256, 256>>>(out, inp, s, n);
}
int main() {
    int n = 1 << 20;
    floatX *out, *inp;
    cudaMalloc(&out, n * sizeof(floatX));
    cudaMalloc(&inp, n * sizeof(floatX));
    scale(out, inp, 2.0f, n);
    return 0;
}
"""


def project(tmp: Path, header: str = "#pragma once\ntypedef float floatX;\n") -> Path:
    (tmp / "llmc").mkdir()
    (tmp / "llmc" / "common.cuh").write_text(header)
    f = tmp / "train.cu"
    f.write_text(KERNEL)
    return f


def test_spec_inference_reads_the_element_type_from_the_included_header(tmp_path: Path) -> None:
    f = project(tmp_path)
    spec = load_spec(f, "scale_kernel")
    types = {a.name: a.dtype for a in spec.args}
    assert types["out"] == "float32" and types["inp"] == "float32"
    r = spec.resolve()
    assert [a.count for a in r.args if a.count is not None] == [1 << 20, 1 << 20]


def test_nested_includes_include_folders_and_the_nearer_declaration_wins(tmp_path: Path) -> None:
    inc = tmp_path / "include" / "deep"
    inc.mkdir(parents=True)
    (inc / "types.h").write_text("typedef double real_t;\nusing idx_t = int;\n")
    f = project(tmp_path, '#pragma once\n#include "deep/types.h"\ntypedef __half floatX;\ntypedef real_t acc_t;\n')
    src = SourceText(f.read_text())
    model = parse(src.data)
    found = header_aliases(f, model, [tmp_path / "include"])
    assert found["real_t"] == ("double", 0) and found["idx_t"] == ("int", 0) and found["floatX"] == ("__half", 0)
    assert "real_t" not in header_aliases(f, model)  # without the -I folder the nested header is not found
    own = SourceText("typedef float floatX;\n" + f.read_text())
    assert file_aliases(own, parse(own.data), f)["floatX"] == ("float", 0)  # the file's own declaration wins


def test_include_cycles_missing_headers_and_depth_are_bounded(tmp_path: Path) -> None:
    (tmp_path / "a.h").write_text('#include "b.h"\n#include "missing.h"\ntypedef int A;\n')
    (tmp_path / "b.h").write_text('#include "a.h"\ntypedef int B;\n')
    f = tmp_path / "k.cu"
    f.write_text('#include "a.h"\n__global__ void k(A* x) {}\n')
    found = header_aliases(f, parse(f.read_text()))
    assert found["A"] == ("int", 0) and found["B"] == ("int", 0)
    chain = [tmp_path / f"h{i}.h" for i in range(HEADER_DEPTH + 2)]
    for i, h in enumerate(chain):
        nxt = f'#include "h{i + 1}.h"\n' if i + 1 < len(chain) else ""
        h.write_text(f"{nxt}typedef int T{i};\n")
    g = tmp_path / "g.cu"
    g.write_text('#include "h0.h"\n')
    deep = header_aliases(g, parse(g.read_text()))
    assert "T0" in deep and f"T{len(chain) - 1}" not in deep
    assert header_aliases(None, parse(g.read_text())) == {}


def test_a_variant_may_spell_the_header_type_as_what_it_is(tmp_path: Path) -> None:
    f = project(tmp_path)
    src = SourceText(f.read_text())
    model = parse(src.data)
    k = model.kernel("scale_kernel")
    assert k is not None
    original = src.slice(k.span)
    variant = original.replace("floatX* out, const floatX* inp", "float* __restrict__ out, const float* inp")
    aliases = file_aliases(src, model, f)
    assert not [g for g in guards.check_candidate(k, original, variant, aliases) if "signature" in g.text()]
    changed = original.replace("floatX* out", "double* out")
    assert [g for g in guards.check_candidate(k, original, changed, aliases) if "signature" in g.text()]


def test_headers_are_read_once_until_they_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spec inference runs after every edit of the kernel file; its headers are read again only when their
    (mtime, size) changed."""
    reads: list[Path] = []
    real = types._read_header

    def counting(path: Path) -> types._Header | None:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(types, "_read_header", counting)
    f = project(tmp_path)
    (tmp_path / "llmc" / "common.cuh").write_text('#pragma once\n#include "other.h"\ntypedef float floatX;\n')
    other = tmp_path / "llmc" / "other.h"
    other.write_text("typedef int idx_t;\n")
    model = parse(f.read_text())
    first = header_aliases(f, model)
    assert first["floatX"] == ("float", 0) and first["idx_t"] == ("int", 0)
    assert len(reads) == 2
    assert header_aliases(f, model) == first and len(reads) == 2  # unchanged: nothing read
    common = tmp_path / "llmc" / "common.cuh"
    common.write_text('#pragma once\n#include "other.h"\ntypedef __half floatX;\n')  # a new size
    changed = header_aliases(f, model)
    assert changed["floatX"] == ("__half", 0) and changed["idx_t"] == ("int", 0)
    assert [p.name for p in reads[2:]] == ["common.cuh"]  # only the changed header
    # the same size, a new mtime: read again too
    common.write_text('#pragma once\n#include "other.h"\ntypedef __nv_bfloat16 floatX;\n'[: len(common.read_text())])
    st = common.stat()
    os.utime(common, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    before = len(reads)
    header_aliases(f, model)
    assert [p.name for p in reads[before:]] == ["common.cuh"]


def test_the_header_cache_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(types, "HEADER_CACHE_MAX", 3)
    monkeypatch.setattr(types, "_header_cache", types.OrderedDict())
    for i in range(5):
        h = tmp_path / f"h{i}.h"
        h.write_text(f"typedef int T{i};\n")
        f = tmp_path / f"k{i}.cu"
        f.write_text(f'#include "h{i}.h"\n')
        assert header_aliases(f, parse(f.read_text()))[f"T{i}"] == ("int", 0)
    assert [Path(k[0]).name for k in types._header_cache] == ["h2.h", "h3.h", "h4.h"]
