"""The LLM policy in the search: planner → coder → local compile → fixer, reflector, retrieval, degradation.

Everything goes through the real ``anthropic`` SDK to the local Messages-API server (tests/fakes). The
evaluator here gives SYNTHETIC speedups (labelled as such; it compiles with the real nvcc where present):
the end-to-end test shows the pipeline proposes, compiles, repairs and selects; whether the vectorized
saxpy really wins is checked on the GPU machine with the real evaluator.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import KERNELS_DIR
from fakes.anthropic_server import FakeAnthropic, Reply, Request, tool
from fakes.llm_script import SYNTHETIC, VEC_HYP, VECTORIZED, SyntheticEvaluation, SyntheticEvaluator, saxpy_model
from warpforge.cuda.candidate import Candidate
from warpforge.policy.llm import Ledger, LLMConfig, LLMPolicy, MixedPolicy, Price, policy_for_request
from warpforge.policy.llm.reflector import LessonStore
from warpforge.rag.index import Index
from warpforge.rag.sqlite_fts import SqliteBackend
from warpforge.search.engine import Budget
from warpforge.search.memory import SearchMemory
from warpforge.search.optimize import OptimizeOutcome, OptimizeRequest, optimize, prepare
from warpforge.search.tree import Node, SearchContext

KEY = "sk-ant-test-policy"
SAXPY = (KERNELS_DIR / "saxpy.cu").read_text()
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the end-to-end test "
                                "compiles every candidate (and the fixer's input) with the real compiler")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real key, no user index or cache leaks into these tests."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("WARPFORGE_RAG_INDEX", str(tmp_path / "no-index.sqlite"))


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(saxpy_model, api_key=KEY) as fake:
        yield fake


def cfg_for(api: FakeAnthropic, **kw: object) -> LLMConfig:
    cfg = LLMConfig.from_sources({"baseUrl": api.base_url}, api_key=KEY)
    return replace(cfg, backoff_base_s=0.001, backoff_cap_s=0.01, **kw)  # type: ignore[arg-type]


def saxpy_request(budget: int = 14) -> OptimizeRequest:
    return OptimizeRequest(str(KERNELS_DIR / "saxpy.cu"), SAXPY, "saxpy",
                           budget=Budget(max_candidates=budget, wall_seconds=240))


def make_llm(api: FakeAnthropic | None, req: OptimizeRequest, *, ledger: Ledger | None = None,
             compile_check: bool = False, **kw: object) -> LLMPolicy:
    src, model, kernel, spec = prepare(req)
    opts = {k: kw.pop(k) for k in ("index", "memory") if k in kw}
    cfg = cfg_for(api, **kw) if api is not None else LLMConfig.from_sources()
    return LLMPolicy(req.file, src, model, kernel, spec, req.findings, config=cfg, ledger=ledger or Ledger(),
                     compile_check=compile_check, **opts)  # type: ignore[arg-type]


def root_node(req: OptimizeRequest) -> tuple[Node, SearchContext]:
    root = Candidate.original(req.text, req.kernel)
    node = Node(0, root)
    node.evaluation = SyntheticEvaluation("ok", SYNTHETIC, 1.0)
    return node, SearchContext(root=root)


def child(parent: Node, c: Candidate, ev: SyntheticEvaluation, nid: int) -> Node:
    n = Node(nid, c, parent)
    parent.children.append(n)
    n.evaluation = ev
    return n


# --------------------------------------------------------------------------- end to end
@needs_nvcc
def test_optimize_end_to_end_with_mixed_policy(api: FakeAnthropic, tmp_path: Path) -> None:
    req = saxpy_request()
    memory = SearchMemory(tmp_path / "warpforge.db")
    ledger = Ledger()
    policy = policy_for_request(req, config=cfg_for(api, reflect_every=2), ledger=ledger, memory=memory)
    evaluator = SyntheticEvaluator(req.text, req.kernel)

    async def go() -> OptimizeOutcome:
        out = await optimize(req, evaluator, policy=policy, memory=memory)
        await policy.reflect(out.result)
        await policy.aclose()
        return out

    out = asyncio.run(go())
    r = out.result
    fams = {n.candidate.family: n for n in r.nodes}
    # the known-better variant proposed by the model was compiled, evaluated and won (SYNTHETIC speedups)
    assert r.best.candidate.family == "llm:vectorize" and r.best.speedup == 1.6
    assert getattr(r.best.evaluation, "gpu", None) == SYNTHETIC
    assert r.best.candidate.grid == ("cdiv(N, 1024)",) and "float4" in r.best.candidate.source
    # the broken one went through the fixer: nvcc's error was shown to it, and the repair compiled and verified
    fixer = api.by_role("fixer")
    assert len(fixer) == 1 and 'identifier "xs" is undefined' in fixer[0].first_user_text
    assert "line 4: error" in fixer[0].first_user_text
    assert fams["llm:grid_stride"].ok and "xs[" not in fams["llm:grid_stride"].candidate.source
    assert not any(c.source.count("xs[") for c in evaluator.seen)  # the broken code never reached the evaluator
    # the rules proposed in the same search, under the same candidate budget
    assert len([f for f in fams if not f.startswith("llm:") and f != "original"]) >= 3
    assert req.budget.max_candidates is not None and r.evaluations <= req.budget.max_candidates
    # accepting writes the kernel and the launch it was verified with
    new = out.new_text()
    assert "float4" in new and "@warpforge launch grid=cdiv(N, 1024), block=256" in new
    report = policy.llm.report()
    assert report["notices"] == [] and report["failures"] == []
    assert report["spend"]["job"]["calls"] == len(api.requests) and report["spend"]["job"]["usd"] > 0
    assert report["lessons"] >= 1
    assert {"common@v1+planner@v1", "common@v1+coder@v1", "common@v1+fixer@v1"} <= set(report["spend"]["prompts"])
    assert LessonStore(memory.path).recent(policy.llm.kernel_key)  # lessons sit next to search memory


def test_no_key_runs_offline_with_a_clear_message() -> None:
    req = saxpy_request(8)
    notices: list[str] = []
    policy = policy_for_request(req, on_notice=notices.append, ledger=Ledger())
    out = asyncio.run(optimize(req, SyntheticEvaluator(req.text, req.kernel, compile=False), policy=policy))
    assert len(notices) == 1 and "no Anthropic API key" in notices[0] and "ANTHROPIC_API_KEY" in notices[0]
    assert "WarpForge's own transformations only" in notices[0]
    assert not policy.llm.enabled
    fams = {n.candidate.family for n in out.result.nodes}
    assert fams - {"original"} and not any(f.startswith("llm:") for f in fams)


def test_network_failure_degrades_to_offline_with_a_notice() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    req = saxpy_request(8)
    cfg = replace(LLMConfig.from_sources({"baseUrl": f"http://127.0.0.1:{port}"}, api_key=KEY), max_retries=1,
                  backoff_base_s=0.001)
    policy = policy_for_request(req, config=cfg, ledger=Ledger())
    out = asyncio.run(optimize(req, SyntheticEvaluator(req.text, req.kernel, compile=False), policy=policy))
    assert policy.notices and "could not be reached" in policy.notices[0]
    assert "continuing with WarpForge's own transformations only" in policy.notices[0]
    assert out.result.evaluations > 1  # the rules carried the search


def test_cost_cap_stops_calls_and_degrades(api: FakeAnthropic) -> None:
    req = saxpy_request()
    ledger = Ledger()
    cap = 1.0
    cfg = cfg_for(api, cap_kernel_usd=cap, prices={"claude-test": Price(100.0, 500.0)},
                  max_tokens={r: 500 for r in ("planner", "coder", "fixer", "reflector")})
    cfg = cfg.with_model("claude-test")
    src, model, kernel, spec = prepare(req)
    from warpforge.policy.offline import OfflinePolicy

    llm = LLMPolicy(req.file, src, model, kernel, spec, config=cfg, ledger=ledger, compile_check=False)
    mixed = MixedPolicy(llm, OfflinePolicy(req.file, src, model, kernel, spec))
    root, ctx = root_node(req)

    async def go() -> tuple[list[Candidate], list[Candidate]]:
        first = await mixed.propose(root, ctx)
        calls = len(api.requests)
        again = await mixed.propose(root, ctx)
        assert len(api.requests) == calls  # once the cap is reached the API is not called again
        return first, again

    first, again = asyncio.run(go())
    assert 1 <= len(api.requests) <= 3 and first
    assert not llm.enabled and any("cost cap reached for this kernel" in n for n in llm.notices)
    assert ledger.spent(llm.kernel_key) <= cap
    assert again and not any(c.family.startswith("llm:") for c in again)  # the rules keep proposing


# --------------------------------------------------------------------------- planner behaviour
def test_planner_never_repeats_the_parents_hypothesis(api: FakeAnthropic) -> None:
    req = saxpy_request()
    llm = make_llm(api, req)
    root, ctx = root_node(req)
    new_hyp = {"title": "Unroll the tail loop", "family": "unroll_tail", "rationale": "r", "change": "c",
               "expected_gain": "small", "risk": "none"}

    def model(r: Request) -> Reply:
        if r.role == "planner" and "Current variant's code" in r.first_user_text:
            # the model proposes its parent's hypothesis again (reworded) and one new one
            again = {**VEC_HYP, "title": "Load and store x and y as float4 vectors"}
            return tool("propose_hypotheses", {"hypotheses": [again, new_hyp]})
        if r.role == "coder" and "Unroll the tail" in r.first_user_text:
            code = VECTORIZED.replace("for (int j", "#pragma unroll\n        for (int j")
            return tool("submit_kernel", {"code": code, "grid": [], "block": [], "smem": "", "notes": ""})
        return saxpy_model(r)

    api.responder = model

    async def go() -> list[Candidate]:
        kids = await llm.propose(root, ctx)
        vec = next(c for c in kids if c.family == "llm:vectorize")
        node = child(root, vec, SyntheticEvaluation("ok", SYNTHETIC, 1.6), 1)
        return await llm.propose(node, ctx)

    grandchildren = asyncio.run(go())
    assert [c.family for c in grandchildren] == ["llm:unroll_tail"]
    plan = [r for r in api.by_role("planner")][-1].first_user_text
    assert "- vectorize: Load and store x and y as float4 → 1.60x of the original" in plan
    assert len([r for r in api.by_role("coder") if "float4 vectors" in r.first_user_text]) == 0


def test_search_docs_mid_generation_and_retrieved_kernels(api: FakeAnthropic, tmp_path: Path) -> None:
    index = Index(SqliteBackend(tmp_path / "idx.sqlite"))
    index.add_directory(KERNELS_DIR, "reference", 1.0)
    req = saxpy_request()
    llm = make_llm(api, req, index=index)
    root, ctx = root_node(req)

    def model(r: Request) -> Reply:
        if r.role == "planner" and not r.tool_results():
            return tool("search_docs", {"query": "softmax row reduction", "op_type": "softmax", "k": 2},
                        thinking="Let me look for a row-wise kernel first.")
        return saxpy_model(r)

    api.responder = model
    kids = asyncio.run(llm.propose(root, ctx))
    assert {c.family for c in kids} == {"llm:vectorize", "llm:grid_stride"}
    first, second = api.by_role("planner")[:2]
    assert "search_docs" in first.tool_names
    assert "## Similar kernels from the index" in first.first_user_text  # retrieved up front too
    assert "extern \"C\" __global__ void saxpy" not in first.first_user_text.split("## Similar kernels")[1]
    result = second.tool_results()[0]
    assert "softmax_rows" in result["content"] and "source: reference" in result["content"]
    assert second.body["messages"][1]["content"][0]["type"] == "thinking"  # passed back verbatim


def test_a_variant_that_fails_verification_is_repaired_once(api: FakeAnthropic) -> None:
    req = saxpy_request()
    llm = make_llm(api, req)
    root, ctx = root_node(req)

    async def go() -> tuple[list[Candidate], list[Candidate]]:
        kids = await llm.propose(root, ctx)
        vec = next(c for c in kids if c.family == "llm:vectorize")
        gs = next(c for c in kids if c.family == "llm:grid_stride")
        child(root, gs, SyntheticEvaluation("incorrect", "y differs at index 33554430 (odd size): max abs err 2.1",
                                            None, evidence={"seed": 1}), 1)
        good = child(root, vec, SyntheticEvaluation("ok", SYNTHETIC, 1.6), 2)
        first = await llm.propose(good, ctx)
        second = await llm.propose(good, ctx)
        return first, second

    first, second = asyncio.run(go())
    fixer = api.by_role("fixer")
    assert len(fixer) == 1
    assert "failed verification" in fixer[0].first_user_text and "33554430 (odd size)" in fixer[0].first_user_text
    assert [c.family for c in first] == ["llm:grid_stride"]
    assert second == []  # repaired at most once


def test_lessons_feed_later_planning(api: FakeAnthropic, tmp_path: Path) -> None:
    req = saxpy_request()
    memory = SearchMemory(tmp_path / "warpforge.db")
    llm = make_llm(api, req, memory=memory, reflect_every=1)
    root, ctx = root_node(req)

    async def go() -> None:
        kids = await llm.propose(root, ctx)
        vec = next(c for c in kids if c.family == "llm:vectorize")
        node = child(root, vec, SyntheticEvaluation("ok", SYNTHETIC, 1.6), 1)
        await llm.propose(node, ctx)

    asyncio.run(go())
    assert len(api.by_role("reflector")) == 1
    outcome = api.by_role("reflector")[0].first_user_text
    assert "llm:vectorize: Load and store x and y as float4 → ok, 1.600x of the original" in outcome
    assert "lesson (llm:vectorize, faster): float4 accesses cut" in api.by_role("planner")[-1].first_user_text
    # a later job on the same kernel reads them too
    llm2 = make_llm(api, req, memory=memory)
    assert llm2.lessons.recent(llm2.kernel_key)


def test_malformed_planner_output_is_a_recorded_failure(api: FakeAnthropic) -> None:
    req = saxpy_request()
    llm = make_llm(api, req)
    root, ctx = root_node(req)
    api.responder = lambda r: tool("propose_hypotheses", {"ideas": ["vectorize"]})
    assert asyncio.run(llm.propose(root, ctx)) == []
    assert llm.enabled  # a malformed answer is not a reason to stop using the model
    assert [f.role for f in llm.failures] == ["planner"]
    assert "missing required property `hypotheses`" in llm.failures[0].detail
    assert len(api.requests) == 2  # asked once more, with the error


def test_coder_must_keep_the_signature(api: FakeAnthropic) -> None:
    req = saxpy_request()
    llm = make_llm(api, req, hypotheses_per_node=1)
    root, ctx = root_node(req)
    wrong = VECTORIZED.replace("int n, float a", "long n, float a")
    replies = iter([tool("propose_hypotheses", {"hypotheses": [VEC_HYP]}),
                    tool("submit_kernel", {"code": wrong, "grid": [], "block": [], "smem": "", "notes": ""}),
                    tool("submit_kernel", {"code": VECTORIZED + "\nint main() { return 0; }\n",
                                           "grid": ["cdiv(N, 1024)"], "block": [], "smem": "", "notes": ""})])
    api.responder = lambda r: next(replies)
    kids = asyncio.run(llm.propose(root, ctx))
    assert len(kids) == 1 and "int main" not in kids[0].source  # host code dropped
    feedback = api.requests[2].tool_results()[0]["content"]
    assert "parameter list differs" in feedback and "int n, float a" in feedback


def test_only_the_kernel_its_declarations_spec_and_findings_are_sent(api: FakeAnthropic) -> None:
    text = """#include <cuda_runtime.h>
