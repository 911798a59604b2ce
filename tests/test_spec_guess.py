"""Guessed specs (``spec.guess``): each rule on a self-written kernel, the written block read back as guessed,
and exact inference untouched where it succeeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warpforge.cli import main
from warpforge.cuda import parse
from warpforge.cuda.text import SourceText
from warpforge.spec import build_spec
from warpforge.spec.guess import split_bits
from warpforge.spec.resolve import Draft, draft_spec

KERNELS = """
__global__ void conv_rows(float* out, const float* in, const float* w, int rows, int cols, int ksize, int stride,
                          int pad, bool relu) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        float s = 0.0f;
        for (int k = 0; k < ksize; k++) {
            int j = c * stride + k - pad;
            if (j >= 0 && j < cols) s += in[r * cols + j] * w[k];
        }
        out[r * cols + c] = relu && s < 0.0f ? 0.0f : s;
    }
}

template <typename T>
__global__ void scale_all(T* y, const T* x, T a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i];
}

__global__ void nchw_bias(float* out, const float* bias, int N, int C, int H, int W) {
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (h < H && w < W)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++)
                out[((n * C + c) * H + h) * W + w] += bias[c];
}

__global__ void row_sum(float* out, const float* m, int rows, int cols) {
    int r = blockIdx.x;
    if (r >= rows) return;
    extern __shared__ float part[];
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += m[r * cols + c];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int i = 0; i < blockDim.x; i++) t += part[i];
        out[r] = t;
    }
}

