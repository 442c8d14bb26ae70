"""Request and response bodies: ``XCreate`` comes in, ``XPublic`` goes out, ``Page[X]`` lists.

Inputs are checked here as far as types and bounds go (pydantic); what needs the problem parser,
the settings or the database (problem syntax, LLM profile names, quotas) is checked in
`api.services`. Every input model forbids unknown fields, so a typo ("trajectory") or a secret
put where it does not belong ("api_key") is an error instead of being silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from problems import MAX_SOURCE_BYTES, Problem
from store import Attempt, Job, JobKind, JobState, JsonField, Message, Target
from vocabulary.figures import AttemptFigures

__all__ = [
    "MAX_TRAJECTORIES",
    "AttemptDetail",
    "AttemptPublic",
    "BestPublic",
    "BudgetsInput",
    "CancelPublic",
    "ComponentHealth",
    "ErrorPublic",
    "EvaluationCreate",
    "FieldError",
    "HealthPublic",
    "JobCreate",
    "JobPublic",
    "MessagePublic",
    "Page",
    "ProblemDetail",
    "ProblemPublic",
]

T = TypeVar("T")

#: Trajectories are independent chats run side by side; past 16 they only burn budget.
MAX_TRAJECTORIES = 16
# Budget bounds: wide enough for any real run, tight enough that a typo (an extra zero or three)
# is refused instead of running for a week.
MAX_TURNS = 100
MAX_TOOL_CALLS = 1000
MAX_TOKENS = 20_000_000
MAX_COST_USD = 10_000.0
MAX_WALL_CLOCK_S = 7 * 24 * 3600.0
MAX_TARGET_SPEEDUP = 1000.0
#: A bundled id is ``level<k>/<name>``; anything longer is not one.
MAX_PROBLEM_ID_CHARS = 128
MAX_PROFILE_CHARS = 64
#: A model name as servers spell them (``Qwen/Qwen2.5-Coder-32B-Instruct``, ``gpt-4o-2024-08-06``).
MAX_MODEL_CHARS = 200

_INPUT = ConfigDict(extra="forbid", allow_inf_nan=False)


# -- errors ----------------------------------------------------------------------------------------


class FieldError(BaseModel):
    field: str
    message: str


class QuotaPublic(BaseModel):
    """Which quota of the key a 429 hit, its limit and what is used of it."""

    name: Literal["max_concurrent_jobs", "max_jobs_per_day", "cost_cap_usd"]
    limit: float
    used: float


class ErrorPublic(BaseModel):
    """Every 4xx/5xx body: what went wrong, in words, and a stable code to branch on."""

    detail: str = Field(description="What went wrong and what to do about it.")
    code: str = Field(description="A stable machine-readable code, e.g. `invalid_problem`, `quota_exceeded`.")
    errors: list[FieldError] | None = Field(default=None, description="Per-field messages (request validation only).")
    quota: QuotaPublic | None = Field(default=None, description="The spent quota (429 only).")


# -- input -----------------------------------------------------------------------------------------


class BudgetsInput(BaseModel):
    """Limits of a job; anything left out takes the server's default."""

    model_config = _INPUT

    turns: int | None = Field(default=None, ge=1, le=MAX_TURNS, description="Assistant turns per trajectory.")
    tool_calls: int | None = Field(default=None, ge=1, le=MAX_TOOL_CALLS, description="Tool calls per trajectory.")
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS, description="Tokens for the whole job.")
    max_cost_usd: float | None = Field(
        default=None, ge=0, le=MAX_COST_USD, description="LLM cost for the whole job (capped by the key's cost cap)."
    )
    wall_clock_s: float | None = Field(default=None, gt=0, le=MAX_WALL_CLOCK_S, description="Wall clock for the job.")
    target_speedup: float | None = Field(
        default=None, gt=0, le=MAX_TARGET_SPEEDUP, description="Stop early once a verified attempt is this much faster."
    )


class _ProblemRef(BaseModel):
    model_config = _INPUT

    problem_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PROBLEM_ID_CHARS,
        description="A bundled problem id from `GET /problems`, e.g. `level2/conv_bn_scale_train`.",
        examples=["level1/softmax"],
    )
    problem_source: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SOURCE_BYTES,
        description="A problem file's Python source: `class Model(nn.Module)`, `get_inputs()`, "
        "`get_init_inputs()` (KernelBench format). Checked statically, never run by the API.",
    )
    target: Target | None = Field(
        default=None,
        description="Where kernels run: `cuda` (the product) or `cpu`; default: the service's "
        "(`KERNELLOOP_DEFAULT_TARGET`; `kernelloop up` uses its workers' target).",
    )

    @model_validator(mode="after")
    def _one_problem(self) -> _ProblemRef:
        if (self.problem_id is None) == (self.problem_source is None):
            raise ValueError("give exactly one of problem_id (a bundled id, see GET /problems) or problem_source")
        return self


