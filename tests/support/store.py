"""Rows and verdicts for the store's tests, and for the API's (`tests.support.api.verdict_dict`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from store import (
    Job,
    StoredProblem,
    Target,
    create_job,
    get_or_create_problem,
)
from vocabulary.builds import CompileResult, KernelInfo
from vocabulary.provenance import Provenance
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ErrorKind, Stage, Status, Trial, Verdict

PROBLEM_SOURCE = '''
"""ReLU of a vector."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
'''


class Builders:
    """Rows and verdicts for tests, on one session (nothing committed unless a test commits)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def problem(self, source: str = PROBLEM_SOURCE, bundled_id: str | None = None) -> StoredProblem:
        return get_or_create_problem(
            session=self.session, source=source, declarations={"mode": "train"}, bundled_id=bundled_id
        )

    def job(self, *, target: Target = Target.CPU, owner_id: int | None = None, **kwargs: Any) -> Job:
        problem_id = kwargs.pop("problem_id", None) or self.problem().id
        return create_job(
            session=self.session,
            problem_id=problem_id,
            target=target,
            owner_id=owner_id,
            llm_profile="scripted",
            llm_model="script",
            budgets={"turns": 10, "tool_calls": 30},
            **kwargs,
        )

    @staticmethod
    def verdict(
        status: Status = Status.PASS,
        *,
        median_ms: float | None = 1.0,
        eager_ms: float = 4.0,
        compile_ms: float = 2.0,
        correct: bool = True,
        stage: Stage = Stage.DONE,
        error_kind: ErrorKind | None = None,
    ) -> Verdict:
        """A real `Verdict`; timing samples spread around ``median_ms``."""

        def timing(ms: float) -> Timing:
            return Timing.from_samples([ms * 0.99, ms, ms, ms * 1.01, ms * 1.02], clock="perf_counter")

        return Verdict(
            status=status,
            stage=stage,
            error_kind=error_kind,
            message="" if status is Status.PASS else f"{status.value} at {stage.value}",
            compile=CompileResult(ok=True, seconds=3.5, kernels=(KernelInfo(kernel="k", registers=32),)),
            trials=tuple(
                Trial(seed_index=i, passed=correct, max_abs_err=1e-6, mean_abs_err=1e-7, mismatch_frac=0.0)
                for i in range(3)
            ),
            timing=timing(median_ms) if median_ms is not None else None,
            baselines=Baselines(eager=timing(eager_ms), torch_compile=timing(compile_ms)),
            sol_ms=0.25,
            flags=("speedup_over_limit",) if status is Status.SUSPICIOUS else (),
            provenance=Provenance(device="cpu", torch="2.13.0", harness="0.1.0"),
        )
