"""Nothing from a file reaches a shell (issue 14): payloads in every field that can reach a CUDA tool.

nvcc runs cicc, ptxas and the host preprocessor through ``sh -c`` with -D values and file names inside
double quotes, and -Xptxas/-Xcompiler values unquoted, so ``nvcc -cubin '-DX=1 $(touch f)' a.cu`` creates
``f``. Every payload below tries to create a marker file next to ``$HOME`` (``$HOME.NAME``: a file name
needs no ``/``), through the real entry points -- ``warpforge hints``/``spec`` in a subprocess, the language
server over stdio, ``compile_cubin`` with the real nvcc, the real nvdisasm, and the argument builders of
ncu and compute-sanitizer with stand-in executables that record whether they ran -- and each test asserts
that no marker appears and the user gets a clear error, or a correct result where the name is legal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from conftest import ROOT, needs_nvcc
from warpforge.compiler.build import compile_cubin, flag_problem
from warpforge.compiler.toolchain import ToolMissing, UnsafeArgument, define_problem, find_tool, guard_argv
from warpforge.cuda import parse
from warpforge.cuda.text import SourceText
from warpforge.gpu import guards, sanitizer
from warpforge.gpu.inputs import Layout
from warpforge.profile import ncu as ncu_mod
from warpforge.profile import sass
from warpforge.spec import build_spec
from warpforge.spec.annotations import Annotation, parse_annotation
from warpforge.spec.model import SpecError

#: name -> text that runs ``touch $HOME.NAME`` if any shell ever sees it unquoted or inside double quotes
PAYLOADS: dict[str, str] = {
    "dollar": "$(touch $HOME.dollar)",
    "backtick": "`touch $HOME.backtick`",
    "quote": '"; touch $HOME.quote; "',
    "semicolon": "; touch $HOME.semicolon;",
    "newline": "\ntouch $HOME.newline\n",
    "backslash": '\\"$(touch $HOME.backslash)\\"',
    "pipe": "| touch $HOME.pipe",
    "space": " x y ",
}
#: payloads that fit on one comment line (an annotation value cannot hold a line break)
ONE_LINE = {k: v for k, v in PAYLOADS.items() if "\n" not in v}

KERNEL = ("__global__ void k(float* x, int n) {\n"
          "  int i = blockIdx.x * BLOCK + threadIdx.x;\n"
          "  if (i < n) x[i] = 2.0f * x[i];\n"
          "}\n")
PLAIN_KERNEL = KERNEL.replace("BLOCK", "256")
#: a complete spec, so that a tune value is really compiled with (without one, nothing is compiled with it);
#: the tune line under test goes right after it, on line 5
SPEC_HEAD = ("// @warpforge size N = 1 << 20\n// @warpforge arg x: inout float[N]\n// @warpforge arg n = N\n"
             "// @warpforge launch grid=(N + 255) / 256, block=256\n")


def markers(base: Path) -> list[str]:
    """Marker files the payloads would have created (``$HOME`` is ``base/home``)."""
    return sorted(p.name for p in base.glob("home.*"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``$HOME`` (markers land beside it) and build cache; returns the folder holding both."""
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _cli(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(base / "home"), "WARPFORGE_CACHE": str(base / "cache"),
           "PYTHONPATH": str(ROOT / "server")}
    return subprocess.run([sys.executable, "-m", "warpforge", *args], capture_output=True, text=True, env=env,
                          cwd=base, timeout=300)


# ============================================================================== spec: tune and template values
def _spec(text: str, file: str = "t.cu") -> Annotation:
    src = SourceText(text.encode())
    return parse_annotation(src, parse(src.data).kernels[0], file)


