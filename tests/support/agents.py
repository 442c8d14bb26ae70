"""The agent's tests' seed problems, scripted LLM profile, fakes and job specs (no compiles; the GPU
tests import it too, on a host without the service's packages)."""

from __future__ import annotations

from typing import Any

from agent import JobSpec
from agent.providers.scripted import ScriptedProvider
from problems.spec import Problem
from tests.support.doubles import FakeCandidate, FakeEvaluator
from vocabulary.budgets import Budgets

SEED1 = "level2/conv_tanh_scale_bias_maxpool"
SEED2 = "level2/conv_bn_scale_train"
SEED2_EVAL = "level2/conv_bn_scale_eval"

#: A script has no context window; the history is never compacted under it.
SCRIPTED_WINDOW = 1 << 20

try:
    from config.settings import LLMProfile

    SCRIPTED: Any = LLMProfile(provider="scripted", model="scripted", api_key_env=None, context_window=SCRIPTED_WINDOW)
except ImportError:  # the GPU box has torch and pytest, not the service's packages
    from types import SimpleNamespace

    SCRIPTED = SimpleNamespace(provider="scripted", model="scripted", context_window=SCRIPTED_WINDOW)


def no_sleep(_seconds: float) -> None:
    return None


def fake_for(provider: ScriptedProvider, **overrides: FakeCandidate) -> FakeEvaluator:
    """A fake that judges a seed script's candidates as the real harness would."""
    kinds = {"draft": FakeCandidate("compile_error"), "wrong": FakeCandidate("wrong"),
             "slow": FakeCandidate("pass", median_ms=5.0), "fast": FakeCandidate("pass", median_ms=1.0)}
    kinds.update(overrides)
    return FakeEvaluator({provider.source(k): v for k, v in kinds.items()})


#: The budgets of the agent's tests (the service's defaults are its settings'; the agent has none).
TEST_BUDGETS: dict[str, Any] = {"turns": 10, "tool_calls": 30, "max_tokens": 400_000, "max_cost_usd": 5.0,
                                "wall_clock_s": 3600.0}


def budgets_of(**changes: Any) -> Budgets:
    """`TEST_BUDGETS` with ``changes``."""
    return Budgets(**{**TEST_BUDGETS, **changes})


def spec_for(problem: Problem, target: str = "cpu", *, budgets: Budgets | None = None, llm: Any = SCRIPTED,
             **kw: Any) -> JobSpec:
    return JobSpec(problem=problem, target=target, llm=llm, budgets=budgets or Budgets(**TEST_BUDGETS), **kw)


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