class JobCreate(_ProblemRef):
    """An agent job: an LLM proposes kernels for the problem."""

    llm_profile: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PROFILE_CHARS,
        description="A server-side LLM profile name (the server holds the keys); default: the server's.",
    )
    llm_model: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MODEL_CHARS,
        description="The model to ask the profile's endpoint for, instead of the profile's own "
        "(`kernelloop submit --llm PROFILE:MODEL` sends it); default: the profile's.",
    )
    budgets: BudgetsInput = BudgetsInput()
    trajectories: int | None = Field(
        None, ge=1, le=MAX_TRAJECTORIES, description="Independent chats; the best attempt across them wins."
    )


class EvaluationCreate(_ProblemRef):
    """One candidate judged against the problem, no LLM."""

    candidate_source: str = Field(
        min_length=1,
        max_length=MAX_SOURCE_BYTES,
        description="Python source defining `class ModelNew(nn.Module)`; runs only in the worker's sandbox.",
    )


# -- output ----------------------------------------------------------------------------------------


class Page(BaseModel, Generic[T]):
    """One page. Pass ``next_cursor`` back (as ``offset`` or ``after``) for the next; ``None`` on the last."""

    items: list[T]
    next_cursor: int | None
    total: int | None = Field(default=None, description="Counted for job listings; histories grow while read.")


class ProblemRefPublic(BaseModel):
    bundled_id: str | None = Field(description="The bundled id, or null for a posted source.")
    sha256: str


def _model_of(values: Any, name: str) -> type[BaseModel]:
    """A pydantic model with the fields of frozen dataclass ``values`` (their types and defaults):
    the API's schemas are built from the shared vocabulary's types, not written again."""
    hints = get_type_hints(values)
    definitions: dict[str, Any] = {f.name: (hints[f.name], ... if f.default is MISSING else f.default)
                                   for f in fields(values)}
    return create_model(name, **definitions)


#: An attempt's figures as the API writes them (`vocabulary.figures.AttemptFigures`).
AttemptFiguresPublic = _model_of(AttemptFigures, "AttemptFigures")


class BestSummary(AttemptFiguresPublic):  # type: ignore[misc, valid-type]
    n: int
    eager_ms: float | None = Field(default=None, description="Eager PyTorch's median time, the speedup's base.")
    compile_ms: float | None = Field(default=None, description="torch.compile's median time (null: not timed).")

    @classmethod
    def from_attempt(cls, attempt: Attempt) -> BestSummary:
        eager_ms, compile_ms = attempt.read_verdict().baselines_ms
        return cls(**vars(attempt.figures), n=attempt.n, eager_ms=eager_ms, compile_ms=compile_ms)


class JobPublic(BaseModel):
    id: int
    kind: JobKind
    state: JobState
    target: Target
    problem: ProblemRefPublic
    llm_profile: str | None
    llm_model: str | None
    budgets: Mapping[str, JsonField] = Field(description="The job's budgets as stored (`BudgetsInput`'s names).")
    trajectories: int
    cancel_requested: bool
    error: str | None
    attempts_count: int
    best: BestSummary | None
    tokens_in: int
    tokens_out: int
    tokens_reasoning: int = Field(description="Of tokens_out: the models' hidden reasoning.")
    tokens_cached: int = Field(description="Of tokens_in: served from the LLM servers' prompt caches.")
    cost_usd: float
    gpu_seconds: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    links: dict[str, str]

    @classmethod
    def from_job(cls, job: Job) -> JobPublic:
        """Needs the job's session open (the problem and the best attempt load on access)."""
        best = job.best_attempt
        base = f"/jobs/{job.id}"
        return cls(
            id=job.id,
            kind=job.kind,
            state=job.state,
            target=job.target,
            problem=ProblemRefPublic(bundled_id=job.problem.bundled_id, sha256=job.problem.sha256),
            llm_profile=job.llm_profile,
            llm_model=job.llm_model,
            budgets=dict(job.budgets or {}),
            trajectories=job.trajectories_count,
            cancel_requested=job.cancel_requested,
            error=job.error,
            attempts_count=job.attempts_count,
            best=None if best is None else BestSummary.from_attempt(best),
            tokens_in=job.tokens_in,
            tokens_out=job.tokens_out,
            tokens_reasoning=job.tokens_reasoning or 0,
            tokens_cached=job.tokens_cached or 0,
            cost_usd=job.cost_usd,
            gpu_seconds=job.gpu_seconds,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            links={
                "self": base,
                "attempts": f"{base}/attempts",
                "messages": f"{base}/messages",
                "events": f"{base}/events",
                "best": f"{base}/best",
                "cancel": f"{base}/cancel",
            },
        )