@pytest.mark.parametrize("name", sorted(ONE_LINE))
def test_a_tune_value_that_is_not_an_expression_or_a_type_is_an_error_at_its_line(name: str) -> None:
    text = SPEC_HEAD + f"// @warpforge tune BLOCK = 256{ONE_LINE[name]}, 128\n" + KERNEL
    with pytest.raises(SpecError) as e:
        _spec(text)
    assert e.value.line == 5 and "tunable `BLOCK`" in e.value.message
    assert e.value.fix is not None and "type name" in e.value.fix
    assert "\n" not in str(e.value)


def test_tune_values_may_be_numbers_expressions_and_type_names() -> None:
    values = ["256", "2 * 128", "1 << 8", "sizeof(float)", "float", "unsigned int", "__half", "float4", "true",
              "0x100", "256u"]
    spec = _spec(f"// @warpforge tune BLOCK = {', '.join(values)}\n" + KERNEL)
    assert spec.tunables[0].values == tuple(values)


def test_a_tune_value_with_a_comma_is_refused_because_nvcc_splits_defines_there() -> None:
    with pytest.raises(SpecError) as e:
        _spec(SPEC_HEAD + "// @warpforge tune BLOCK = max(128, 256), 64\n" + KERNEL)
    assert "comma" in e.value.message and e.value.line == 5


TEMPLATE_KERNEL = ("template <typename T, int BS>\n"
                   "__global__ void k(T* x, int n) { int i = blockIdx.x * BS + threadIdx.x; if (i < n) x[i] = x[i]; }\n"
                   "void host(float* x, int n) { k<float, 256><<<(n + 255) / 256, 256>>>(x, n); }\n")


@pytest.mark.parametrize("name", ["dollar", "backtick", "quote", "semicolon", "backslash", "pipe"])
def test_a_template_argument_that_is_not_a_type_or_an_expression_is_an_error(name: str) -> None:
    with pytest.raises(SpecError) as e:
        _spec(f"// @warpforge template T=float{ONE_LINE[name]}, BS=256\n" + TEMPLATE_KERNEL)
    assert e.value.line == 1 and "template argument `T`" in e.value.message


def test_template_arguments_may_be_types_and_expressions() -> None:
    spec = _spec("// @warpforge template T=unsigned int, BS=2 * 128\n" + TEMPLATE_KERNEL)
    assert spec.template_args == ("unsigned int", "2 * 128")
    spec = _spec("// @warpforge template __half, 128\n" + TEMPLATE_KERNEL)
    assert spec.template_args == ("__half", "128")


def test_warpforge_spec_reports_a_hostile_tune_value_and_runs_nothing(home: Path) -> None:
    f = home / "tuned.cu"
    f.write_text(SPEC_HEAD + "// @warpforge tune BLOCK = 256 $(touch $HOME.cli) `touch $HOME.cli2`, 128\n" + KERNEL)
    r = _cli(home, "spec", str(f))
    assert r.returncode == 2, r.stderr
    assert f"{f}:5: tunable `BLOCK`" in r.stderr and "Traceback" not in r.stderr
    assert markers(home) == []


# ============================================================================== hints: names from the disk
@needs_nvcc
def test_hints_on_files_whose_names_and_folders_carry_payloads_compiles_them_and_runs_nothing(home: Path) -> None:
    files: list[Path] = []
    for payload in PAYLOADS.values():
        d = home / f"dir{payload}"
        d.mkdir()
        f = d / f"k{payload}.cu"
        f.write_text(PLAIN_KERNEL)
        files.append(f)
    tuned = home / f"tuned{PAYLOADS['dollar']}.cu"
    tuned.write_text(SPEC_HEAD + "// @warpforge tune BLOCK = 256 $(touch $HOME.tune) `touch $HOME.tune2`, 128\n"
                     + KERNEL)
    r = _cli(home, "hints", "--json", *map(str, files), str(tuned))
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    reports = {rep["file"]: rep for rep in json.loads(r.stdout)}
    for f in files:
        # A legal name compiles as any other: no compiler error, and ptxas/SASS evidence arrived.
        codes = [x["code"] for x in reports[str(f)]["findings"]]
        assert "WF000" not in codes and "WF002" not in codes, (f.name, reports[str(f)])
    assert markers(home) == []


