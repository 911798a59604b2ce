"""Retrieval over real CUDA code: chunk sources by kernel/function, tag them, search with quality weights.

Why chunks by function: the planner needs "a kernel that solves a problem like this one" — a whole
``__global__`` or ``__device__`` function with its name, what it computes (op type) and how (patterns:
warp shuffles, vector loads, shared-memory tiles) — not a window of lines cut mid-loop. The source model
from ``warpforge.cuda.parse`` (tree-sitter) gives exactly those spans for CUDA and C++ files.

Why weights and a per-source cap: a production library's kernel is better evidence than a tutorial's, and
one large source (a whole library indexed) must not fill every slot of the top-k. Scores from a backend
(BM25 or Pinecone's reranker) are multiplied by the source's weight, boosted when the op type matches,
and at most ``per_source`` hits of one source are kept.

Backends (``sqlite_fts`` embedded by default, ``pinecone_backend`` for teams) implement ``Backend``;
``backends.open_index`` picks one.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..cuda.model import DeclKind
from ..cuda.parser import parse
from ..cuda.text import SourceText

#: file suffixes indexed from a directory
SOURCE_SUFFIXES = (".cu", ".cuh", ".cc", ".cpp", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl")
#: longest chunk text kept (a kernel longer than this is truncated, with a note)
MAX_CHUNK_CHARS = 12000
#: files larger than this are skipped (generated code, amalgamations)
MAX_FILE_BYTES = 2_000_000

#: op type -> words in a function's name or its comment that say what it computes (checked in order)
OP_TYPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "attn", "flash", "mha", "sdpa")),
    ("softmax", ("softmax",)),
    ("layernorm", ("layernorm", "layer_norm", "rmsnorm", "rms_norm", "groupnorm", "batchnorm", "normalize")),
    ("gemm", ("gemm", "matmul", "mma", "sgemm", "hgemm", "dgemm", "matrix_mul", "batched_mm", "bmm")),
    ("gemv", ("gemv", "spmv", "matvec")),
    ("conv", ("conv", "convolution", "stencil", "correlat")),
    ("transpose", ("transpose", "permute")),
    ("scan", ("scan", "prefix", "cumsum", "inclusive", "exclusive")),
    ("histogram", ("histogram", "histo", "bincount")),
    ("sort", ("sort", "radix", "bitonic", "merge_path", "topk", "top_k", "argsort")),
    ("reduction", ("reduce", "reduction", "sum", "norm", "argmax", "argmin", "dot", "mean", "max", "min")),
    ("quantize", ("quant", "fp8", "fp4", "int8", "dequant")),
    ("embedding", ("embedding", "gather", "scatter", "index_select", "lookup")),
    ("elementwise", ("saxpy", "axpy", "gelu", "relu", "silu", "swish", "sigmoid", "tanh", "add", "mul", "scale",
                     "elementwise", "activation", "copy", "fill", "axpby", "bias")),
)

#: pattern tag -> regex over the chunk's code
PATTERNS: tuple[tuple[str, str], ...] = (
    ("shared_memory", r"__shared__|extern\s+__shared__"),
    ("warp_shuffle", r"__shfl(_xor|_down|_up)?_sync|__shfl_xor|__shfl_down|\.shfl"),
    ("warp_reduce_intrinsic", r"__reduce_(add|min|max|and|or|xor)_sync"),
    ("vectorized", r"\b(float|int|uint|half|double)[24]\b|reinterpret_cast<\s*(const\s+)?\w+[24]\s*\*|\buint4\b"),
    ("atomics", r"\batomic(Add|Max|Min|CAS|Exch|Inc|Dec|And|Or|Xor)\w*"),
    ("tensor_cores", r"\bwmma::|mma\.sync|\bwgmma\b|\bmma_sync\b|cute::|tcgen05"),
    ("async_copy", r"cp\.async|__pipeline_memcpy_async|cuda::memcpy_async|cp_async|\bTMA\b|cp\.async\.bulk"),
    ("cooperative_groups", r"cooperative_groups|\bcg::"),
    ("grid_stride", r"blockDim\.x\s*\*\s*gridDim\.x|gridDim\.x\s*\*\s*blockDim\.x"),
    ("launch_bounds", r"__launch_bounds__"),
    ("unroll", r"#\s*pragma\s+unroll"),
    ("half_precision", r"\b__half2?\b|\b__nv_bfloat162?\b|\bhalf2\b|__float2half|__half2float"),
    ("readonly_cache", r"__ldg\s*\(|__restrict__"),
    ("online_softmax", r"(?s)(max\w*\s*=\s*fmaxf?.*expf?\(.*(old|prev|running))|online"),
    ("double_buffering", r"double.?buffer|\[2\]\s*\[|stage\s*\^=\s*1|pipe(line)?_stage"),
    ("block_reduce", r"BlockReduce|block_reduce|blockReduce"),
    ("fast_math", r"__expf|__logf|__fdividef|__frcp|__sinf|__cosf|rsqrtf"),
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def split_identifier(name: str) -> list[str]:
    """``blockReduceSum`` / ``softmax_rows`` → words, so prose queries match identifiers."""
    out: list[str] = []
    for part in re.split(r"[_:\W]+", name):
        out.extend(w.lower() for w in _CAMEL.sub(" ", part).split() if w)
    return out


def op_type(name: str, text: str = "") -> str:
    """What a function computes, from its name first, then its leading comment."""
    words = split_identifier(name)
    joined = "_".join(words)
    for op, keys in OP_TYPES:
        if any(k in words or (len(k) >= 4 and k in joined) for k in keys):
            return op
    comment = " ".join(ln.strip("/ *") for ln in text.splitlines()[:8] if ln.strip().startswith(("//", "/*", "*")))
    cwords = {w.lower() for w in _WORD.findall(comment)}
    for op, keys in OP_TYPES:
        if any(k in cwords for k in keys):
            return op
    return "other"


def pattern_tags(text: str) -> list[str]:
    return [tag for tag, rx in PATTERNS if re.search(rx, text)]


@dataclass(frozen=True)
class Chunk:
    """One function of a source file, tagged."""

    id: str
    source: str
    path: str
    name: str
    kind: str  # "kernel" | "device_function" | "function" | "type"
    op_type: str
    tags: tuple[str, ...]
    weight: float
    start_line: int
    end_line: int
    text: str

    @property
    def words(self) -> str:
        """Searchable words of the name (identifier parts) for the keyword index."""
        return " ".join(split_identifier(self.name))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tags"] = list(self.tags)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Chunk:
        return cls(str(d["id"]), str(d["source"]), str(d["path"]), str(d["name"]), str(d["kind"]),
                   str(d["op_type"]), tuple(d.get("tags") or ()), float(d.get("weight", 1.0)),
                   int(d.get("start_line", 0)), int(d.get("end_line", 0)), str(d.get("text", "")))


def chunk_id(source: str, path: str, name: str, start_line: int) -> str:
    return hashlib.sha256(f"{source}\0{path}\0{name}\0{start_line}".encode()).hexdigest()[:24]


def _comment_above(src: SourceText, start: int) -> str:
    """The ``//`` / ``/* */`` lines directly above a definition (what it computes, in the author's words)."""
    line = src.line_of(start) - 1
    lines: list[str] = []
    while line >= 0 and len(lines) < 12:
        t = src.line_text(line).strip()
        if t.startswith(("//", "/*", "*")) or t.endswith("*/"):
            lines.append(src.line_text(line))
            line -= 1
            continue
        break
    return "\n".join(reversed(lines))