class CancelPublic(BaseModel):
    outcome: Literal["cancelled", "requested", "already_finished"] = Field(
        description="`cancelled`: it was queued and is now cancelled; `requested`: it is running and its "
        "worker stops at the next safe point; `already_finished`: it had been cancelled before."
    )
    job: JobPublic


class AttemptPublic(AttemptFiguresPublic):  # type: ignore[misc, valid-type]
    id: int
    n: int = Field(description="The attempt's number within its job: the `n` of /jobs/{id}/attempts/{n}.")
    trajectory_id: int | None
    parent_id: int | None = Field(description="The `id` of the attempt this one was edited from.")
    tool: str
    sha256: str
    message: str
    created_at: datetime

    @classmethod
    def from_attempt(cls, attempt: Attempt) -> AttemptPublic:
        return cls(**vars(attempt.figures), id=attempt.id, n=attempt.n, trajectory_id=attempt.trajectory_id,
                   parent_id=attempt.parent_id, tool=attempt.tool, sha256=attempt.sha256,
                   message=str((attempt.verdict or {}).get("message", "")), created_at=attempt.created_at)


class AttemptDetail(AttemptPublic):
    source: str
    verdict: Mapping[str, JsonField] = Field(
        description="The whole Verdict JSON (docs/architecture.md, \"The verdict\").")

    @classmethod
    def from_attempt(cls, attempt: Attempt) -> AttemptDetail:
        listed = AttemptPublic.from_attempt(attempt).model_dump()
        return cls(**listed, source=attempt.source, verdict=dict(attempt.verdict or {}))


class BestPublic(BaseModel):
    job_id: int
    attempt: AttemptDetail
    download: str = Field(description="Where to download the source as a file.")


class MessagePublic(BaseModel):
    id: int
    trajectory_id: int
    seq: int
    role: str
    content: str | None
    tool_calls: Sequence[JsonField] | None
    tool_call_id: str | None
    tokens_in: int
    tokens_out: int
    tokens_reasoning: int | None = Field(description="Of tokens_out: hidden reasoning (null: not reported).")
    tokens_cached: int | None = Field(description="Of tokens_in: served from the prompt cache (null: not reported).")
    latency_ms: float | None
    cost_usd: float
    created_at: datetime

    @classmethod
    def from_message(cls, message: Message) -> MessagePublic:
        return cls(
            id=message.id,
            trajectory_id=message.trajectory_id,
            seq=message.seq,
            role=message.role,
            content=message.content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            tokens_in=message.tokens_in,
            tokens_out=message.tokens_out,
            tokens_reasoning=message.tokens_reasoning,
            tokens_cached=message.tokens_cached,
            latency_ms=message.latency_ms,
            cost_usd=message.cost_usd,
            created_at=message.created_at,
        )


class ProblemPublic(BaseModel):
    id: str
    level: int | None
    description: str
    mode: str
    policy: str
    sha256: str

    @classmethod
    def from_problem(cls, problem: Problem) -> ProblemPublic:
        return cls(
            id=problem.id,
            level=problem.level,
            description=problem.description,
            mode=problem.mode.value,
            policy=problem.policy.value,
            sha256=problem.sha256,
        )


class ProblemDetail(ProblemPublic):
    source: str
    atol: float | None
    rtol: float | None
    cpu_sizes: Mapping[str, JsonField]
    extra_shapes: Sequence[Mapping[str, JsonField]]
    input_variants: bool
    nondeterministic: bool

    @classmethod
    def from_problem(cls, problem: Problem) -> ProblemDetail:
        return cls(
            **ProblemPublic.from_problem(problem).model_dump(),
            source=problem.source,
            atol=problem.atol,
            rtol=problem.rtol,
            cpu_sizes=problem.cpu_sizes,
            extra_shapes=problem.extra_shapes,
            input_variants=problem.input_variants,
            nondeterministic=problem.nondeterministic,
        )


class ComponentHealth(BaseModel):
    ok: bool
    latency_ms: float | None = None
    error: str | None = Field(default=None, description="The kind of failure (details are in the server's log).")


class HealthPublic(BaseModel):
    status: Literal["ok", "unavailable"]
    mode: Literal["embedded", "distributed"]
    database: ComponentHealth
    broker: ComponentHealth | None = Field(description="Null in the embedded mode (the database is the queue).")
