"""The tool sandbox (``compiler.sandbox``) and the include check (``compiler.includes``), with real processes.

The sandbox is tested directly with ordinary programs (a reader of stdin, an allocator, a writer, a sleeper
with a child), then through ``compile_cubin`` with the real nvcc: an include of a device file is refused at
its line before anything runs, one the check cannot see (a computed ``#include``) reaches nvcc with stdin
closed and under the memory cap, a climb out of the workspace is warned about, and no message names the
private build folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.compiler import includes, sandbox
from warpforge.compiler.build import compile_cubin
from warpforge.compiler.includes import _logical_lines
from warpforge.compiler.sandbox import Limits, MiB, exit_note, run_tool

PY = sys.executable
KERNEL = "__global__ void k(float* x) { x[threadIdx.x] = 2.0f; }\n"


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path


# ============================================================================== the sandbox itself
def test_a_tool_that_reads_stdin_gets_end_of_file_even_when_the_caller_s_stdin_stays_open() -> None:
    """The caller here is a process whose stdin is a pipe nobody writes to or closes (the language server's
    LSP pipe): the tool it starts must not wait on it."""
    code = ("import time, sys; from warpforge.compiler.sandbox import run_tool; t = time.perf_counter(); "
            "p = run_tool(['cat'], tool='t', timeout=30); "
            "print(repr(p.stdout), p.returncode, round(time.perf_counter() - t, 2))")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "server")}
    caller = subprocess.Popen([PY, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        out, _ = caller.communicate(timeout=20)
    finally:
        caller.kill()
    got, rc, seconds = out.split()
    assert got == "''" and rc == "0" and float(seconds) < 5, out


def test_an_allocation_beyond_the_memory_cap_fails_in_the_tool_and_in_its_children() -> None:
    grab = f"{PY} -c 'bytearray(1024 * 1024 * 1024)'"
    for argv in ([PY, "-c", "bytearray(1024 * 1024 * 1024)"], ["sh", "-c", grab]):
        proc = run_tool(argv, tool="t", timeout=60, limits=Limits(512 * MiB, None))
        assert proc.returncode != 0 and "MemoryError" in proc.stderr, (argv, proc.stderr)
    # The same allocation under no cap succeeds: the cap, not the program, made it fail.
    assert run_tool([PY, "-c", "bytearray(1024 * 1024 * 1024)"], tool="t", timeout=60,
                    limits=Limits(None, None)).returncode == 0


def test_a_tool_writing_past_the_file_size_cap_is_stopped(tmp_path: Path) -> None:
    lim = Limits(None, 1 * MiB)
    proc = run_tool(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=50"], tool="t", timeout=60, cwd=tmp_path,
                    limits=lim)
    assert proc.returncode == -signal.SIGXFSZ
    assert (tmp_path / "big").stat().st_size <= 1 * MiB
    note = exit_note(proc.returncode, "t", lim)
    assert note is not None and "larger than its cap" in note and "1 MiB" in note


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_a_tool_that_sleeps_is_killed_at_its_timeout_with_its_children(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired) as got:
        run_tool(["sh", "-c", "sleep 60 & echo $! > child.pid; echo started; sleep 60"], tool="t", timeout=1,
                 cwd=tmp_path)
    assert time.perf_counter() - t0 < 10
    assert "started" in str(got.value.output)
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.time() + 5
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _gone(child), f"the tool's child {child} survived the timeout"


def test_every_cuda_process_is_uncapped_in_address_space_and_compilers_are_capped() -> None:
    """A CUDA context reserves virtual ranges beyond physical memory: ncu, the sanitizer and the workers
    must not get RLIMIT_AS; the compilers and binary tools must."""
    for tool in ("ncu", "compute-sanitizer", "gpu-worker", "cuda-python"):
        assert sandbox.limits_for(tool).memory is None and sandbox.limits_for(tool).file_size is not None
    for tool in ("nvcc", "nvdisasm", "cuobjdump"):
        assert sandbox.limits_for(tool).memory is not None


def test_no_module_starts_a_process_except_through_the_sandbox() -> None:
    """One door: ``subprocess.run``/``Popen``/``check_output`` appear only in compiler/sandbox.py."""
    offenders = []
    for path in (ROOT / "server" / "warpforge").rglob("*.py"):
        if path.name == "sandbox.py":
            continue
        text = path.read_text()
        for needle in ("subprocess.run(", "subprocess.Popen(", "check_output(", "os.system(", "os.popen(",
                       "create_subprocess_exec(", "create_subprocess_shell("):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert offenders == []


# ============================================================================== the include check
def test_directives_are_read_after_line_splices_and_comments() -> None:
    text = 'a\n#inc\\\nlude "x" // c\nb /* x\ny */ c\n#/**/include "/dev/stdin"\ns = "//no";\n'
    assert _logical_lines(text) == [(1, "a"), (2, '#include "x"  '), (4, "b   c"),
                                    (6, '# include "/dev/stdin"'), (7, 's = "//no";'), (8, "")]


@needs_nvcc
@pytest.mark.parametrize("include", ['"/dev/stdin"', '"/dev/zero"', '"/dev/urandom"', "</proc/self/environ>",
                                     '"/sys/kernel/mm/transparent_hugepage/enabled"'])
def test_device_and_kernel_files_are_refused_at_their_line_and_nothing_runs(home: Path, include: str) -> None:
    t0 = time.perf_counter()
    src = f"#include <cuda_runtime.h>\n// a comment\n#include {include}\n{KERNEL}"
    res = compile_cubin(src, arch="sm_90", filename=str(home / "k.cu"), use_cache=False)
    assert time.perf_counter() - t0 < 10
    assert not res.ok and res.command == []  # nvcc never started
    (msg,) = [m for m in res.messages if m.severity == "error"]
    assert msg.file == str(home / "k.cu") and msg.line == 3 and msg.code == "include"
    assert "remove the include" in msg.text and include.strip('"<>') in msg.text


@needs_nvcc
def test_refusals_see_through_splices_comments_macros_climbs_fifos_and_user_headers(home: Path) -> None:
    ws = home / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "src").mkdir()
    user = str(ws / "src" / "k.cu")
    Path(user).write_text(KERNEL)
    depth = "../" * len(ws.parts)
    os.mkfifo(ws / "src" / "pipe.h")
    (ws / "src" / "helpers.cuh").write_text("#pragma once\n// helper\n#include \\\n  \"/dev/zero\"\n")
    cases = {
        '#inc\\\nlude "/dev/stdin"': (1, "/dev/stdin"),
        '#/* hidden */include "/dev/stdin"': (1, "/dev/stdin"),
        '#include /* a\ncomment */ "/dev/stdin"': (1, "/dev/stdin"),
        '#define SRC </dev/urandom>\n#include SRC': (2, "through the macro `SRC`"),
        f'#include "{depth}dev/zero"': (1, "/dev/zero"),
        '#include "pipe.h"': (1, "not a regular file"),
        '#include "helpers.cuh"': (1, f"in {ws / 'src' / 'helpers.cuh'}:3, included from here"),
    }
    for include, (line, why) in cases.items():
        res = compile_cubin(f"{include}\n{KERNEL}", arch="sm_90", filename=user, use_cache=False)
        errors = [m for m in res.messages if m.severity == "error"]
        assert not res.ok and res.command == [] and len(errors) == 1, (include, res.messages)
        assert errors[0].file == user and errors[0].line == line and why in errors[0].text, (include, errors)
    # A header found through an include folder (angled) is followed too.
    (ws / "inc").mkdir()
    (ws / "inc" / "ops.cuh").write_text('#include "/dev/stdin"\n')
    res = compile_cubin(f"#include <cuda_runtime.h>\n#include <ops.cuh>\n{KERNEL}", arch="sm_90", filename=user,
                        include_dirs=[str(ws / "inc")], use_cache=False)
    assert [(m.line, m.severity) for m in res.messages] == [(2, "error")] and res.command == [], res.messages


@needs_nvcc
def test_a_climb_out_of_the_workspace_is_warned_at_its_line_and_messages_never_name_the_build_folder(
        home: Path) -> None:
    ws = home / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "warpforge.toml").write_text("[build]\n")
    (ws / "common.cuh").write_text("#define SCALE 2.0f\n")
    user = ws / "src" / "k.cu"
    climb = "../" * 12 + "etc/passwd"
    src = f'#include "../common.cuh"\n#include "{climb}"\n{KERNEL.replace("2.0f", "SCALE")}'
    user.write_text(src)
    res = compile_cubin(src, arch="sm_90", filename=str(user), use_cache=False)
    warnings = [m for m in res.messages if m.code == "include"]
    assert len(warnings) == 1 and warnings[0].severity == "warning" and warnings[0].line == 2, res.messages
    assert "reads /etc/passwd, outside the workspace" in warnings[0].text
    # /etc/passwd is no C++: nvcc's errors in it sit on the user's #include line and name the file itself as
    # their origin (compiler.messages.anchor), never the private build folder.
    assert not res.ok and any(m.line == 2 and m.origin.startswith("passwd:") for m in res.messages
                              if m.severity == "error"), res.messages
    everything = res.log + "".join(m.file + m.text for m in res.messages)
    assert "warpforge-build-" not in everything and "/etc/passwd" in res.log


@needs_nvcc
def test_headers_in_the_workspace_the_toolkit_and_configured_folders_are_not_warned(home: Path) -> None:
    ws = home / "ws"
    (ws / "src" / "ops").mkdir(parents=True)
    (ws / ".git").mkdir()
    vendor = home / "vendor"
    vendor.mkdir()
    (vendor / "scale.cuh").write_text("#define VSCALE 3.0f\n")
    (ws / "src" / "ops" / "a.cuh").write_text('#include "../b.cuh"\n')
    (ws / "src" / "b.cuh").write_text("#define SCALE 2.0f\n")
    user = ws / "src" / "k.cu"
    src = ('#include <cuda_fp16.h>\n#include <cub/cub.cuh>\n#include "ops/a.cuh"\n#include "scale.cuh"\n'
           + KERNEL.replace("2.0f", "SCALE * VSCALE"))
    user.write_text(src)
    res = compile_cubin(src, arch="sm_90", filename=str(user), include_dirs=[str(vendor)], use_cache=False)
    assert res.ok and not [m for m in res.messages if m.code == "include"], res.messages
    # Without the folder configured, the vendor header is outside: warned (and the compile still runs).
    other = home / "other" / "k.cu"
    other.parent.mkdir()
    other.write_text('#include "../vendor/scale.cuh"\n' + KERNEL)
    res = compile_cubin(other.read_text(), arch="sm_90", filename=str(other), use_cache=False)
    assert [m.severity for m in res.messages if m.code == "include"] == ["warning"], res.messages


@needs_nvcc
def test_the_editor_s_workspace_folders_count_as_the_workspace(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No marker file in a plain folder: the file's own folder is the workspace, a sibling is outside, until
    the editor names the parent as its workspace folder (the language server does at initialize)."""
    (home / "shared").mkdir()
    (home / "shared" / "scale.cuh").write_text("#define SCALE 2.0f\n")
    user = home / "src" / "k.cu"
    user.parent.mkdir()
    user.write_text('#include "../shared/scale.cuh"\n' + KERNEL.replace("2.0f", "SCALE"))
    res = compile_cubin(user.read_text(), arch="sm_90", filename=str(user), use_cache=False)
    assert res.ok and [m.severity for m in res.messages if m.code == "include"] == ["warning"]
    monkeypatch.setenv(includes.ROOTS_ENV, "")
    includes.set_workspace_roots([str(home)])
    res = compile_cubin(user.read_text(), arch="sm_90", filename=str(user), use_cache=False)
    assert res.ok and not [m for m in res.messages if m.code == "include"], res.messages