def chunk_source(text: str | bytes, path: str, source: str, weight: float = 1.0) -> list[Chunk]:
    """Kernels, device functions, host functions and CUDA-bearing types of one file."""
    src = SourceText(text)
    model = parse(src.data)
    out: list[Chunk] = []

    def add(name: str, kind: str, start: int, end: int) -> None:
        body = src.data[start:end].decode("utf-8", errors="replace")
        comment = _comment_above(src, start)
        full = f"{comment}\n{body}".strip() if comment else body
        if len(full) > MAX_CHUNK_CHARS:
            full = full[:MAX_CHUNK_CHARS] + "\n// ... (truncated)"
        first = src.line_of(start) + 1
        last = src.line_of(max(start, end - 1)) + 1
        out.append(Chunk(chunk_id(source, path, name, first), source, path, name, kind, op_type(name, full),
                         tuple(pattern_tags(body)), float(weight), first, last, full))

    for k in model.kernels:
        add(k.qualified_name, "kernel", k.span.start, k.span.end)
    for d in model.declarations:
        if not d.names:
            continue
        name = "::".join((*d.namespace, d.names[0]))
        if d.kind is DeclKind.DEVICE_FUNCTION:
            add(name, "device_function", d.span.start, d.span.end)
        elif d.kind is DeclKind.HOST_FUNCTION:
            add(name, "function", d.span.start, d.span.end)
        elif d.kind is DeclKind.TYPE and re.search(rb"__device__|__global__", src.data[d.span.start:d.span.end]):
            add(name, "type", d.span.start, d.span.end)
    return out


