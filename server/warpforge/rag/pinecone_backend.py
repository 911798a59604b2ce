"""The shared retrieval backend: a Pinecone index with integrated inference (the reference design's RAG).

Why Pinecone for teams: one index of the libraries a team trusts (CUTLASS, CUB, FlashInfer, in-house
kernels) serves every member's editor, and integrated inference means WarpForge sends text, not vectors —
Pinecone embeds records on ``upsert_records`` and queries on ``search``, and reranks the hits in the same
call. Nothing here embeds locally, so there is no model to download.

The index must be created for a model with its text field mapped to ``chunk_text`` (see docs/llm.md):
``pc.create_index_for_model(name, cloud, region, embed={"model": "llama-text-embed-v2",
"field_map": {"text": "chunk_text"}})``. The backend then only talks to the index's data-plane host
(``Pinecone(api_key).Index(host=...)`` makes no control-plane call).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .index import Chunk, Hit, Query

#: Pinecone's limit of records per ``upsert_records`` call on integrated indexes
UPSERT_BATCH = 96
#: code kept in a record's fields (metadata is limited to 40 KB per record)
MAX_CODE_CHARS = 20000
FIELDS = ("source", "path", "name", "kind", "op_type", "tags", "weight", "start_line", "end_line", "code")


def embed_text(c: Chunk, max_code: int = 3000) -> str:
    """What the index embeds for a chunk: what it is and does first, then the start of its code."""
    return (f"{c.name} ({c.kind})\noperation: {c.op_type}\ntechniques: {', '.join(c.tags) or 'none'}\n"
            f"{c.words}\n{c.text[:max_code]}")


class PineconeBackend:
    name = "pinecone"

    def __init__(self, index: Any, *, namespace: str = "warpforge", rerank_model: str | None = "bge-reranker-v2-m3",
                 text_field: str = "chunk_text") -> None:
        self.index = index
        self.namespace = namespace
        self.rerank_model = rerank_model
        self.text_field = text_field
        self.usage: dict[str, int] = {"read_units": 0, "embed_total_tokens": 0, "rerank_units": 0}

    @classmethod
    def from_env(cls, *, host: str | None = None, api_key: str | None = None, namespace: str | None = None,
                 index_name: str | None = None) -> PineconeBackend:
        """Key from ``PINECONE_API_KEY``; the index by host (``WARPFORGE_PINECONE_HOST``) or by name."""
        from pinecone import Pinecone

        key = api_key or os.environ.get("PINECONE_API_KEY")
        if not key:
            raise ValueError("no Pinecone API key: set PINECONE_API_KEY (or use the embedded sqlite index)")
        host = host or os.environ.get("WARPFORGE_PINECONE_HOST")
        name = index_name or os.environ.get("WARPFORGE_PINECONE_INDEX")
        if not host and not name:
            raise ValueError("no Pinecone index: set WARPFORGE_PINECONE_HOST (the index's host) or "
                             "WARPFORGE_PINECONE_INDEX (its name)")
        pc = Pinecone(api_key=key)
        idx = pc.Index(host=host) if host else pc.Index(name=name or "")
        rerank = os.environ.get("WARPFORGE_PINECONE_RERANK", "bge-reranker-v2-m3")
        return cls(idx, namespace=namespace or os.environ.get("WARPFORGE_PINECONE_NAMESPACE", "warpforge"),
                   rerank_model=rerank if rerank and rerank != "none" else None)

    def record(self, c: Chunk) -> dict[str, Any]:
        return {"_id": c.id, self.text_field: embed_text(c), "source": c.source, "path": c.path, "name": c.name,
                "kind": c.kind, "op_type": c.op_type, "tags": list(c.tags), "weight": c.weight,
                "start_line": c.start_line, "end_line": c.end_line, "code": c.text[:MAX_CODE_CHARS]}

    def add(self, chunks: Sequence[Chunk]) -> int:
        n = 0
        for i in range(0, len(chunks), UPSERT_BATCH):
            batch = [self.record(c) for c in chunks[i : i + UPSERT_BATCH]]
            if batch:
                self.index.upsert_records(namespace=self.namespace, records=batch)
                n += len(batch)
        return n

    def _chunk(self, cid: str, fields: Mapping[str, Any]) -> Chunk:
        tags = fields.get("tags") or ()
        if isinstance(tags, str):
            tags = tags.split()
        return Chunk(cid, str(fields.get("source", "")), str(fields.get("path", "")), str(fields.get("name", cid)),
                     str(fields.get("kind", "")), str(fields.get("op_type", "other")), tuple(str(t) for t in tags),
                     float(fields.get("weight", 1.0) or 0.0), int(fields.get("start_line", 0) or 0),
                     int(fields.get("end_line", 0) or 0), str(fields.get("code", "")))

    def search(self, query: Query, limit: int) -> list[Hit]:
        kwargs: dict[str, Any] = {"namespace": self.namespace, "top_k": max(1, limit),
                                  "inputs": {"text": query.natural()}, "fields": list(FIELDS)}
        if self.rerank_model:
            kwargs["rerank"] = {"model": self.rerank_model, "rank_fields": [self.text_field],
                                "top_n": max(1, min(limit, 100))}
        resp = self.index.search(**kwargs)
        usage = getattr(resp, "usage", None)
        for k in self.usage:
            v = getattr(usage, k, None) if usage is not None else None
            if isinstance(v, int):
                self.usage[k] += v
        hits: list[Hit] = []
        for h in resp.result.hits:
            score = float(h.score)
            hits.append(Hit(self._chunk(str(h.id), dict(h.fields or {})), score, score))
        return hits

    def similar(self, chunk_id: str, k: int = 5) -> list[Hit]:
        """Records nearest to a stored one (by its stored vector): "more kernels like this one"."""
        resp = self.index.query(id=chunk_id, top_k=k + 1, namespace=self.namespace, include_metadata=True)
        out: list[Hit] = []
        for m in resp.matches:
            if m.id == chunk_id:
                continue
            score = float(m.score)
            out.append(Hit(self._chunk(str(m.id), dict(m.metadata or {})), score, score))
        return out[:k]

    def count(self) -> int:
        stats = self.index.describe_index_stats()
        ns = stats.namespaces.get(self.namespace) if stats.namespaces else None
        return int(ns.vector_count) if ns is not None else 0

    def sources(self) -> dict[str, int]:
        """Not available without a scan on Pinecone; the CLI shows the record count instead."""
        return {}