@needs_nvcc
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/stdin"])
def test_a_computed_include_the_check_cannot_follow_ends_under_the_memory_cap(home: Path, device: str,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``#include S(/dev/zero)`` (a stringizing macro) is past what the check reads: nvcc runs, and the
    sandbox ends it. /dev/stdin reads end-of-file; /dev/zero and /dev/urandom fill the preprocessor's memory
    until the cap (lowered to 1 GiB here to keep the test light; the default 8 GiB ends in ~15 s) stops it,
    well within the time limit."""
    monkeypatch.setenv("WARPFORGE_COMPILE_MEMORY_MB", "1024")
    src = f"#define S(x) #x\n#include S({device})\n{KERNEL}"
    t0 = time.perf_counter()
    res = compile_cubin(src, arch="sm_90", filename=str(home / "k.cu"), use_cache=False, timeout=60)
    seconds = time.perf_counter() - t0
    assert not res.timed_out and seconds < 30, seconds
    if device == "/dev/stdin":
        assert res.ok, res.log
    else:
        assert not res.ok and "out of memory" in res.log, res.log


@needs_nvcc
def test_the_nvcc_memory_cap_reaches_cicc_and_a_heavy_template_build_fits_the_default(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = ("#include <cub/cub.cuh>\ntemplate <int B> __global__ void k(const float* in, float* out) {\n"
           "  using BR = cub::BlockReduce<float, B>;\n  __shared__ typename BR::TempStorage t;\n"
           "  float s = BR(t).Sum(in[threadIdx.x]);\n  if (threadIdx.x == 0) out[blockIdx.x] = s;\n}\n"
           "template __global__ void k<256>(const float*, float*);\n")
    res = compile_cubin(src, arch="sm_90", filename=str(home / "cubk.cu"), use_cache=False)
    assert res.ok, res.log
    monkeypatch.setenv("WARPFORGE_COMPILE_MEMORY_MB", "200")
    res = compile_cubin(src, arch="sm_90", filename=str(home / "cubk.cu"), use_cache=False)
    assert not res.ok and any(m.code == "limit" and "WARPFORGE_COMPILE_MEMORY_MB" in m.text
                              for m in res.messages), res.messages


@needs_nvcc
def test_hints_on_a_file_including_dev_stdin_answers_at_once_with_the_line(tmp_path: Path) -> None:
    """The CLI used to block for the 120 s compile limit when its own stdin stayed open."""
    f = tmp_path / "k.cu"
    f.write_text(f'#include "/dev/stdin"\n{KERNEL}')
    env = {**os.environ, "PYTHONPATH": str(ROOT / "server"), "WARPFORGE_CACHE": str(tmp_path / "cache")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([PY, "-m", "warpforge", "hints", str(f)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.perf_counter() - t0 < 30
    assert f"{f}:1:1: error: `#include \"/dev/stdin\"` reads /dev/stdin" in out, out + err
