"""Natural language → kernel (Mixture-of-Thoughts) through the real SDK against the local Messages API.

Several strategy prompts → candidates → local compile (+ fixer) → verification against the reference by an
evaluator (SYNTHETIC speedups here, labelled) → the best offered as insertion text.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from dataclasses import replace

import pytest

from conftest import KERNELS_DIR
from fakes.anthropic_server import FakeAnthropic, Reply, Request, tool
from fakes.llm_script import BROKEN, FIXED, VECTORIZED, SyntheticEvaluator
from warpforge.cuda import KernelNotFound, parse
from warpforge.policy.llm import Ledger, LLMConfig, synthesize
from warpforge.policy.llm.synth import rename_kernel, strategies

KEY = "sk-ant-test-synth"
SAXPY = (KERNELS_DIR / "saxpy.cu").read_text()


def author(req: Request) -> Reply:
    first = req.first_user_text
    if req.role == "kernel author":
        if "## Strategy: vectorized" in first:
            code = VECTORIZED
        elif "## Strategy: cooperative" in first:
            code = BROKEN
        elif "## Strategy: tiled" in first:
            code = VECTORIZED.replace("int n, float a", "float a, int n")  # wrong signature, twice
        else:
            code = FIXED
        return tool("submit_kernel", {"code": code, "grid": ["cdiv(N, 1024)"] if code is VECTORIZED else [],
                                      "block": [], "smem": "", "notes": ""})
    if req.role == "fixer":
        return tool("submit_kernel", {"code": FIXED, "grid": [], "block": [], "smem": "", "notes": "typo"})
    return Reply(status=400, error_type="invalid_request_error", message="unscripted")


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(author, api_key=KEY) as fake:
        yield fake


def test_strategies_are_prompt_sections() -> None:
    assert list(strategies()) == ["direct", "vectorized", "cooperative", "tiled"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: synthesis compiles every candidate")
def test_synthesis_offers_the_best_verified_kernel(api: FakeAnthropic) -> None:
    cfg = replace(LLMConfig.from_sources({"baseUrl": api.base_url}, api_key=KEY), backoff_base_s=0.001)
    evaluator = SyntheticEvaluator(SAXPY, "saxpy", factors={"synth:vectorized": 1.5, "synth:direct": 1.02,
                                                            "synth:cooperative": 1.0})
    res = asyncio.run(synthesize("Compute y = a*x + y over n floats.", file="saxpy.cu", text=SAXPY,
                                 reference="saxpy", name="saxpy_fast", config=cfg, ledger=Ledger(),
                                 evaluator=evaluator))
    status = {c.strategy: c.status for c in res.candidates}
    assert status == {"direct": "verified", "vectorized": "verified", "cooperative": "verified", "tiled": "failed"}
    assert res.best is not None and res.best.strategy == "vectorized" and res.verified
    assert len(api.by_role("fixer")) == 1  # the cooperative attempt did not compile; the fixer repaired it
    ins = res.insertion
    assert ins is not None
    assert ins.startswith("// Compute y = a*x + y over n floats.\n")
    assert "verified against the reference, 1.50x its speed" in ins
    assert "// @warpforge arg y: inout float[N]" in ins
    model = parse(ins)
    assert [k.name for k in model.kernels] == ["saxpy_fast"] and "float4" in ins
    assert res.spend["kernel"]["calls"] == len(api.requests)


def test_synthesis_without_key_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    res = asyncio.run(synthesize("y = a*x + y", file="saxpy.cu", text=SAXPY, reference="saxpy", ledger=Ledger()))
    assert res.insertion is None and res.best is None and "no Anthropic API key" in res.notices[0]


def test_synthesis_names_the_kernels_when_the_reference_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(KernelNotFound, match=r"^saxpy.cu: no __global__ kernel named `nope` \(kernels here: saxpy\)$"):
        asyncio.run(synthesize("y = a*x + y", file="saxpy.cu", text=SAXPY, reference="nope", ledger=Ledger()))


def test_rename_kernel_only_touches_the_definition_name() -> None:
    out = rename_kernel(VECTORIZED, "saxpy", "saxpy_v2")
    assert "void saxpy_v2(int n" in out and out.count("saxpy") == 1