#define SCALE 2.0f
__device__ float twice(float v) { return SCALE * v; }
__global__ void other_kernel(float* p) { p[0] = 1.0f; }
// @warpforge size N = 4096
// @warpforge arg x: inout float[N] uniform(-1, 1)
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void scale(float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]);
}
void host_secret_launcher(float* d) { const char* token = "HOST-SECRET"; scale<<<16, 256>>>(d, 4096); }
"""
    path = "/home/someone/private-project/scale.cu"
    req = OptimizeRequest(path, text, "scale", budget=Budget(max_candidates=4))
    api.responder = lambda r: tool("propose_hypotheses", {"hypotheses": []})
    for send, expect_secret in (("kernel", False), ("file", True)):
        llm = make_llm(api, req, send_context=send)
        root, ctx = root_node(req)
        asyncio.run(llm.propose(root, ctx))
        body = json.dumps(api.requests[-1].body)
        assert "twice" in body and "SCALE" in body and "@warpforge size N = 4096" in body
        assert ("HOST-SECRET" in body) is expect_secret and ("other_kernel" in body) is expect_secret
        assert "private-project" not in body


def test_mixed_policy_puts_model_variants_first(api: FakeAnthropic) -> None:
    req = saxpy_request()
    src, model, kernel, spec = prepare(req)
    from warpforge.policy.offline import OfflinePolicy

    mixed = MixedPolicy(make_llm(api, req), OfflinePolicy(req.file, src, model, kernel, spec))
    root, ctx = root_node(req)
    out = asyncio.run(mixed.propose(root, ctx))
    fams = [c.family for c in out]
    assert fams[:2] == ["llm:vectorize", "llm:grid_stride"] and len(fams) > 2
    assert {c.parent for c in out} == {root.candidate.id}
    assert out[0].steps == ("llm:vectorize",)

