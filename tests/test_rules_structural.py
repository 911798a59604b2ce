"""The structural rules of the offline policy: vectorize, warp_reduce, reduce_coarsen, warp_per_row,
smem_tiling, smem_transpose, atomics_privatize.

For each rule: which reference kernels it applies to (a table: a change in applicability is a visible
diff) and that it leaves the others alone; near misses written inline (the shape almost matches but the
rewrite would be wrong, so no variant may be proposed) and general positives (other names, types and
forms than the reference kernels'); that every rewritten definition re-parses as the same kernel with the
same parameters and carries the launch the rewrite needs; and, with nvcc, that every variant on every
reference kernel (and compositions with the tuning rules) compiles for sm_90. Numerics are checked on the
GPU machine by ``test_rules_gpu.py``.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import KERNEL_FILES, needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.extract import standalone
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, RuleContext, load
from warpforge.spec.resolve import load_spec

MINE = frozenset({"vectorize", "warp_reduce", "reduce_coarsen", "warp_per_row", "smem_tiling",
                  "smem_transpose", "atomics_privatize"})
KERNELS = {p.stem: p for p in KERNEL_FILES}

#: family -> {reference kernel: variants}; every other kernel must get none
EXPECTED: dict[str, dict[str, list[str]]] = {
    "vectorize": {"saxpy": ["x4", "x2"], "gelu": ["x4", "x2"]},
    "warp_reduce": {"reduce_sum": ["tail", "warps"], "rmsnorm": ["tail", "warps"]},
    "reduce_coarsen": {"reduce_sum": ["sm4", "sm8"]},
    # rows of 1024 read by three passes: each mapping also moves vectors, or stages the row (4 KB a row)
    "warp_per_row": {"softmax": ["warp8_vec", "block256_vec", "warp8_smem", "block256_smem", "warp8", "warp4",
                                 "block256"]},
    "smem_tiling": {"sgemm": ["t64r4x4", "t32r4", "t128r8x8", "t32", "t16"]},
    "smem_transpose": {"transpose": ["b32x8", "b32x16"]},
    "atomics_privatize": {"histogram": ["sm4", "sm8"]},
}


@functools.cache
def kernel_policy(stem: str, families: frozenset[str] = MINE) -> OfflinePolicy:
    path = KERNELS[stem]
    src = SourceText(path.read_bytes())
    model = parse(src.data)
    (k,) = model.kernels
    return OfflinePolicy(str(path), src, model, k, load_spec(path, k.name), families=set(families))


def text_policy(text: str, kernel: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", kernel, text=text), families=set(MINE))


def ctx(policy: OfflinePolicy, cand: Candidate | None = None) -> RuleContext:
    return policy.context(cand or policy.root_candidate())


def variants(policy: OfflinePolicy, family: str, cand: Candidate | None = None) -> list[str]:
    load()
    return REGISTRY[family].variants(ctx(policy, cand))


def child(policy: OfflinePolicy, family: str, param: str, cand: Candidate | None = None) -> Candidate:
    load()
    c = ctx(policy, cand)
    assert param in REGISTRY[family].variants(c), (family, param, REGISTRY[family].variants(c))
    out = REGISTRY[family].apply(c, param)
    assert out is not None
    return out


def signature(definition: str, name: str) -> list[tuple[str, str, int]]:
    k = parse(definition).kernel(name)
    assert k is not None, f"the rewritten definition no longer parses as kernel {name}:\n{definition}"
    assert not parse(definition).problems, definition
    return [(p.name, p.type, p.pointer_depth) for p in k.params]


# ----------------------------------------------------------------------------- the reference kernels


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_applicability_on_reference_kernels(family: str) -> None:
    got = {stem: variants(kernel_policy(stem), family) for stem in KERNELS}
    want = {stem: EXPECTED[family].get(stem, []) for stem in KERNELS}
    assert got == want


def all_children() -> list[tuple[str, Candidate]]:
    out: list[tuple[str, Candidate]] = []
    for stem in sorted(KERNELS):
        pol = kernel_policy(stem)
        kids = pol.propose_sync(pol.root_candidate())
        assert not pol.errors, pol.errors
        out.extend((stem, c) for c in kids)
    return out


def test_rewrites_keep_the_kernel_and_its_parameters() -> None:
    kids = all_children()
    assert len(kids) == sum(len(v) for fam in EXPECTED.values() for v in fam.values())
    for stem, c in kids:
        pol = kernel_policy(stem)
        assert signature(c.definition, pol.kernel.name) == signature(pol.root_candidate().definition,
                                                                     pol.kernel.name)
        assert c.definition != pol.root_candidate().definition
        assert c.family in MINE and c.steps == (f"{c.family}:{c.steps[0].split(':', 1)[1]}",)
        assert c.rationale and c.parent == pol.root_candidate().id
        # a rule proposes nothing on its own output (no stacking the same rewrite twice)
        assert variants(pol, c.family, c) == []


def test_replay_is_deterministic() -> None:
    for stem, c in all_children():
        pol = kernel_policy(stem)
        again = pol.replay(pol.root_candidate(), c.steps)
        assert again is not None and again.hash == c.hash


def test_launches() -> None:
    def launch(stem: str, family: str, param: str) -> tuple[object, object, object]:
        c = child(kernel_policy(stem), family, param)
        assert c.launch is not None
        return c.launch.grid, c.launch.block, c.launch.smem

    assert launch("saxpy", "vectorize", "x4") == (("cdiv(N, 1024)",), None, None)
    assert launch("gelu", "vectorize", "x2") == (("cdiv(N, 512)",), None, None)
    assert child(kernel_policy("reduce_sum"), "warp_reduce", "warps").launch is None
    assert launch("softmax", "warp_per_row", "warp8") == (("cdiv(B, 8)",), ("256",), None)
    assert launch("softmax", "warp_per_row", "warp4") == (("cdiv(B, 4)",), ("128",), None)
    assert launch("softmax", "warp_per_row", "block256") == (("B",), ("256",), None)
    assert launch("sgemm", "smem_tiling", "t32r4") == (("cdiv(N, 32)", "cdiv(M, 32)"), ("32", "8"), None)
    assert launch("sgemm", "smem_tiling", "t128r8x8") == (("cdiv(N, 128)", "cdiv(M, 128)"), ("16", "16"), None)
    assert launch("transpose", "smem_transpose", "b32x8") == (("cdiv(COLS, 32)", "cdiv(ROWS, 32)"), ("32", "8"),
                                                                None)
    assert launch("histogram", "atomics_privatize", "sm4") == (("min(cdiv(N, 256), 528)",), None, "(NBINS) * 4")
    assert launch("reduce_sum", "reduce_coarsen", "sm8") == (("min(cdiv(N, BLOCK_SIZE), 1056)",), None, None)


def test_rewritten_text_shapes() -> None:
    """Spot checks of what each rewrite writes (the GPU test checks what it computes)."""
    v = child(kernel_policy("saxpy"), "vectorize", "x4").definition
    assert "struct alignas(sizeof(float) * 4) wfv_v_x { float e[4]; };" in v
    assert "reinterpret_cast<const wfv_v_x*>(x)" in v and "reinterpret_cast<wfv_v_y*>(y)[wfv_vi] = wfv_y;" in v
    assert "& (sizeof(wfv_v_y) - 1)" in v and "wfv_base + 3 < n" in v and "y[i] = a * x[i] + y[i];" in v  # tail
    g = child(kernel_policy("gelu"), "vectorize", "x4").definition
    assert "wfv_v_out wfv_out;" in g  # written unconditionally and never read: not loaded
    t = child(kernel_policy("reduce_sum"), "warp_reduce", "tail").definition
    assert "wfr_s0 > 32" in t and "__shfl_down_sync(0xffffffffu, wfr_v0_0, wfr_o)" in t and "sdata[0] = wfr_v0_0;" in t
    s = child(kernel_policy("softmax"), "warp_per_row", "warp8").definition
    assert "for (int j = wfw_lane; j < cols; j += 32)" in s and "__shfl_xor_sync" in s
    assert "fmaxf(wfw_p0_maxval, __shfl_xor_sync" in s and "sum = sum + wfw_p1_sum;" in s
    m = child(kernel_policy("sgemm"), "smem_tiling", "t64r4x4").definition
    assert "C[row * N + col] = alpha * acc + beta * C[row * N + col];" in m and m.count("__syncthreads()") == 2
    tr = child(kernel_policy("transpose"), "smem_transpose", "b32x8").definition
    assert "wfx_tile[32][33]" in tr and "out[col * rows + row] = wfx_tile[threadIdx.x][wfx_r];" in tr
    h = child(kernel_policy("histogram"), "atomics_privatize", "sm4").definition
    assert "atomicAdd(&wfp_priv[v], 1u);" in h and "%%dynamic_smem_size" in h
    r = child(kernel_policy("reduce_sum"), "reduce_coarsen", "sm8").definition
    assert "wfc_acc += inp[i];" in r and "sdata[tid] = wfc_acc;" in r and "atomicAdd(out, sdata[0]);" in r


# ----------------------------------------------------------------------------- general shapes and near misses

ELEMENTWISE = """\
// @warpforge size N = 1 << 20
// @warpforge arg src: in {t}[N]
// @warpforge arg dst: {role} {t}[N]
// @warpforge arg count = N
// @warpforge launch grid=cdiv(N, 128), block=128
__global__ void k({t}* dst, const {t}* src, int count)
{{
{body}
}}
"""


#: the usual index declaration of the fixtures below
IDX = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"


def elementwise(body: str, t: str = "float", role: str = "out") -> OfflinePolicy:
    return text_policy(ELEMENTWISE.format(body=body, t=t, role=role), "k")


@pytest.mark.parametrize("body,want", [
    # general positives: other names, the exit form, a grid-stride loop, conditional writes, other uses of the index
    ("    int idx = threadIdx.x + blockIdx.x * blockDim.x;\n    if (idx < count) {\n"
     "        float v = src[idx];\n        if (v > 0.f) { dst[idx] = v; } else { dst[idx] = -v * 0.5f; }\n    }",
     ["x4", "x2"]),
    ("    const int t = blockIdx.x * blockDim.x + threadIdx.x;\n    if (t >= count) return;\n"
     "    dst[t] = src[t] * (float)t;", ["x4", "x2"]),
    ("    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += blockDim.x * gridDim.x)\n"
     "        dst[i] = src[i] + 1.0f;", ["x4", "x2"]),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count && src[i] > 0) dst[i] = 1;", []),
    # a buffer nothing writes may be read at any index (neighbours, strides, a broadcast): only dst is vectorized
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = src[i + 1];", ["x4", "x2"]),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = src[2 * i] * src[0];",
     ["x4", "x2"]),
    # near misses: a written buffer read or written at another index (in place, shifted), atomics, barriers,
    # addresses, early exits, writes to the index
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = dst[i + 1] + src[i];", []),
    (f"{IDX}    if (i < count) dst[i] = dst[i] * 0.5f + dst[(i + 1) % count];", []),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) { dst[i] = src[i]; dst[i + 1] = 0; }",
     []),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = src[i] + dst[count - 1];", []),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) atomicAdd(&dst[i], src[i]);", []),
    (f"{IDX}    if (i < count) {{ dst[i] = src[i]; __syncthreads(); }}", []),
    (f"{IDX}    if (i < count) {{ float* p = &dst[i]; *p = src[i]; }}", []),
    (f"{IDX}    if (i < count) {{ if (src[i] < 0) return; dst[i] = 1; }}", []),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) { dst[i] = src[i]; i++; }", []),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = src[i] + threadIdx.x;", []),
    ("    int i = blockIdx.y * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = src[i];", []),
    ("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] = src[i];\n    dst[0] = 0;", []),
])
def test_vectorize_shapes(body: str, want: list[str]) -> None:
    pol = elementwise(body)
    assert variants(pol, "vectorize") == want
    for param in want:
        c = child(pol, "vectorize", param)
        assert signature(c.definition, "k") == signature(pol.root_candidate().definition, "k")


def test_vectorize_types_and_alignment() -> None:
    body = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < count) dst[i] += src[i];"
    assert variants(elementwise(body, "int", "inout"), "vectorize") == ["x4", "x2"]
    assert "{ int e[4]; }" in child(elementwise(body, "int", "inout"), "vectorize", "x4").definition
    assert "{ unsigned int e[2]; }" in child(elementwise(body, "unsigned int", "inout"), "vectorize", "x2").definition
    # 16 bytes at most per vector, 8 at least: two doubles, eight/four halves
    assert variants(elementwise(body, "double", "inout"), "vectorize") == ["x2"]
    assert variants(elementwise(body, "half", "inout"), "vectorize") == ["x8", "x4"]
    assert variants(elementwise(body, "char", "inout"), "vectorize") == ["x8"]
    unaligned = ELEMENTWISE.replace("arg src: in {t}[N]", "arg src: in {t}[N] align=8")
    pol = text_policy(unaligned.format(body=body, t="float", role="inout"), "k")
    assert variants(pol, "vectorize") == ["x2"]  # 8-byte aligned: the 2-wide path would still run vectorized


def test_vectorize_conditional_write_preloads() -> None:
    pol = elementwise("    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "    if (i < count) { if (src[i] > 0.f) dst[i] = src[i]; }")
    d = child(pol, "vectorize", "x4").definition
    # written on some paths only: the old values are loaded so the vector store writes them back unchanged
    assert "wfv_v_dst wfv_dst = reinterpret_cast<wfv_v_dst*>(dst)[wfv_vi];" in d


REDUCE = """\
#ifndef THREADS
#define THREADS 256
#endif
// @warpforge size N = 1 << 20
// @warpforge tune THREADS = 256, 512
// @warpforge arg inp: in float[N]
// @warpforge arg out: inout float[cdiv(N, THREADS)] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, THREADS), block={block}
__global__ void r(const float* inp, float* out, int n)
{{
    __shared__ float buf[THREADS];
    unsigned t = threadIdx.x;
    buf[t] = blockIdx.x * THREADS + t < n ? inp[blockIdx.x * THREADS + t] : -1e30f;
{pre}
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {{
        if (t < stride) {{
            {step}
        }}
        __syncthreads();
    }}
{post}
}}
"""


@pytest.mark.parametrize("step,pre,post,block,want", [
    ("buf[t] = fmaxf(buf[t], buf[t + stride]);", "    __syncthreads();",
     "    if (t == 0) out[blockIdx.x] = buf[0];", "THREADS", ["tail", "warps"]),
    ("buf[t] = buf[t] + buf[stride + t];", "    __syncthreads();", "    out[blockIdx.x] = buf[0];", "THREADS",
     ["tail", "warps"]),
    # no barrier before the loop: the original races already, do not touch it
    ("buf[t] += buf[t + stride];", "", "    if (t == 0) out[blockIdx.x] = buf[0];", "THREADS", []),
    # another element read after the loop (the rewrite leaves different partials there)
    ("buf[t] += buf[t + stride];", "    __syncthreads();", "    if (t == 0) out[blockIdx.x] = buf[0] + buf[1];",
     "THREADS", []),
    # not a reduction step
    ("buf[t] -= buf[t + stride];", "    __syncthreads();", "    if (t == 0) out[blockIdx.x] = buf[0];", "THREADS",
     []),
    ("buf[t] += buf[t + 2 * stride];", "    __syncthreads();", "    if (t == 0) out[blockIdx.x] = buf[0];",
     "THREADS", []),
    # a 2D block: threadIdx.x < 32 is not the first warp
    ("buf[t] += buf[t + stride];", "    __syncthreads();", "    if (t == 0) out[blockIdx.x] = buf[0];",
     "(128, 2)", []),
])
def test_warp_reduce_shapes(step: str, pre: str, post: str, block: str, want: list[str]) -> None:
    pol = text_policy(REDUCE.format(step=step, pre=pre, post=post, block=block), "r")
    assert variants(pol, "warp_reduce") == want
    for param in want:
        d = child(pol, "warp_reduce", param).definition
        assert signature(d, "r") == signature(pol.root_candidate().definition, "r")
        if "fmaxf" in step:
            # the shuffle is named first, then combined (a combine written as a select must not hide it in one arm)
            assert "const float wfr_v0_0_in = __shfl_down_sync(" in d and "fmaxf(wfr_v0_0, wfr_v0_0_in)" in d


ROWS = """\
// @warpforge size R = 1000
// @warpforge size C = 300
// @warpforge arg in: in float[R*C]
// @warpforge arg w: in float[C]
// @warpforge arg out: out float[R*C]
// @warpforge arg nrows = R
// @warpforge arg ncols = C
// @warpforge launch grid=cdiv(R, 64), block=64
__global__ void rows(const float* in, const float* w, float* out, int nrows, int ncols)
{{
    int r = threadIdx.x + blockIdx.x * blockDim.x;
    if (r < nrows) {{
{body}
    }}
}}
"""

LAYERNORM = """\
        float mean = 0.0f;
        for (int c = 0; c < ncols; ++c) mean += in[r * ncols + c];
        mean /= ncols;
        float var = 0.0f;
        for (int c = 0; c < ncols; c += 1) {
            float d = in[r * ncols + c] - mean;
            var = var + d * d;
        }
        float rstd = rsqrtf(var / ncols + 1e-5f);
        for (int c = 0; c < ncols; c++) {
            out[r * ncols + c] = (in[r * ncols + c] - mean) * rstd * w[c];
        }"""


@pytest.mark.parametrize("body,want", [
    # rows of 300: no block-per-row variant; read by several passes: vectors, or the row staged
    (LAYERNORM, ["warp8_vec", "warp8_smem", "warp8", "warp4"]),
    ("        float lo = 1e30f;\n        for (int c = 0; c < ncols; c++) lo = fminf(in[r * ncols + c], lo);\n"
     "        for (int c = 0; c < ncols; c++) out[r * ncols + c] = in[r * ncols + c] - lo;",
     ["warp8_vec", "warp8_smem", "warp8", "warp4"]),
    # a running (prefix) sum read inside its loop: a warp scan (no block-per-row variant)
    ("        float s = 0.0f;\n        for (int c = 0; c < ncols; c++) { s += in[r * ncols + c]; "
     "out[r * ncols + c] = s; }", ["warp8", "warp4"]),
    # an exclusive running sum (read before its update) is not a form the scan takes
    ("        float s = 0.0f;\n        for (int c = 0; c < ncols; c++) { out[r * ncols + c] = s; "
     "s += in[r * ncols + c]; }", []),
    # a neighbour of a written element: another lane's element
    ("        for (int c = 0; c < ncols; c++) out[r * ncols + c] = 1.0f;\n"
     "        for (int c = 1; c < ncols; c++) out[r * ncols + c] += out[r * ncols + c - 1];", []),
    ("        for (int c = 0; c < ncols; c++) out[r * ncols + c] = 1.0f;\n"
     "        for (int c = 0; c + 1 < ncols; c++) out[r * ncols + c] += out[r * ncols + c + 1];", []),
    # a top-level read of memory a loop wrote
    ("        for (int c = 0; c < ncols; c++) out[r * ncols + c] = in[r * ncols + c];\n"
     "        float first = out[r * ncols];\n"
     "        for (int c = 0; c < ncols; c++) out[r * ncols + c] -= first;", []),
    # a product reduction and a break are not handled
    ("        float p = 1.0f;\n        for (int c = 0; c < ncols; c++) p *= in[r * ncols + c];\n"
     "        for (int c = 0; c < ncols; c++) out[r * ncols + c] = p;", []),
    ("        for (int c = 0; c < ncols; c++) { if (in[r * ncols + c] < 0) break; out[r * ncols + c] = 0; }", []),
])
def test_warp_per_row_shapes(body: str, want: list[str]) -> None:
    pol = text_policy(ROWS.format(body=body), "rows")
    assert variants(pol, "warp_per_row") == want
    for param in want:
        c = child(pol, "warp_per_row", param)
        assert signature(c.definition, "rows") == signature(pol.root_candidate().definition, "rows")
        assert c.launch is not None and c.launch.grid == (f"cdiv(R, {8 if param.startswith('warp8') else 4})",)


def test_warp_per_row_leaves_block_per_row_kernels_alone() -> None:
    assert variants(kernel_policy("rmsnorm"), "warp_per_row") == []


MATMUL = """\
// @warpforge size M = 100
// @warpforge size N = 70
// @warpforge size K = 33
// @warpforge arg P: in double[M*K]
// @warpforge arg Q: in double[N*K]
// @warpforge arg O: out double[M*N]
// @warpforge arg m = M
// @warpforge arg n = N
// @warpforge arg kk = K
// @warpforge launch grid=(cdiv(N, 8), cdiv(M, 8)), block=(8, 8)
__global__ void mm(const double* P, const double* Q, double* O, int m, int n, int kk)
{{
    int j = blockDim.x * blockIdx.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (j >= n || i >= m) return;
    double s = 0;
    for (int t = 0; t < kk; t++) {{
        {step}
    }}
    {epi}
}}
"""


@pytest.mark.parametrize("step,epi,want", [
    # B transposed (Q is N x K), the early-exit guard, a product written Q * P: all general
    ("s += Q[j * kk + t] * P[i * kk + t];", "O[i * n + j] = s;", True),
    ("s += P[t + i * kk] * Q[j * kk + t];", "if (s < 0) s = 0;\n    O[i * n + j] = s;", True),
    ("s += P[i * kk + t] * Q[i * kk + t];", "O[i * n + j] = s;", False),  # both use the row
    # any term of the two reads and shared values (the padding of a partial k-tile is skipped, not added)
    ("s += P[i * kk + t] * Q[j * kk + t] + 1.0;", "O[i * n + j] = s;", True),
    ("s += P[i * kk + t] * O[j * kk + t];", "O[i * n + j] = s;", False),  # reads what it writes
    ("s += P[i * kk + t] * Q[j * kk + t + threadIdx.x];", "O[i * n + j] = s;", False),
])
def test_smem_tiling_shapes(step: str, epi: str, want: bool) -> None:
    pol = text_policy(MATMUL.format(step=step, epi=epi), "mm")
    got = variants(pol, "smem_tiling")
    assert got == (list(EXPECTED["smem_tiling"]["sgemm"]) if want else [])
    if want:
        c = child(pol, "smem_tiling", "t32r4")
        assert signature(c.definition, "mm") == signature(pol.root_candidate().definition, "mm")
        assert "__shared__ double wft_As" in c.definition
        assert c.launch is not None and c.launch.grid == ("cdiv(N, 32)", "cdiv(M, 32)")


TRANSPOSE = """\
// @warpforge size H = 100
// @warpforge size W = 60
// @warpforge arg a: in float[H*W]
// @warpforge arg b: out float[H*W]
// @warpforge arg h = H
// @warpforge arg w = W
// @warpforge launch grid=(cdiv(W, 16), cdiv(H, 16)), block=(16, 16)
__global__ void tr(const float* a, float* b, int h, int w, float scale)
{{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) {{
        {stmt}
    }}
}}
"""


@pytest.mark.parametrize("stmt,want", [
    ("b[x * h + y] = scale * a[w * y + x];", True),
    ("b[y * w + x] = a[y * w + x];", False),  # a copy: both sides already coalesce
    ("b[x * h + y] = a[x * h + y];", False),  # reads strided: not the transpose shape
    ("b[x * h + y] = a[y * w + x] + a[y * w + x];", True),  # two reads of the source: both from the tile
])
def test_smem_transpose_shapes(stmt: str, want: bool) -> None:
    text = TRANSPOSE.format(stmt=stmt).replace("// @warpforge arg w = W", "// @warpforge arg w = W\n"
                                                                         "// @warpforge arg scale = 2.0")
    pol = text_policy(text, "tr")
    assert variants(pol, "smem_transpose") == (["b32x8", "b32x16"] if want else [])


HIST = """\
// @warpforge size N = 100000
// @warpforge arg keys: in int[N] int(0, 64)
// @warpforge arg hist: inout {t}[64] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void h(const int* keys, {t}* hist, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    {body}
}}
"""


@pytest.mark.parametrize("t,body,want", [
    ("float", "atomicAdd(hist + (keys[i] & 63), 0.5f);", True),
    ("unsigned int", "if (keys[i] >= 0) atomicAdd(&hist[keys[i]], 1u);", True),
    ("unsigned int", "atomicAdd(&hist[keys[i]], 1u); if (i == 0) hist[0] += 1;", False),  # also a plain write
    ("unsigned int", "unsigned old = atomicAdd(&hist[keys[i]], 1u); (void)old;", False),  # result used
    ("unsigned int", "atomicMax(&hist[keys[i]], 1u);", False),
])
def test_privatize_shapes(t: str, body: str, want: bool) -> None:
    pol = text_policy(HIST.format(t=t, body=body), "h")
    assert variants(pol, "atomics_privatize") == (["sm4", "sm8"] if want else [])
    if want:
        c = child(pol, "atomics_privatize", "sm8")
        assert c.launch is not None and c.launch.smem == "(64) * 4"


def test_privatize_needs_a_small_array() -> None:
    big = HIST.replace("[64]", "[1 << 16]").format(t="unsigned int", body="atomicAdd(&hist[keys[i]], 1u);")
    assert variants(text_policy(big, "h"), "atomics_privatize") == []


# ----------------------------------------------------------------------------- compositions


def compositions() -> list[tuple[str, Candidate]]:
    """Each structural variant on top of the tuning rules that rewrite the body (grid_stride, const_restrict,
    readonly_cache), and every structural or body-rewriting rule on top of each structural variant."""
    load()
    out: list[tuple[str, Candidate]] = []
    families = MINE | {"grid_stride", "const_restrict", "readonly_cache"}
    for stem in sorted(KERNELS):
        pol = kernel_policy(stem, families)
        root = pol.root_candidate()
        kids = pol.propose_sync(root)
        for first in kids:
            if first.family not in MINE:
                out.extend((stem, c) for c in pol.propose_sync(first) if c.family in MINE)
            else:
                out.extend((stem, c) for c in pol.propose_sync(first))
        assert not pol.errors, pol.errors
    return out


def test_compositions_propose() -> None:
    got = compositions()
    steps = {(stem, c.steps) for stem, c in got}
    assert ("saxpy", ("grid_stride:4", "vectorize:x4")) in steps
    assert ("histogram", ("grid_stride:2", "atomics_privatize:sm4")) in steps
    assert ("softmax", ("const_restrict:all", "warp_per_row:warp8")) in steps
    assert ("reduce_sum", ("reduce_coarsen:sm8", "warp_reduce:warps")) in steps
    for stem, c in got:
        signature(c.definition, kernel_policy(stem).kernel.name)


# ----------------------------------------------------------------------------- compilation


def build(stem: str, c: Candidate, families: frozenset[str] = MINE) -> tuple[str, Candidate, bool, str]:
    pol = kernel_policy(stem, families)
    tu = standalone(pol.source, pol.model, pol.kernel, definition=c.definition, filename=pol.file)
    defines = {t.name: t.values[0] for t in pol.spec.tunables}
    defines.update(c.define_map())
    res = compile_cubin(tu, arch="sm_90", defines=defines, flags=list(c.flags), filename=pol.file)
    return stem, c, res.ok and res.entry_symbol(pol.kernel.name) is not None, res.log[-3000:]


@needs_nvcc
def test_every_variant_compiles() -> None:
    jobs = all_children()
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: build(*j), jobs))
    bad = [(stem, c.steps, log) for stem, c, ok, log in results if not ok]
    assert not bad, bad
    # no register spills in any variant (a rewrite that spills is a rewrite gone wrong)
    assert len(results) == len(jobs)


@needs_nvcc
def test_compositions_compile() -> None:
    everything = MINE | {"grid_stride", "const_restrict", "readonly_cache"}
    picked: dict[tuple[str, str], Candidate] = {}
    for stem, c in compositions():
        picked.setdefault((stem, c.steps[0].split(":")[0] + "+" + c.steps[-1].split(":")[0]), c)
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda kv: build(kv[0][0], kv[1], everything), picked.items()))
    bad = [(stem, c.steps, log) for stem, c, ok, log in results if not ok]
    assert not bad, bad