# ============================================================================== compile_cubin with the real nvcc
@needs_nvcc
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_a_define_value_or_name_with_a_payload_never_reaches_nvcc(home: Path, name: str) -> None:
    payload = PAYLOADS[name]
    res = compile_cubin(KERNEL, arch="sm_90", defines={"BLOCK": "256" + payload}, use_cache=False)
    assert not res.ok
    if name == "space":
        # Nothing a shell would act on: nvcc runs and the C++ compiler rejects `256 x y`.
        assert res.command and any(m.severity == "error" for m in res.messages)
    else:
        assert [m.code for m in res.messages] == ["unsafe"] and "-DBLOCK" in res.messages[0].text
        assert res.command == []
    res = compile_cubin(KERNEL, arch="sm_90", defines={"BLOCK" + payload: "1"}, use_cache=False)
    assert not res.ok and [m.code for m in res.messages] == ["unsafe"] and "not a C identifier" in res.log
    assert markers(home) == []


@needs_nvcc
@pytest.mark.parametrize("flags", [
    ["-Xptxas", "-O3;touch $HOME.flag1"],
    ["-Xptxas=-v,-O3;touch $HOME.flag2"],
    ["-Xcompiler", "-O2;touch $HOME.flag3"],
    ["-Xcompiler", "-wrapper,/bin/touch,$HOME.flag4"],
    ["-ccbin", "/bin/true"],
    ["--options-file", "opts.txt"],
    ["-D", "X=1 $(touch $HOME.flag5)"],
    ["-DX=`touch $HOME.flag6`"],
    ["-O3 ; touch $HOME.flag7"],
])
def test_extra_nvcc_options_outside_the_allow_list_are_refused(home: Path, flags: list[str]) -> None:
    res = compile_cubin(PLAIN_KERNEL, arch="sm_90", flags=flags, use_cache=False)
    assert not res.ok and [m.code for m in res.messages] == ["unsafe"], res.log
    assert res.log.startswith("not compiled: ") and "\n" not in res.messages[0].text.strip()
    assert markers(home) == []


@needs_nvcc
@pytest.mark.parametrize("flags", [["-Xptxas", "-O3"], ["-use_fast_math", "-maxrregcount=32"], ["-DWF_SAME=1"],
                                   ["-rdc=true"], ["--ptxas-options=-O2,-v"], ["-D", "WF_SAME=2"]])
def test_the_options_warpforge_proposes_still_compile(home: Path, flags: list[str]) -> None:
    assert flag_problem(flags) is None
    res = compile_cubin(PLAIN_KERNEL, arch="sm_90", flags=flags, use_cache=False)
    assert res.ok, res.log


def test_define_and_flag_checks_explain_themselves() -> None:
    assert define_problem("BLOCK", "2 * 128") is None
    assert define_problem("T", "unsigned int") is None
    assert "comma" in (define_problem("X", "max(1,2)") or "")
    assert "`$`" in (define_problem("X", "$(id)") or "")
    assert "a newline" in (define_problem("X", "1\nid") or "")
    assert "not one WarpForge passes on" in (flag_problem(["-ccbin", "/bin/sh"]) or "")


