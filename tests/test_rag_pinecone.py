"""The Pinecone backend through the real ``pinecone`` SDK against a local data-plane server (no network):
NDJSON ``upsert_records`` in batches, ``search`` with integrated inference and rerank, ``query`` by id,
index stats, and the same ranking policy (weights, per-source cap) as the embedded index."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pinecone import Pinecone

from conftest import KERNELS_DIR
from fakes.pinecone_server import FakePinecone
from warpforge.rag.backends import open_index
from warpforge.rag.index import Index, Query
from warpforge.rag.pinecone_backend import UPSERT_BATCH, PineconeBackend

KEY = "pc-test-key"


@pytest.fixture
def pc() -> Iterator[FakePinecone]:
    with FakePinecone(api_key=KEY) as fake:
        yield fake


def backend(fake: FakePinecone, **kw: object) -> PineconeBackend:
    return PineconeBackend(Pinecone(api_key=KEY).Index(host=fake.host), **kw)  # type: ignore[arg-type]


def test_upsert_records_as_ndjson_and_search_with_rerank(pc: FakePinecone) -> None:
    ix = Index(backend(pc))
    assert ix.add_directory(KERNELS_DIR, "reference", 1.0) == 9
    up = [r for r in pc.requests if r.path.endswith("/upsert")]
    assert len(up) == 1 and up[0].path == "/records/namespaces/warpforge/upsert"
    assert up[0].headers["content-type"] == "application/x-ndjson" and up[0].headers["api-key"] == KEY
    assert "x-pinecone-api-version" in up[0].headers
    first = json.loads(up[0].body.decode().splitlines()[0])
    assert {"_id", "chunk_text", "source", "name", "op_type", "tags", "weight", "code"} <= set(first)
    hits = ix.search(Query("softmax row reduction", k=3, per_source=3))
    assert hits[0].chunk.name == "softmax_rows" and hits[0].chunk.source == "reference"
    assert "expf" in hits[0].chunk.text and hits[0].chunk.start_line > 0
    search = json.loads(next(r for r in pc.requests if r.path.endswith("/search")).body)
    assert search["query"]["inputs"]["text"].startswith("softmax row reduction")
    assert search["rerank"] == {"model": "bge-reranker-v2-m3", "rank_fields": ["chunk_text"], "top_n": 24}
    assert ix.backend.usage["rerank_units"] == 1  # type: ignore[attr-defined]


def test_batches_of_96_and_count(pc: FakePinecone, tmp_path: Path) -> None:
    d = tmp_path / "many"
    d.mkdir()
    (d / "k.cu").write_text("\n".join(f"__global__ void k{i}(float* x) {{ x[{i}] = {i}; }}" for i in range(200)))
    ix = Index(backend(pc))
    assert ix.add_directory(d, "gen", 0.5) == 200
    ups = [r for r in pc.requests if r.path.endswith("/upsert")]
    assert [len(r.body.decode().splitlines()) for r in ups] == [UPSERT_BATCH, UPSERT_BATCH, 200 - 2 * UPSERT_BATCH]
    assert ix.backend.count() == 200


def test_similar_by_id_uses_query(pc: FakePinecone) -> None:
    ix = Index(backend(pc, namespace="team"))
    ix.add_directory(KERNELS_DIR, "reference")
    soft = ix.search(Query("softmax", k=1))[0].chunk
    near = ix.backend.similar(soft.id, 3)  # type: ignore[attr-defined]
    assert len(near) == 3 and soft.id not in {h.chunk.id for h in near}
    assert all(h.chunk.name and h.chunk.source == "reference" for h in near)
    q = json.loads(next(r for r in pc.requests if r.path == "/query").body)
    assert q["id"] == soft.id and q["namespace"] == "team" and q["includeMetadata"] is True


def test_weights_and_cap_apply_to_pinecone_hits(pc: FakePinecone) -> None:
    ix = Index(backend(pc))
    ix.add_directory(KERNELS_DIR, "examples", 0.5)
    ix.add_directory(KERNELS_DIR, "production", 2.0)
    hits = ix.search(Query("softmax row reduction", k=3, per_source=1))
    assert [h.chunk.source for h in hits] == ["production", "examples"]


def test_open_index_from_environment(pc: FakePinecone, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINECONE_API_KEY", KEY)
    monkeypatch.setenv("WARPFORGE_PINECONE_HOST", pc.host)
    monkeypatch.setenv("WARPFORGE_PINECONE_RERANK", "none")
    ix = open_index("pinecone", namespace="ns1")
    ix.add_directory(KERNELS_DIR, "reference")
    assert ix.search(Query("matrix transpose", k=1))[0].chunk.name == "transpose_naive"
    body = json.loads(next(r for r in pc.requests if r.path.endswith("/search")).body)
    assert "rerank" not in body
    monkeypatch.delenv("PINECONE_API_KEY")
    with pytest.raises(ValueError, match="PINECONE_API_KEY"):
        open_index("pinecone")


def test_wrong_key_is_an_error(pc: FakePinecone) -> None:
    bad = PineconeBackend(Pinecone(api_key="pc-wrong").Index(host=pc.host))
    with pytest.raises(Exception, match=r"(?i)unauthenticated|invalid api key|401"):
        bad.search(Query("softmax", k=1), 5)
