"""``warpforge index add DIR --source NAME --weight W`` and ``warpforge index search QUERY``.

The index is what the LLM planner retrieves real kernels from (its prompt's "similar kernels" and its
SEARCH_DOCS tool). ``add`` chunks every CUDA/C++ file under DIR by kernel and function and tags each
with its op type and patterns; ``--weight`` is the source's quality (a production library above an
example collection). The embedded SQLite index (default, a file in the cache dir) needs nothing else;
``--backend pinecone`` writes to a team's Pinecone index (``PINECONE_API_KEY`` and
``WARPFORGE_PINECONE_HOST``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import inputs


def register(sub: Any) -> None:
    p = sub.add_parser("index", help="the retrieval index of CUDA kernels the LLM planner reads")
    isub = p.add_subparsers(dest="index_command", metavar="{add,search,stats}")
    isub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--backend", choices=("sqlite", "pinecone"), default="sqlite",
                       help="sqlite (embedded, default) or pinecone (shared; PINECONE_API_KEY, "
                       "WARPFORGE_PINECONE_HOST)")
        q.add_argument("--index", metavar="PATH", help="SQLite index file (default: $WARPFORGE_RAG_INDEX or "
                       "~/.cache/warpforge/rag/index.sqlite)")
        q.add_argument("--pinecone-host", metavar="URL", help="the Pinecone index's host (overrides the env)")
        q.add_argument("--namespace", help="Pinecone namespace (default warpforge)")

    a = isub.add_parser("add", help="index a directory's CUDA/C++ sources by kernel and function")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--source", required=True, help="a name for this source, e.g. cutlass or team-kernels")
    a.add_argument("--weight", type=float, default=1.0,
                   help="source quality: production libraries above examples (default 1.0)")
    a.add_argument("--append", action="store_true", help="keep the source's earlier chunks (default: replace)")
    a.add_argument("--json", action="store_true")
    common(a)
    a.set_defaults(func=run_add)

    s = isub.add_parser("search", help="search the index as the planner does")
    s.add_argument("query", metavar="QUERY")
    s.add_argument("--k", type=inputs.positive_int, default=5, help="results (default 5)")
    s.add_argument("--op", help="prefer this op type (softmax, gemm, reduction, ...)")
    s.add_argument("--per-source", type=inputs.positive_int, default=3,
                   help="at most this many results per source (default 3)")
    s.add_argument("--json", action="store_true")
    common(s)
    s.set_defaults(func=run_search)

    t = isub.add_parser("stats", help="chunks per source")
    t.add_argument("--json", action="store_true")
    common(t)
    t.set_defaults(func=run_stats)


def _open(args: argparse.Namespace, create: bool = False) -> Any:
    """The index; only ``add`` creates one (reading a missing index is an error, not a new empty file)."""
    from ..exitcodes import CliError
    from ..rag.backends import open_index

    try:
        return open_index(args.backend, path=args.index, pinecone_host=args.pinecone_host, namespace=args.namespace,
                          create=create)
    except ValueError as e:
        raise CliError(str(e)) from e
    except Exception as e:
        raise CliError(f"cannot open the {args.backend} index: {type(e).__name__}: {e}", 1) from e


def run_add(args: argparse.Namespace) -> int:
    from ..exitcodes import CliError

    root = Path(args.dir)
    if not root.exists():
        raise CliError(f"{args.dir}: no such file or directory")
    if not args.weight >= 0 or args.weight == float("inf"):
        raise CliError(f"--weight must be a number of 0 or more, got {args.weight}")
    index = _open(args, create=True)
    try:
        n = index.add_directory(root, args.source, args.weight, replace=not args.append)
    except Exception as e:
        raise CliError(f"indexing {args.dir} failed: {type(e).__name__}: {e}", 1) from e
    where = str(getattr(index.backend, "path", "") or args.backend)
    if args.json:
        print(json.dumps({"source": args.source, "weight": args.weight, "chunks": n, "index": where}))
    else:
        print(f"indexed {n} function{'s' if n != 1 else ''} from {args.dir} as `{args.source}` "
              f"(weight {args.weight:g}) into {where}")
        if n == 0:
            print(f"note: no kernels or functions found under {args.dir} (looked at .cu/.cuh/.cpp/.h files)",
                  file=sys.stderr)
    return 0


def run_search(args: argparse.Namespace) -> int:
    from ..exitcodes import CliError
    from ..rag.index import Query

    index = _open(args)
    try:
        hits = index.search(Query(args.query, op_type=args.op, k=args.k, per_source=args.per_source))
    except Exception as e:
        raise CliError(f"search failed: {type(e).__name__}: {e}", 1) from e
    if args.json:
        print(json.dumps([h.to_json() for h in hits], indent=2))
        return 0
    if not hits:
        print("no matches (add sources with `warpforge index add DIR --source NAME`)", file=sys.stderr)
        return 0
    for i, h in enumerate(hits, 1):
        c = h.chunk
        tags = ", ".join(c.tags) or "-"
        print(f"{i}. {c.name}  [{c.kind}, op {c.op_type}, {tags}]  score {h.score:.3f}")
        print(f"   {c.source} (weight {c.weight:g}): {c.path}:{c.start_line}-{c.end_line}")
    return 0


def run_stats(args: argparse.Namespace) -> int:
    index = _open(args)
    backend = index.backend
    sources = backend.sources()
    total = backend.count()
    if args.json:
        print(json.dumps({"backend": backend.name, "chunks": total, "sources": sources}))
    else:
        print(f"{backend.name}: {total} chunks")
        for s, n in sorted(sources.items()):
            print(f"  {s}: {n}")
    return 0
