"""Unpack the source files of a fetched (bare) git repository into a folder outside the checkout.

Why: the search tool's ``fetch`` brings a snapshot as a bare git directory, and ``git archive HEAD`` stops at
the first blob the snapshot left out (large data files are often absent), losing every file after it. The
funnel needs only sources and build files, so this writes exactly those, blob by blob, skipping absent ones,
and records the commit (``.wide_commit``) and the origin (``.wide_origin``) next to them::

    python -m benchmarks.wide.unpack /work/.mirror/karpathy+llm.c/repo /work/outside/wide/karpathy+llm.c
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: what a kernel, its headers and its build need; nothing else is unpacked
SOURCE = re.compile(r"\.(cu|cuh|h|hh|hpp|hxx|c|cc|cpp|cxx|inl|inc|cmake)$"
                    r"|(^|/)(Makefile[^/]*|CMakeLists\.txt|[^/]*\.mk)$")


def _git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], input=stdin, capture_output=True,
                          check=True).stdout


def unpack(git_dir: Path, dest: Path, origin: str = "") -> tuple[str, int, int]:
    """Write HEAD's source files of ``git_dir`` under ``dest``; returns (commit, files written, files absent)."""
    commit = _git(git_dir, "rev-parse", "HEAD").decode().strip()
    entries: list[tuple[str, str]] = []
    for rec in _git(git_dir, "ls-tree", "-r", "-z", "HEAD").split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        name = path.decode("utf-8", errors="replace")
        if kind == "blob" and mode != "120000" and SOURCE.search(name) and ".." not in Path(name).parts:
            entries.append((sha, name))
    # one cat-file process for all blobs; an absent blob answers "<sha> missing"
    out = _git(git_dir, "cat-file", "--batch", stdin="".join(f"{s}\n" for s, _ in entries).encode())
    pos, written, absent = 0, 0, 0
    for _sha, name in entries:
        end = out.index(b"\n", pos)
        head = out[pos:end].decode().split()
        pos = end + 1
        if len(head) < 3 or head[1] == "missing":
            absent += 1
            continue
        size = int(head[2])
        blob = out[pos:pos + size]
        pos += size + 1
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        written += 1
    (dest / ".wide_commit").write_text(commit + "\n")
    (dest / ".wide_origin").write_text((origin or dest.name.replace("+", "/", 1)) + "\n")
    return commit, written, absent


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("git_dir", type=Path, help="the fetched bare repository (…/owner+name/repo)")
    ap.add_argument("dest", type=Path, help="the project's folder in the outside corpus (owner+name)")
    ap.add_argument("--origin", default="", help="owner/name (default: from DEST's name)")
    args = ap.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    commit, n, absent = unpack(args.git_dir, args.dest, args.origin)
    print(f"{args.dest.name}: {n} files at {commit[:12]}" + (f" ({absent} absent from the snapshot)" if absent else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