@needs_nvcc
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_file_and_include_folder_names_never_reach_nvcc_and_messages_name_them(home: Path, name: str) -> None:
    payload = PAYLOADS[name]
    inc = home / f"inc{payload}"
    inc.mkdir()
    (inc / "wf_val.h").write_text("#define WF_VAL 3\n")
    (inc / "wf_bad.h").write_text("#define WF_OTHER 1\nint wf_bad = undefined_in_header;\n")
    filename = str(home / f"dir{payload}" / f"k{payload}.cu")
    good = "#include \"wf_val.h\"\n" + PLAIN_KERNEL.replace("2.0f", "WF_VAL")
    res = compile_cubin(good, arch="sm_90", filename=filename, include_dirs=[str(inc)], use_cache=False)
    assert res.ok, res.log
    assert res.command[-1].endswith("/kernel.cu") and all(payload not in a for a in res.command)
    assert res.resources_for("k") is not None

    # An error in the source is reported under the user's file name, not the fixed one.
    res = compile_cubin(PLAIN_KERNEL.replace("2.0f", "undefined_here"), arch="sm_90", filename=filename,
                        use_cache=False)
    assert not res.ok
    assert any(m.file == filename and m.line == 3 and "undefined_here" in m.text for m in res.messages), res.messages
    assert "kernel.cu" not in res.log

    # An error in a header of an include folder: the log names the user's folder, not its link.
    res = compile_cubin("#include \"wf_bad.h\"\n" + PLAIN_KERNEL, arch="sm_90", filename=filename,
                        include_dirs=[str(inc)], use_cache=False)
    assert not res.ok and f"{inc}/wf_bad.h" in res.log and "include0" not in res.log, res.log
    assert markers(home) == []


@needs_nvcc
def test_a_file_name_with_a_quote_compiles_through_its_line_directives(home: Path) -> None:
    from warpforge.cuda.extract import standalone

    filename = str(home / 'say "hi" \\ there.cu')
    text = PLAIN_KERNEL.replace("2.0f", "undefined_here")
    src = SourceText(text.encode())
    model = parse(src.data)
    tu = standalone(src, model, model.kernels[0], filename=filename)
    res = compile_cubin(tu, arch="sm_90", filename=filename, use_cache=False)
    assert any(m.file == filename and m.line == 3 for m in res.messages), res.log
    res = compile_cubin(standalone(SourceText(PLAIN_KERNEL.encode()), parse(PLAIN_KERNEL.encode()),
                                   parse(PLAIN_KERNEL.encode()).kernels[0], filename=filename),
                        arch="sm_90", filename=filename, use_cache=False)
    assert res.ok, res.log


