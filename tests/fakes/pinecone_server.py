"""A local stand-in for a Pinecone index's data plane: stdlib HTTP on 127.0.0.1, the real wire protocol.

Why: the shared-index backend must be tested through the official SDK (request building, NDJSON upsert,
response decoding) without reaching Pinecone. ``Pinecone(api_key=...).Index(host="http://127.0.0.1:PORT")``
talks only to the data plane, which this server implements for the calls WarpForge makes:

- ``POST /records/namespaces/{ns}/upsert`` — NDJSON records (``_id`` + fields), integrated inference;
- ``POST /records/namespaces/{ns}/search`` — ``{"query": {"top_k", "inputs": {"text"}, "filter"?}, "fields"?,
  "rerank"?}`` → ``{"result": {"hits": [{"_id", "_score", "fields"}]}, "usage": {...}}``;
- ``POST /query`` — camelCase ``{"topK", "id" | "vector", "namespace", "includeMetadata"}`` → ``{"matches"}``;
- ``POST /describe_index_stats``.

"Embedding" is a bag of words (cosine over term counts) and "reranking" the share of query words present
in the rank fields: deterministic stand-ins for the hosted models, not imitations of their quality.
Requests must carry the ``Api-Key`` header.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

_WORD = re.compile(r"[a-z0-9]+")


def _terms(text: str) -> Counter[str]:
    words: list[str] = []
    for w in re.split(r"[^A-Za-z0-9]+", text):
        words.extend(x.lower() for x in re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", w).split())
    return Counter(w for w in words if len(w) > 1)


def _cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def _matches(fields: dict[str, Any], flt: dict[str, Any] | None) -> bool:
    for key, cond in (flt or {}).items():
        if key == "$and":
            if not all(_matches(fields, c) for c in cond):
                return False
            continue
        v = fields.get(key)
        if not isinstance(cond, dict):
            cond = {"$eq": cond}
        for op, want in cond.items():
            vals = v if isinstance(v, list) else [v]
            if op == "$eq" and want not in vals:
                return False
            if op == "$ne" and want in vals:
                return False
            if op == "$in" and not any(x in want for x in vals):
                return False
    return True


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class FakePinecone:
    def __init__(self, *, api_key: str = "pc-test-key", text_field: str = "chunk_text") -> None:
        self.api_key = api_key
        self.text_field = text_field
        self.records: dict[str, dict[str, dict[str, Any]]] = {}
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> FakePinecone:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-pinecone",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakePinecone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ----------------------------------------------------------------- protocol
    def _reply(self, h: BaseHTTPRequestHandler, status: int, obj: Any | None) -> None:
        data = b"" if obj is None else json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("x-pinecone-request-id", "req-1")
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in h.headers.items()}
        with self._lock:
            self.requests.append(Seen("POST", h.path, headers, raw))
        if headers.get("api-key") != self.api_key:
            return self._reply(h, 401, {"error": {"code": "UNAUTHENTICATED", "message": "Invalid API Key"},
                                        "status": 401})
        m = re.fullmatch(r"/records/namespaces/([^/]+)/(upsert|search)", h.path)
        if m:
            ns = unquote(m.group(1))
            if m.group(2) == "upsert":
                return self._upsert(h, ns, raw)
            return self._search(h, ns, json.loads(raw or b"{}"))
        if h.path == "/query":
            return self._query(h, json.loads(raw or b"{}"))
        if h.path == "/describe_index_stats":
            with self._lock:
                spaces = {ns: {"vectorCount": len(r)} for ns, r in self.records.items()}
            total = sum(v["vectorCount"] for v in spaces.values())
            return self._reply(h, 200, {"namespaces": spaces, "dimension": 1024, "indexFullness": 0.0,
                                        "totalVectorCount": total, "metric": "cosine", "vectorType": "dense"})
        return self._reply(h, 404, {"error": {"code": "NOT_FOUND", "message": h.path}, "status": 404})

    def _upsert(self, h: BaseHTTPRequestHandler, ns: str, raw: bytes) -> None:
        lines = [ln for ln in raw.decode().splitlines() if ln.strip()]
        with self._lock:
            space = self.records.setdefault(ns, {})
            for ln in lines:
                rec = json.loads(ln)
                if self.text_field not in rec:
                    return self._reply(h, 400, {"error": {"code": "INVALID_ARGUMENT", "message":
                                                          f"missing field '{self.text_field}'"}, "status": 400})
                space[str(rec["_id"])] = rec
        self._reply(h, 201, None)

    def _search(self, h: BaseHTTPRequestHandler, ns: str, body: dict[str, Any]) -> None:
        q = body.get("query") or {}
        top_k = int(q.get("top_k") or 10)
        qtext = str((q.get("inputs") or {}).get("text") or "")
        qv = _terms(qtext)
        with self._lock:
            recs = list(self.records.get(ns, {}).values())
        scored = [(_cosine(qv, _terms(str(r.get(self.text_field, "")))), r) for r in recs
                  if _matches(r, q.get("filter"))]
        scored.sort(key=lambda x: (-x[0], str(x[1]["_id"])))
        scored = scored[:top_k]
        usage: dict[str, int] = {"read_units": 1, "embed_total_tokens": max(1, len(qtext) // 4)}
        rerank = body.get("rerank")
        if rerank:
            fields = rerank.get("rank_fields") or [self.text_field]
            rq = set(_terms(str(rerank.get("query") or qtext)))
            rescored = []
            for _, r in scored:
                words = set(_terms(" ".join(str(r.get(f, "")) for f in fields)))
                rescored.append((len(rq & words) / max(1, len(rq)), r))
            rescored.sort(key=lambda x: (-x[0], str(x[1]["_id"])))
            scored = rescored[: int(rerank.get("top_n") or len(rescored))]
            usage["rerank_units"] = 1
        want = body.get("fields")
        hits = []
        for score, r in scored:
            fields = {k: v for k, v in r.items() if k != "_id" and (want is None or k in want)}
            hits.append({"_id": r["_id"], "_score": round(score, 6), "fields": fields})
        self._reply(h, 200, {"result": {"hits": hits}, "usage": usage})

    def _query(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        ns = str(body.get("namespace") or "")
        with self._lock:
            recs = dict(self.records.get(ns, {}))
        if "id" in body:
            base = recs.get(str(body["id"]))
            qv = _terms(str(base.get(self.text_field, ""))) if base else Counter()
        else:
            qv = Counter()
        scored = sorted(((_cosine(qv, _terms(str(r.get(self.text_field, "")))), r) for r in recs.values()),
                        key=lambda x: (-x[0], str(x[1]["_id"])))[: int(body.get("topK") or 10)]
        matches = []
        for score, r in scored:
            m: dict[str, Any] = {"id": r["_id"], "score": round(score, 6), "values": []}
            if body.get("includeMetadata"):
                m["metadata"] = {k: v for k, v in r.items() if k != "_id"}
            matches.append(m)
        self._reply(h, 200, {"matches": matches, "namespace": ns, "usage": {"readUnits": 1}})