def iter_sources(root: Path, suffixes: Sequence[str] = SOURCE_SUFFIXES) -> Iterator[Path]:
    """Source files under ``root`` (or ``root`` itself), sorted, skipping hidden and build directories."""
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in ("build", "node_modules",
                                                                                      "__pycache__"))
        for f in sorted(filenames):
            if f.endswith(tuple(suffixes)):
                yield Path(dirpath) / f


def chunk_directory(root: str | Path, source: str, weight: float = 1.0) -> Iterator[Chunk]:
    base = Path(root)
    for p in iter_sources(base):
        try:
            if p.stat().st_size > MAX_FILE_BYTES:
                continue
            data = p.read_bytes()
        except OSError:
            continue
        rel = str(p.relative_to(base)) if base.is_dir() else p.name
        yield from chunk_source(data, rel, source, weight)


# --------------------------------------------------------------------------- queries
#: words that say nothing about what code does (C keywords, CUDA builtins, filler)
_STOP_TEXT = """
a an and are as at be by for from in into is it of on or the to with this that these those each per via
int float double void const unsigned signed char short long bool auto return if else for while do break
continue struct class template typename static inline extern sizeof nullptr true false size_t
__global__ __device__ __host__ __restrict__ __shared__ __forceinline__ __syncthreads threadidx blockidx
blockdim griddim x y z i j k n idx tid ptr out in
"""
STOPWORDS = frozenset(_STOP_TEXT.split())


@dataclass(frozen=True)
class Query:
    text: str
    op_type: str | None = None
    bottleneck: str | None = None
    tags: tuple[str, ...] = ()
    k: int = 5
    per_source: int = 2

    def terms(self, limit: int = 24) -> list[str]:
        """Distinct content words (identifiers split), most telling first: op type, tags, bottleneck, text."""
        words: list[str] = []
        if self.op_type:
            words.append(self.op_type)
        words.extend(t for tag in self.tags for t in tag.split("_"))
        if self.bottleneck:
            words.extend(w.lower() for w in _WORD.findall(self.bottleneck.split("(")[0]))
        for w in _WORD.findall(self.text):
            words.extend(split_identifier(w))
        out: list[str] = []
        for w in words:
            w = w.lower()
            if len(w) < 2 or w in STOPWORDS or w.isdigit() or w in out:
                continue
            out.append(w)
            if len(out) >= limit:
                break
        return out

    def natural(self) -> str:
        """The query as text for an embedding model (Pinecone's integrated inference)."""
        parts = [self.text.strip()]
        if self.op_type:
            parts.append(f"operation: {self.op_type}")
        if self.tags:
            parts.append("techniques: " + ", ".join(self.tags))
        if self.bottleneck:
            parts.append(f"bottleneck: {self.bottleneck.split('(')[0].strip()}")
        return "\n".join(p for p in parts if p)