# ============================================================================== the lowest guard: hostile temp folder
@pytest.fixture
def hostile_tmp(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary folders under a path that would run a command in a shell: only the argv guard stands."""
    d = home / "tmp$(touch $HOME.tmpdir)`touch $HOME.tmpdir2`"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@needs_nvcc
def test_the_argv_guard_refuses_a_compile_under_a_hostile_temporary_folder(home: Path, hostile_tmp: Path) -> None:
    res = compile_cubin(PLAIN_KERNEL, arch="sm_90", use_cache=False)
    assert not res.ok and [m.code for m in res.messages] == ["unsafe"] and "TMPDIR" in res.log
    assert markers(home) == []


def _nvdisasm() -> str | None:
    try:
        return str(find_tool("nvdisasm"))
    except ToolMissing:
        return None


@needs_nvcc
def test_nvdisasm_reads_a_fixed_name_and_is_not_run_under_a_hostile_folder(home: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if _nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    built = compile_cubin(PLAIN_KERNEL, arch="sm_90", use_cache=False)
    assert built.ok
    assert "_Z1kPfi" in sass.disassemble(built.cubin)
    assert "STG" in guards.sass_text(built.cubin)
    d = home / "tmp$(touch $HOME.sass)"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    with pytest.raises(ToolMissing, match="not run: refusing to run nvdisasm"):
        sass.disassemble(built.cubin)
    with pytest.raises(RuntimeError, match="nvdisasm not run"):
        guards.sass_text(built.cubin)
    _, note = guards.sass_findings(built.cubin)
    assert note is not None and "skipped" in note
    assert markers(home) == []


def test_the_guard_names_the_character_and_the_tool() -> None:
    for ch, shown in (("$", "`$`"), ("`", "```"), ('"', '`"`'), ("\\", "`\\`"), ("\n", "a newline"),
                      ("\0", "a NUL byte")):
        with pytest.raises(UnsafeArgument) as e:
            guard_argv("ptxas", ["ptxas", f"a{ch}b"])
        assert "refusing to run ptxas" in str(e.value) and shown in str(e.value)
    assert guard_argv("nvcc", ["nvcc", "-DX=a b (c) 'd';|&<>*?"]) == ["nvcc", "-DX=a b (c) 'd';|&<>*?"]


# ============================================================================== ncu and compute-sanitizer
def _recorder(home: Path, name: str) -> str:
    """A stand-in tool that leaves ``$HOME.ran-NAME`` when it is started at all."""
    exe = home / f"fake-{name}"
    exe.write_text(f"#!/bin/sh\ntouch \"$HOME.ran-{name}\"\nexit 1\n")
    exe.chmod(0o755)
    return str(exe)


def _saxpy_layout() -> tuple[Layout, tuple[list[int], list[int], int]]:
    path = ROOT / "kernels" / "saxpy.cu"
    src = SourceText(path.read_bytes())
    model = parse(src.data)
    r = build_spec(src, model, model.kernels[0], str(path)).resolve()
    return Layout.from_resolved(r, "spec"), (list(r.grid), list(r.block), r.smem)


HOSTILE_SYMBOLS = ["k$(touch $HOME.sym)", "k`touch $HOME.sym2`", "regex:.*", "k; touch $HOME.sym3", "k\nid", ""]


@pytest.mark.parametrize("symbol", HOSTILE_SYMBOLS)
def test_ncu_is_never_started_for_a_kernel_name_that_is_not_an_identifier(home: Path, symbol: str) -> None:
    layout, launch = _saxpy_layout()
    with pytest.raises(ncu_mod.ProfilerUnavailable) as e:
        ncu_mod.collect(b"cubin", symbol, layout, launch, ncu=_recorder(home, "ncu"))
    assert e.value.kind == "failed" and "not a C++ identifier" in str(e.value)
    with pytest.raises(UnsafeArgument):
        ncu_mod.profile_command("ncu", "/tmp/r", symbol, "/tmp/job.pkl", sections=["SpeedOfLight"], metrics=[])
    assert markers(home) == []


def test_ncu_command_lines_pass_the_guard(home: Path, hostile_tmp: Path) -> None:
    cmd = ncu_mod.profile_command("ncu", "/tmp/r", "_Z5saxpyifPKfPf", "/tmp/job.pkl",
                                  sections=["SpeedOfLight"], metrics=["dram__bytes_read.sum"])
    assert cmd[cmd.index("--kernel-name") + 1] == "_Z5saxpyifPKfPf"
    for bad in ({"python": "/usr/bin/py$(touch $HOME.py)"}, {"sections": ["SpeedOfLight; id"]},
                {"metrics": ["dram__bytes_read.sum,$(id)"]}):
        kw: dict[str, Any] = {"sections": ["SpeedOfLight"], "metrics": [], **bad}
        with pytest.raises(UnsafeArgument):
            ncu_mod.profile_command("ncu", "/tmp/r", "saxpy", "/tmp/job.pkl", **kw)
    # The report and job live in a temporary folder: a hostile one stops the run before ncu profiles.
    layout, launch = _saxpy_layout()
    exe = _recorder(home, "ncu")
    ncu_mod._sections_cache.clear()
    with pytest.raises(ncu_mod.ProfilerUnavailable) as e:
        ncu_mod.collect(b"cubin", "saxpy", layout, launch, ncu=exe, warmup_seconds=0.0)
    assert "refusing to run ncu" in str(e.value)
    assert ncu_mod.export_pages(exe, str(hostile_tmp / "r.ncu-rep"), ncu_mod.PAGES) == {}
    ran = markers(home)
    assert ran in ([], ["home.ran-ncu"]), ran  # only `ncu --list-sections` may have run: no payload marker


@pytest.mark.parametrize("symbol", HOSTILE_SYMBOLS)
def test_compute_sanitizer_is_never_started_for_a_kernel_name_that_is_not_an_identifier(home: Path,
                                                                                       symbol: str) -> None:
    layout, launch = _saxpy_layout()
    report = sanitizer.run_sanitizer(b"cubin", symbol, layout, launch, sanitizer=_recorder(home, "san"))
    assert not report.ok and all(not t.ran and "not a C++ identifier" in t.note for t in report.tools)
    assert markers(home) == []


def test_compute_sanitizer_command_lines_pass_the_guard(home: Path, hostile_tmp: Path) -> None:
    cmd = sanitizer.sanitizer_command("compute-sanitizer", "memcheck", "/tmp/x/job.pkl", "/usr/bin/python3")
    assert cmd[:3] == ["compute-sanitizer", "--tool", "memcheck"] and cmd[-2:] == ["--oneshot", "/tmp/x/job.pkl"]
    with pytest.raises(UnsafeArgument):
        sanitizer.sanitizer_command("compute-sanitizer", "memcheck; id", "/tmp/x/job.pkl")
    with pytest.raises(UnsafeArgument):
        sanitizer.sanitizer_command("compute-sanitizer", "memcheck", "/tmp/x/job.pkl", "/usr/bin/py`id`")
    layout, launch = _saxpy_layout()
    report = sanitizer.run_sanitizer(b"cubin", "saxpy", layout, launch, sanitizer=_recorder(home, "san"))
    assert not report.ok and all(not t.ran and "refusing to run compute-sanitizer" in t.note for t in report.tools)
    assert markers(home) == []


# ============================================================================== the editor: open such a file
WORK = Path(os.environ.get("WARPFORGE_LSP_TEST_DIR", "/tmp")) / f"warpforge-inject-{os.getpid()}"


def _server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(WORK / "cache")
    env["HOME"] = str(WORK / "home")
    return env


@pytest.fixture
def lsp_work() -> Iterator[Path]:
    (WORK / "home").mkdir(parents=True, exist_ok=True)
    yield WORK
    shutil.rmtree(WORK, ignore_errors=True)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "warpforge", "serve"],
                                              server_env=_server_env()))
async def client(lsp_client: LanguageClient) -> Any:
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=WORK.as_uri(),
        initialization_options={"warpforge": {"debounce": 0.05}}))
    yield
    await lsp_client.shutdown_session()


@needs_nvcc
async def test_opening_hostile_files_in_the_editor_runs_nothing(client: LanguageClient, lsp_work: Path) -> None:
    import asyncio

    folder = lsp_work / "repo $(touch $HOME.lspdir) `touch $HOME.lspdir2`"
    folder.mkdir(parents=True, exist_ok=True)
    docs = {
        # The tune value fails the spec; the kernel is compiled without it and nvcc reports BLOCK.
        folder / "tuned.cu": SPEC_HEAD + "// @warpforge tune BLOCK = 256 $(touch $HOME.lsptune) "
                             "`touch $HOME.lsptune2`, 128\n" + KERNEL,
        # A legal but hostile name: compiled, and its compile error is reported at its line.
        folder / 'k$(touch $HOME.lspname)`touch $HOME.lspname2`;"q".cu':
            PLAIN_KERNEL.replace("2.0f", "undefined_here"),
    }
    uris = []
    for path, text in docs.items():
        path.write_text(text)
        uri = path.as_uri()
        uris.append(uri)
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=text)))

    async def compiled(uri: str) -> list[lsp.Diagnostic]:
        while True:
            diags = client.diagnostics.get(uri)
            if diags is not None and any(d.code == "WF000" for d in diags):
                return list(diags)
            await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    tuned = await asyncio.wait_for(compiled(uris[0]), 60)
    named = await asyncio.wait_for(compiled(uris[1]), 60)
    assert any("BLOCK" in d.message for d in tuned if d.code == "WF000")
    assert any("undefined_here" in d.message and d.range.start.line == 2 for d in named if d.code == "WF000")
    assert markers(lsp_work) == []
