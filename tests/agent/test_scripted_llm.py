"""The scripted LLM's scripts: every seed problem and every bundled level-1 problem on both targets, candidates
built from the examples (no compiles here: tests/examples and tests/gpu run the level-1 ones)."""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest

from agent import StopReason, run_job
from agent.providers.base import ProviderError
from agent.providers.scripted import NoScript, ScriptedProvider, has_script, script_for, scripted_problems
from agent.providers.scripted_candidates import EXAMPLES_DIR, LEVEL1_DEMOS, Level1Demo
from agent.providers.scripted_models import model_region_ids
from problems import load_problem
from tests.support.agents import SEED1, SEED2, SEED2_EVAL, fake_for, no_sleep, spec_for
from tests.support.doubles import FakeCandidate, FakeEvaluator, MemoryRecorder

ALL = [(p, t) for p in (SEED1, SEED2, SEED2_EVAL) for t in ("cpu", "cuda")]
EXAMPLE_OF_FAST = {
    (SEED1, "cpu"): "seed1_cpu.py", (SEED1, "cuda"): "seed1_cuda.py",
    (SEED2, "cpu"): "seed2_train_cpu.py", (SEED2, "cuda"): "seed2_train_cuda.py",
    (SEED2_EVAL, "cpu"): "seed2_train_cpu.py", (SEED2_EVAL, "cuda"): "seed2_eval_cuda.py",
}


def extension_part(source: str) -> str:
    """Everything that decides the build: the sources and the load_inline call."""
    start = min(source.index(m) for m in ("CUDA_SOURCE = ", "CPP_SOURCE = ") if m in source)
    return source[start: source.index("class ModelNew")]


def extension_name(source: str) -> str:
    match = re.search(r'name="([^"]+)"', source)
    assert match
    return match.group(1)


LEVEL1_FILES = sorted((EXAMPLES_DIR.parent / "problems" / "bundled" / "level1").glob("*.py"))
LEVEL1 = [(demo, target) for demo in LEVEL1_DEMOS for target in ("cpu", "cuda")]


def test_every_seed_and_level1_problem_has_a_script_on_both_targets() -> None:
    level1 = {(f"level1/{p.stem}", t) for p in LEVEL1_FILES for t in ("cpu", "cuda")}
    assert len(LEVEL1_FILES) == 13
    models = {(problem_id, target) for problem_id, target, _ in model_region_ids()}
    assert set(scripted_problems()) == set(ALL) | level1 | models


def test_every_region_kernel_of_the_example_models_has_a_cpu_script_of_four_turns() -> None:
    found = model_region_ids()
    assert {problem_id.split("/")[0] for problem_id, _, _ in found} == {"mlp_stack", "conv_stem", "attention_block"}
    for problem_id, target, path in found:
        turns, sources = script_for(problem_id, target)
        assert [c.tool for t in turns for c in t.calls] == ["compile", "check_correctness", "benchmark", "submit"]
        assert sources["kernel"] == path.read_text() and "class ModelNew" in sources["kernel"]
        assert not has_script(problem_id, "cuda")  # C++ kernels: the cpu target only