def query_for_kernel(kernel_text: str, name: str, findings: Iterable[Any] = (), bottleneck: str | None = None,
                     k: int = 4, per_source: int = 2) -> Query:
    """A query for kernels like this one: its op type, the bottleneck, its name and the findings' actions."""
    actions = []
    for f in findings:
        a = f.get("action") if isinstance(f, dict) else getattr(f, "action", None)
        if a:
            actions.append(str(a))
    op = op_type(name, kernel_text)
    body_words = " ".join(dict.fromkeys(_WORD.findall(kernel_text)))
    text = " ".join([*split_identifier(name), *actions, body_words])
    return Query(text=text, op_type=op if op != "other" else None, bottleneck=bottleneck, k=k, per_source=per_source)


@dataclass
class Hit:
    chunk: Chunk
    score: float
    raw_score: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"score": round(self.score, 4), "raw_score": round(self.raw_score, 4), **self.chunk.to_json()}

    def snippet(self, max_chars: int = 2500) -> str:
        c = self.chunk
        text = c.text if len(c.text) <= max_chars else c.text[:max_chars] + "\n// ... (truncated)"
        tags = ", ".join(c.tags) or "none"
        return (f"### {c.name} ({c.kind}, op: {c.op_type}, patterns: {tags})\n"
                f"source: {c.source} (weight {c.weight:g}), {c.path}:{c.start_line}\n```cuda\n{text}\n```")


class Backend(Protocol):
    """Where chunks live. ``search`` returns candidates by relevance alone; ``Index`` applies the policy."""

    name: str

    def add(self, chunks: Sequence[Chunk]) -> int: ...

    def search(self, query: Query, limit: int) -> list[Hit]: ...

    def count(self) -> int: ...

    def sources(self) -> dict[str, int]: ...


@dataclass
class Index:
    """A backend plus the ranking policy: source weights, op-type boost, per-source cap."""

    backend: Backend
    op_boost: float = 1.5
    stats: dict[str, int] = field(default_factory=dict)

    def add_directory(self, root: str | Path, source: str, weight: float = 1.0, *, replace: bool = True,
                      batch: int = 96) -> int:
        """Index every source file under ``root`` as ``source``.

        With ``replace`` (the default) the source's earlier chunks are removed first where the backend
        can (SQLite), so re-running ``index add`` after the code changed leaves no stale functions behind.
        """
        if not Path(root).exists():
            raise FileNotFoundError(f"{root}: no such file or directory")
        remove = getattr(self.backend, "remove_source", None)
        if replace and remove is not None:
            remove(source)
        total = 0
        pending: list[Chunk] = []
        for c in chunk_directory(root, source, weight):
            pending.append(c)
            if len(pending) >= batch:
                total += self.backend.add(pending)
                pending = []
        if pending:
            total += self.backend.add(pending)
        return total

    def search(self, query: Query) -> list[Hit]:
        raw = self.backend.search(query, max(query.k * 6, 24))
        for h in raw:
            h.raw_score = h.raw_score or h.score
            boost = self.op_boost if query.op_type and h.chunk.op_type == query.op_type else 1.0
            tag_boost = 1.0 + 0.1 * len(set(query.tags) & set(h.chunk.tags))
            h.score = h.raw_score * max(h.chunk.weight, 0.0) * boost * tag_boost
        raw.sort(key=lambda h: (-h.score, h.chunk.source, h.chunk.path, h.chunk.start_line))
        out: list[Hit] = []
        per: dict[str, int] = {}
        seen: set[str] = set()
        for h in raw:
            if h.chunk.id in seen or h.score <= 0:
                continue
            if per.get(h.chunk.source, 0) >= max(1, query.per_source):
                continue
            seen.add(h.chunk.id)
            per[h.chunk.source] = per.get(h.chunk.source, 0) + 1
            out.append(h)
            if len(out) >= query.k:
                break
        return out