__global__ void shift_add(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"""

SWEEP = """
__global__ void add_one(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.0f;
}

void sweep(float* y, int n, const int* sizes, int count) {
    for (int j = 0; j < count; j++) {
        int block_size = sizes[j];
        add_one<<<(n + block_size - 1) / block_size, block_size>>>(y, n);
    }
}
"""

EXACT = """
__global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

int main() {
    int n = 1 << 20;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    axpy<<<(n + 255) / 256, 256>>>(y, x, 0.5f, n);
    return 0;
}
"""


def draft(text: str, name: str) -> Draft:
    src = SourceText(text)
    model = parse(src.data)
    return draft_spec(src, model, model.require(name, "g.cu"), "g.cu")


def written(text: str, name: str) -> tuple[str, str]:
    """The block "Add benchmark spec" writes above ``name`` and the file with it."""
    block = draft(text, name).annotation()
    src = SourceText(text)
    kernel = parse(src.data).require(name, "g.cu")
    anchor = src.line_starts[src.line_of(kernel.span.start)]  # the kernel's first line (its `template <...>`)
    return block, text[:anchor] + block + text[anchor:]


def read_back(text: str, name: str) -> tuple[str, dict[str, object]]:
    """The written block and the spec built from the file with it (as the user's next run reads it)."""
    block, new = written(text, name)
    src = SourceText(new)
    model = parse(src.data)
    spec = build_spec(src, model, model.require(name, "g.cu"), "g.cu")
    return block, {"spec": spec, "sizes": spec.size_values(), "resolved": spec.resolve()}


def lines_of(block: str) -> dict[str, str]:
    """``size N`` / ``arg x`` / ``launch`` -> the directive without its remark."""
    out = {}
    for line in block.splitlines():
        body = line.split("@warpforge ", 1)[1].split("  // guessed", 1)[0]
        word, _, rest = body.partition(" ")
        key = word if word in ("launch", "template") else f"{word} {rest.replace(':', ' ').split()[0]}"
        out[key] = body
    return out


def test_split_of_the_budget() -> None:
    assert [split_bits(k) for k in (1, 2, 3, 4)] == [[22], [11, 11], [6, 8, 8], [4, 6, 6, 6]]
    assert all(sum(split_bits(k)) >= 22 for k in range(1, 13))


def test_two_dims_share_the_budget_filter_params_are_small_and_the_launch_is_2d() -> None:
    block, got = read_back(KERNELS, "conv_rows")
    ln = lines_of(block)
    assert ln["size rows"] == "size rows = 1 << 11" and ln["size cols"] == "size cols = 1 << 11"
    assert "rows x cols share a problem of 2^22 elements" in block
    assert ln["arg ksize"] == "arg ksize = 3" and ln["arg stride"] == "arg stride = 1"
    assert ln["arg pad"] == "arg pad = 1"
    assert ln["arg relu"] == "arg relu = 0"  # a bool: a flag, off
    assert ln["arg w"] == "arg w: in float[3] uniform(-1, 1)"  # w[k] under k < ksize: the filter's length
    assert ln["launch"] == "launch grid=(cdiv(cols, 16), cdiv(rows, 16)), block=(16, 16)"
    r = got["resolved"]
    assert r.grid == (128, 128, 1) and r.block == (16, 16, 1)  # type: ignore[attr-defined]
    assert {a.name: a.count for a in r.args if a.count is not None} == {  # type: ignore[attr-defined]
        "out": 1 << 22, "in": 1 << 22, "w": 3}


def test_four_dims_split_outermost_smallest() -> None:
    block, got = read_back(KERNELS, "nchw_bias")
    assert got["sizes"] == {"N": 16, "C": 64, "H": 64, "W": 64}
    assert "arg out: inout float[N * C * H * W]" in block and "arg bias: in float[C]" in block


def test_template_without_instantiation_is_float_and_a_grid_stride_loop_gets_a_fixed_grid() -> None:
    block, got = read_back(KERNELS, "scale_all")
    ln = lines_of(block)
    assert ln["template"] == "template float" and "// guessed: no launch instantiates the template" in block
    assert ln["launch"] == "launch grid=528, block=256"
    spec = got["spec"]
    assert spec.template_args == ("float",)  # type: ignore[attr-defined]
    assert "template" in spec.guessed and "launch" in spec.guessed  # type: ignore[attr-defined]
    assert got["sizes"] == {"n": 1 << 22}


def test_block_per_row_with_dynamic_shared_memory() -> None:
    block, got = read_back(KERNELS, "row_sum")
    assert lines_of(block)["launch"] == "launch grid=rows, block=256, smem=256 * sizeof(float)"
    assert got["resolved"].smem == 1024  # type: ignore[attr-defined]


def test_one_d_index_guarded_by_n() -> None:
    block, _ = read_back(KERNELS, "shift_add")
    ln = lines_of(block)
    assert ln["launch"] == "launch grid=cdiv(n, 256), block=256" and ln["size n"] == "size n = 1 << 22"


def test_a_swept_block_size_takes_256() -> None:
    block, got = read_back(SWEEP, "add_one")
    ln = lines_of(block)
    assert ln["size block_size"] == "size block_size = 256 fixed"
    assert "is the block size and has no constant value at the launch" in block
    assert got["resolved"].block == (256, 1, 1)  # type: ignore[attr-defined]


def test_exact_inference_is_unchanged_and_never_replaced_by_a_guess() -> None:
    src = SourceText(EXACT)
    model = parse(src.data)
    k = model.require("axpy", "g.cu")
    exact = build_spec(src, model, k, "g.cu")
    d = draft(EXACT, "axpy")
    assert d.guesses == {} and d.spec.guessed == () and exact.guessed == ()
    assert d.spec.spec_hash() == exact.spec_hash() and "guessed" not in d.annotation()
    assert exact.size_values() == {"n": 1 << 20} and exact.launch.grid == ("(n + 255) / 256",)


def test_guessed_lines_read_back_as_guessed_and_checked_ones_as_exact() -> None:
    _, new = written(KERNELS, "shift_add")
    src = SourceText(new)
    model = parse(src.data)
    spec = build_spec(src, model, model.require("shift_add", "g.cu"), "g.cu")
    assert set(spec.guessed) == {"size n", "arg y", "arg x", "arg n", "launch"}
    assert {a.source for a in spec.args} == {"guessed"} and spec.launch.source == "guessed"
    # the user checks the values and deletes the remarks: the same spec, exact now
    checked = "\n".join(line.split("  // guessed")[0] for line in new.splitlines()) + "\n"
    src2 = SourceText(checked)
    model2 = parse(src2.data)
    spec2 = build_spec(src2, model2, model2.require("shift_add", "g.cu"), "g.cu")
    assert spec2.guessed == () and spec2.spec_hash() == spec.spec_hash()


def test_cli_says_the_spec_has_guessed_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "k.cu"
    f.write_text(KERNELS, encoding="utf-8")
    assert main(["spec", str(f), "-k", "nchw_bias", "--write"]) == 0
    capsys.readouterr()
    assert main(["spec", str(f), "-k", "nchw_bias", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "the spec has guessed values, check them: `size N`" in err
    got = json.loads(out)
    assert "launch" in got["guessed"] and got["resolved"]["sizes"] == {"N": 16, "C": 64, "H": 64, "W": 64}


UNGUARDED = """
__global__ void matmul_naive(const float* A, const float* B, float* C, int N, int M, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    float acc = 0.0f;
    for (int i = 0; i < K; ++i) acc += A[row * K + i] * B[i * M + col];
    C[row * M + col] = acc;
}
"""

STATED = """
__global__ void step(int* out, const int* wall, int iters, int cols) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= cols) return;
    int s = 0;
    for (int t = 0; t < iters; t++) s += wall[t * cols + x];
    out[x] = s;
}

void run(int rows, int cols, int iters, int* out) {
    int* wall;
    cudaMalloc(&wall, rows * cols * sizeof(int));
    step<<<(cols + 255) / 256, 256>>>(out, wall, iters, cols);
}
"""


def test_an_unguarded_2d_index_takes_its_extents_from_the_subscripts_and_keeps_them_fixed() -> None:
    block, got = read_back(UNGUARDED, "matmul_naive")
    ln = lines_of(block)
    # col is added to `row * M`: M is the row length; the row's extent is the integer that bounds no loop (N)
    assert ln["launch"] == "launch grid=(cdiv(M, 16), cdiv(N, 16)), block=(16, 16)"
    assert ln["size M"].endswith(" fixed") and ln["size N"].endswith(" fixed")  # no guard: exact multiples
    assert ln["arg A"].startswith("arg A: in float[N * K]") and ln["arg C"].startswith("arg C: out float[N * M]")
    sizes = got["sizes"]
    assert sizes == {"N": 2048, "M": 2048, "K": 2048}  # type: ignore[comparison-overlap]


def test_a_length_the_host_states_is_kept_and_a_loop_count_is_moderate() -> None:
    block, got = read_back(STATED, "step")
    ln = lines_of(block)
    assert ln["arg wall"].startswith("arg wall: in int[rows * cols]")  # the relation the allocation states
    assert "the length the launch allocates, `rows * cols`" in block
    assert got["sizes"]["rows"] == 2048 and got["sizes"]["cols"] == 2048  # type: ignore[index]
    assert got["sizes"]["iters"] == 64  # type: ignore[index]  # a loop count, in no length
    # and the kernel stays inside `wall`: t < iters <= rows
    assert got["sizes"]["iters"] <= got["sizes"]["rows"]  # type: ignore[index, operator]


def test_the_editor_warns_while_a_block_has_guessed_values(tmp_path: Path) -> None:
    from warpforge.profile.hints import analyze_source

    _, new = written(KERNELS, "shift_add")
    report = analyze_source(str(tmp_path / "g.cu"), new, use_compiler=False)
    warned = [f for f in report.findings if f.code == "WF003" and "has guessed values" in f.message]
    assert len(warned) == 1 and "`shift_add`" in warned[0].message and "delete the `// guessed`" in warned[0].message
    checked = "\n".join(line.split("  // guessed")[0] for line in new.splitlines()) + "\n"
    report = analyze_source(str(tmp_path / "g.cu"), checked, use_compiler=False)
    assert not [f for f in report.findings if "has guessed values" in f.message]


KNOWN = """
__global__ void rowdot(float* y, const float* a, const float* x, int m, int k) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < m) {
        float s = 0.0f;
        for (int j = 0; j < k; j++) s += a[r * k + j] * x[j];
        y[r] = s;
    }
}

void run(float* y, const float* a, const float* x, int m) {
    rowdot<<<(m + 255) / 256, 256>>>(y, a, x, m, 2048);
}
"""

QUADRATIC = """
__global__ void prefix_naive(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int j = 0; j < n; j++) if (j <= i) s += in[j];
    out[i] = s;
}
"""


def test_a_known_factor_takes_its_share_of_the_budget() -> None:
    block, got = read_back(KNOWN, "rowdot")
    assert "arg a: in float[m * 2048]" in block and "arg k = 2048" in block
    assert got["sizes"] == {"m": 2048}  # 2048 x 2048 = 2^22 elements, not 2^22 x 2048


def test_a_size_every_thread_loops_over_is_capped() -> None:
    block, got = read_back(QUADRATIC, "prefix_naive")
    assert got["sizes"] == {"n": 1 << 14}  # 2^28 steps, not 2^44
    assert "it also bounds a loop of the kernel" in block


STRIDED = """
template <class T, int block>
__global__ void sum_strided(const T* in, T* out, unsigned int n) {
    extern volatile __shared__ float part[];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int step = blockDim.x * gridDim.x;
    float s = 0.0f;
    while (i < n) { s += in[i]; i += step; }
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""


def test_a_grid_stride_through_a_variable_and_volatile_dynamic_shared_memory() -> None:
    block, got = read_back(STRIDED, "sum_strided")
    ln = lines_of(block)
    assert ln["launch"] == "launch grid=528, block=256, smem=256 * sizeof(float)"
    assert ln["template"] == "template float, 256"
    assert got["resolved"].smem == 1024  # type: ignore[attr-defined]


def test_rewriting_a_block_keeps_its_guessed_remarks() -> None:
    """"Edit benchmark spec" on a block that still has guesses rewrites it with the same remarks: a guess never
    turns exact by being written again."""
    _, new = written(KERNELS, "shift_add")
    again = draft(new, "shift_add")
    assert set(again.guesses) == {"size n", "arg y", "arg x", "arg n", "launch"}
    assert again.guesses["size n"].startswith("no launch of `shift_add` in this file")
    assert again.annotation().count("// guessed:") == 5


PLANE = """
#define BX 16
#define BY 8

__global__ void blur_rows(float* dst, const float* src, int w, int h) {
    int x = blockIdx.x * BX + threadIdx.x;
    int y = blockIdx.y * BY + threadIdx.y;
    dst += y * w + x;
    src += y * w + x;
    dst[0] = 0.5f * (src[0] + src[x > 0 ? -1 : 0]);
}

void blur(float* dst, const float* src, int w, int h) {
    dim3 blocks(w / BX, h / BY);
    dim3 threads(BX, BY);
    blur_rows<<<blocks, threads>>>(dst, src, w, h);
}
"""


def test_the_hosts_launch_is_kept_and_a_2d_problem_spans_its_plane() -> None:
    block, got = read_back(PLANE, "blur_rows")
    ln = lines_of(block)
    assert ln["launch"] == "launch grid=(w / BX, h / BY), block=(BX, BY)"  # the host's, its sizes guessed
    assert ln["arg dst"].startswith("arg dst: out float[w * h]")
    assert ln["arg src"].startswith("arg src: in float[w * h]")
    assert got["sizes"]["w"] == 2048 and got["sizes"]["h"] == 2048  # type: ignore[index]
    assert got["resolved"].grid == (128, 256, 1)  # type: ignore[attr-defined]


#: mmcv's launch: the template instantiated with `scalar_t` inside PyTorch's dispatch macro (its headers absent)
DISPATCH = """
template <typename T>
__global__ void scatter_back(int n, const T* grad_out, const int* idx, T* grad_in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(grad_in + idx[i], grad_out[i]);
}

void scatter_back_launcher(int n, at::Tensor grad_out, at::Tensor idx, at::Tensor grad_in) {
  dim3 blocks((n + 255) / 256);
  dim3 threads(256);
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(
      grad_out.scalar_type(), "scatter_back", [&] {
        scatter_back<scalar_t><<<blocks, threads>>>(
            n, grad_out.data_ptr<scalar_t>(), idx.data_ptr<int>(), grad_in.data_ptr<scalar_t>());
      });
}
"""


@pytest.mark.parametrize(("macro", "ctype"), [("AT_DISPATCH_FLOATING_TYPES_AND_HALF", "float"),
                                              ("AT_DISPATCH_FLOATING_TYPES", "float"),
                                              ("AT_DISPATCH_INTEGRAL_TYPES", "int")])
def test_a_dispatch_macros_scalar_t_is_instantiated_with_a_type_it_dispatches_to(macro: str, ctype: str) -> None:
    """``scalar_t`` names no type outside the macro's lambda: a spec with ``template scalar_t`` builds nothing, and a
    rule judging the element type read ``scalar_t`` (atomic_aggregate: "a warp shuffle cannot move `scalar_t`")."""
    text = DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES_AND_HALF", macro)
    block, got = read_back(text, "scatter_back")
    ln = lines_of(block)
    assert ln["template"] == f"template {ctype}", block
    assert f"`scalar_t`, the type `{macro}` dispatches on" in block and "line 14" in block
    spec = got["spec"]
    assert spec.template_args == (ctype,)  # type: ignore[attr-defined]
    assert "template" in spec.guessed  # type: ignore[attr-defined]
    assert ln["launch"] == "launch grid=(n + 255) / 256, block=256"  # the launch itself is still the host's


def test_a_closed_dispatch_before_the_launch_is_not_its_scope() -> None:
    """A dispatch that closed before the launch does not make a `scalar_t` of the launch its alias (whatever
    `scalar_t` is there, it is not the macro's, and the spec keeps it as written)."""
    text = DISPATCH.replace("      });\n}", "      });\n  using scalar_t = double;\n"
                            "  scatter_back<scalar_t><<<blocks, threads>>>(n, 0, 0, 0);\n}")
    text = text.replace("scatter_back<scalar_t><<<blocks, threads>>>(\n", "other<scalar_t><<<blocks, threads>>>(\n")
    d = draft(text, "scatter_back")
    assert d.spec.template_args == ("scalar_t",)