def _init_args(source: str, class_name: str) -> list[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [a.arg for a in item.args.args[1:]]
    raise AssertionError(f"no {class_name}.__init__")


@pytest.mark.parametrize(("demo", "target"), LEVEL1, ids=lambda x: getattr(x, "name", x))
def test_level1_script_reads_drafts_times_and_submits(demo: Level1Demo, target: str) -> None:
    turns, sources = script_for(demo.problem_id, target)
    calls = [(c.tool, c.candidate) for turn in turns for c in turn.calls]
    draft = [("check_correctness", demo.draft)] + ([("benchmark", "slow")] if demo.draft == "slow" else [])
    assert calls == [("get_gpu_specs", None), *draft, ("benchmark", "fast"), ("submit", "fast")]
    fast = (EXAMPLES_DIR / demo.example(target)).read_text()
    assert sources["fast"] == fast and sources[demo.draft] != fast
    # The draft is a one-call edit of forward: the same extension, so no compile of its own.
    assert extension_part(sources[demo.draft]) == extension_part(fast)
    assert extension_name(fast) == f"kl_l1_{demo.name}_{target}"
    problem = load_problem(demo.problem_id)
    for source in sources.values():
        assert _init_args(source, "ModelNew") == _init_args(problem.source, "Model")
        assert "torch.cuda" not in source  # nothing touches the GPU at import
    if target == "cuda":
        assert "cuda_sources=CUDA_SOURCE" in fast and "no_implicit_headers=True" in fast and "__global__" in fast
    else:
        assert "cuda_sources" not in fast and '"-fopenmp"' in fast
    assert all(turn.content for turn in turns) and len(turns) <= 5


@pytest.mark.parametrize(("demo", "target"), LEVEL1, ids=lambda x: getattr(x, "name", x))
def test_each_level1_script_runs_to_submit_against_a_fake(demo: Level1Demo, target: str) -> None:
    provider = ScriptedProvider.for_problem(demo.problem_id, target)
    draft = FakeCandidate("wrong") if demo.draft == "wrong" else FakeCandidate("pass", median_ms=5.0)
    evaluator = FakeEvaluator({provider.source(demo.draft): draft, provider.source("fast"): FakeCandidate("pass")})
    result = run_job(spec_for(load_problem(demo.problem_id), target), evaluator=evaluator, recorder=MemoryRecorder(),
                     provider=provider, sleep=no_sleep)
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    assert result.best is not None and result.best.source == provider.source("fast")


@pytest.mark.parametrize(("problem_id", "target"), ALL)
def test_script_walks_the_playbook_and_its_candidates_are_valid(problem_id: str, target: str) -> None:
    turns, sources = script_for(problem_id, target)
    calls = [(c.tool, c.candidate) for turn in turns for c in turn.calls]
    assert calls == [("get_gpu_specs", None), ("compile", "draft"), ("check_correctness", "wrong"),
                     ("check_correctness", "slow"), ("benchmark", "slow"), ("benchmark", "fast"),
                     ("profile", "fast"), ("submit", "fast")]
    assert len(turns) <= 10 and all(turn.content for turn in turns)
    for source in sources.values():
        tree = ast.parse(source)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
        assert "load_inline(" in source
    fast = (EXAMPLES_DIR / EXAMPLE_OF_FAST[(problem_id, target)]).read_text()
    assert sources["fast"] == fast
    if sources["slow"] != (EXAMPLES_DIR / "seed2_train_cuda.py").read_text():  # eval/cuda: the unfolded example
        assert extension_part(sources["slow"]) == extension_part(fast)  # same build, no compile
    assert len({sources[k] for k in ("wrong", "slow", "fast")}) == 3
    # the draft is a compile error with its own extension, so its failed build collides with nothing
    assert extension_name(sources["draft"]) not in {extension_name(sources[k]) for k in ("wrong", "slow", "fast")}
    if target == "cuda":
        assert "cuda_sources=" in sources["draft"] and "no_implicit_headers=True" in sources["draft"]


def test_wrong_variants_share_the_build_of_a_correct_example() -> None:
    for key in ALL:
        _, sources = script_for(*key)
        wrong = extension_part(sources["wrong"])
        assert any(wrong == extension_part(p.read_text()) for p in EXAMPLES_DIR.glob("seed*.py")), key


def test_seed1_cpu_script_uses_the_example_compile_error() -> None:
    _, sources = script_for(SEED1, "cpu")
    assert sources["draft"] == (EXAMPLES_DIR / "seed1_cpu_compile_error.py").read_text()
    assert sources["wrong"] == (EXAMPLES_DIR / "seed1_cpu_wrong.py").read_text()


@pytest.mark.parametrize(("problem_id", "target"), ALL)
def test_each_script_runs_to_submit_against_a_fake(problem_id: str, target: str) -> None:
    provider = ScriptedProvider.for_problem(problem_id, target)
    recorder = MemoryRecorder()
    result = run_job(spec_for(load_problem(problem_id), target), evaluator=fake_for(provider), recorder=recorder,
                     provider=provider, sleep=no_sleep)
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    assert result.best is not None and result.best.source == provider.source("fast")


def test_position_survives_summaries_and_unknown_scripts_are_refused() -> None:
    provider = ScriptedProvider.for_problem(SEED1, "cpu")
    history: list[dict[str, Any]] = [{"role": "system"}, {"role": "user"}, {"role": "user", "content": "Summary"},
               {"role": "assistant", "tool_calls": [{"id": "scripted-4-0"}]}, {"role": "tool"},
               {"role": "user", "content": "nudge"}]
    assert provider.position(history) == 5
    assert provider.complete(history, [], temperature=0.2).tool_calls[0].name == "profile"
    with pytest.raises(ProviderError, match="no turn 8"):
        provider.complete([{"role": "assistant", "tool_calls": [{"id": "scripted-6-0"}]}], [], temperature=0.2)
    with pytest.raises(NoScript, match="no script for level3/mlp on cpu; it has scripts for level1/argmax"):
        ScriptedProvider.for_problem("level3/mlp", "cpu")
