"""The warpforge.toml a missing header's quick fixes write (compiler.fixes): found folders and databases, and
edits of an existing file that keep it valid TOML with the user's other settings (read back with tomllib and
with ``compiler.project``, as every build reads it)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from warpforge.compiler.fixes import databases, folders_holding, missing_header_fixes, with_setting
from warpforge.compiler.project import project_build


def test_a_new_file_and_edits_of_an_existing_one() -> None:
    assert with_setting(None, "include", "include", merge_list=True) == '[build]\ninclude = ["include"]\n'
    no_build = '[search]\nbudget = 4\n'
    got = with_setting(no_build, "include", "inc", merge_list=True)
    assert got is not None and tomllib.loads(got) == {"search": {"budget": 4}, "build": {"include": ["inc"]}}
    other = '[build]\nstd = "c++20"\n\n[search]\nbudget = 4\n'
    got = with_setting(other, "compile_commands", "out/compile_commands.json")
    assert got is not None and tomllib.loads(got)["build"] == {"compile_commands": "out/compile_commands.json",
                                                               "std": "c++20"}
    merged = with_setting('[build]\ninclude = ["common"]  # shared\nstd = "c++17"\n', "include", "inc",
                          merge_list=True)
    assert merged is not None and tomllib.loads(merged)["build"] == {"include": ["common", "inc"], "std": "c++17"}
    # a value over several lines is left to the user rather than broken
    assert with_setting('[build]\ninclude = [\n  "a",\n]\n', "include", "inc", merge_list=True) is None
    assert with_setting("not = [valid", "include", "inc") is None


def test_folders_and_databases_are_found_under_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "third" / "lib" / "include" / "act").mkdir(parents=True)
    (tmp_path / "third" / "lib" / "include" / "act" / "act.h").write_text("#pragma once\n")
    (tmp_path / ".git" / "act").mkdir(parents=True)
    (tmp_path / ".git" / "act" / "act.h").write_text("")  # never looked into
    (tmp_path / "src" / "k.cu").write_text('#include "act/act.h"\n__global__ void k() {}\n')
    assert folders_holding(tmp_path, "act/act.h") == [tmp_path / "third" / "lib" / "include"]
    assert folders_holding(tmp_path, "../etc/passwd") == []
    (tmp_path / "cmake-build-release").mkdir()
    db = tmp_path / "cmake-build-release" / "compile_commands.json"
    db.write_text(json.dumps([{"directory": str(tmp_path), "file": str(tmp_path / "src" / "k.cu"),
                               "command": f"nvcc -I{tmp_path / 'third/lib/include'} -c src/k.cu"}]))
    assert databases(tmp_path) == [db.resolve()]
    fixes = missing_header_fixes(tmp_path / "src" / "k.cu", "act/act.h", tmp_path)
    assert [f.title for f in fixes] == [
        "Use cmake-build-release/compile_commands.json (the project's build) for WarpForge's builds",
        "Create warpforge.toml with include folder third/lib/include/"]
    # each fix, written, is a build description WarpForge reads with the header's folder in it
    for fix in fixes:
        fix.path.write_text(fix.text)
        build = project_build(tmp_path / "src" / "k.cu")
        assert build is not None and str(tmp_path / "third" / "lib" / "include") in build.include_dirs, fix.title
        fix.path.unlink()
