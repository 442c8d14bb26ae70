"""Read-only queries for the dashboard's analysis views: a leaderboard of the jobs' best kernels
per problem, a job's LLM usage over time, and what the visible jobs of a problem measured of it.

They select columns rather than whole rows where they can (a job's messages carry their text;
the usage timeline needs only when and how much), and the cross-job ones honour an owner filter
as `store.jobs.list_jobs` does (``None``: every owner's, for admin keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.attempts import first_attempts
from store.models import Attempt, Job, Message, StoredProblem, Trajectory
from store.states import Target
from vocabulary.figures import AttemptFigures
from vocabulary.verdict import Verdict
from vocabulary.wire import JsonObject

__all__ = ["LeaderboardRow", "ProblemJobWork", "UsagePoint", "leaderboard_rows", "problem_work", "usage_points"]

#: Leaderboard rows read at most (the best of every visible job with a verified kernel).
MAX_LEADERBOARD_ROWS = 1000
#: Newest visible jobs, and first attempts of each, scanned for what a problem's jobs measured.
PROBLEM_JOBS_SCANNED = 200
PROBLEM_ATTEMPTS_SCANNED = 20


@dataclass(frozen=True)
class LeaderboardRow:
    """One job with a verified kernel: who ran it with which model, and its best attempt's figures."""

    job_id: int
    problem_bundled_id: str | None
    problem_sha256: str
    target: Target
    llm_profile: str | None
    llm_model: str | None
    attempts_count: int
    tokens: int
    cost_usd: float
    created_at: datetime
    finished_at: datetime | None
    #: The best attempt's number within its job, and its figures.
    best_n: int
    best: AttemptFigures
    #: The best attempt's whole verdict (device, baselines, provenance).
    verdict: JsonObject


def leaderboard_rows(
    *, session: Session, owner_id: int | None = None, problem: str | None = None, target: Target | None = None,
    limit: int = MAX_LEADERBOARD_ROWS,
) -> list[LeaderboardRow]:
    """The visible jobs that have a verified best kernel, fastest against eager first.

    ``problem`` is a bundled id or a problem's sha256, as in `store.jobs.list_jobs`.
    """
    stmt = (
        select(Job, Attempt, StoredProblem.bundled_id, StoredProblem.sha256)
        .join(Attempt, Attempt.id == Job.best_attempt_id)
        .join(StoredProblem, StoredProblem.id == Job.problem_id)
        .order_by(Attempt.speedup_vs_eager.desc(), Job.id)
        .limit(limit)
    )
    if owner_id is not None:
        stmt = stmt.where(Job.owner_id == owner_id)
    if target is not None:
        stmt = stmt.where(Job.target == target)
    if problem is not None:
        stmt = stmt.where((StoredProblem.bundled_id == problem) | (StoredProblem.sha256 == problem.lower()))
    return [
        LeaderboardRow(
            job_id=job.id, problem_bundled_id=bundled_id, problem_sha256=sha256, target=job.target,
            llm_profile=job.llm_profile, llm_model=job.llm_model, attempts_count=job.attempts_count,
            tokens=job.tokens_in + job.tokens_out, cost_usd=job.cost_usd, created_at=job.created_at,
            finished_at=job.finished_at, best_n=best.n, best=best.figures, verdict=dict(best.verdict or {}),
        )
        for job, best, bundled_id, sha256 in session.execute(stmt)
    ]


@dataclass(frozen=True)
class UsagePoint:
    """One LLM message's usage, when it was stored."""

    at: datetime
    tokens: int
    cost_usd: float


def usage_points(*, session: Session, job_id: int) -> list[UsagePoint]:
    """The job's messages that used tokens or cost money, in the order they were stored."""
    stmt = (
        select(Message.created_at, Message.tokens_in + Message.tokens_out, Message.cost_usd)
        .join(Trajectory, Trajectory.id == Message.trajectory_id)
        .where(Trajectory.job_id == job_id, (Message.tokens_in + Message.tokens_out > 0) | (Message.cost_usd > 0))
        .order_by(Message.created_at, Message.id)
    )
    return [UsagePoint(at=at, tokens=int(tokens or 0), cost_usd=float(cost or 0.0))
            for at, tokens, cost in session.execute(stmt)]


@dataclass(frozen=True)
class ProblemJobWork:
    """A job of a problem and its first verdict that measured the problem's work (FLOPs or
    minimum bytes): its best attempt's, else one of its first attempts'; ``None`` if none did."""

    job_id: int
    target: Target
    verdict: Verdict | None


def _work_verdict(session: Session, job: Job, attempts_scanned: int) -> Verdict | None:
    candidates = [job.best_attempt] if job.best_attempt is not None else []
    candidates += first_attempts(session=session, job_id=job.id, limit=attempts_scanned)
    for attempt in candidates:
        verdict = attempt.read_verdict()
        if verdict.flops is not None or verdict.min_bytes is not None:
            return verdict
    return None


def problem_work(
    *, session: Session, sha256: str, owner_id: int | None = None, jobs_scanned: int = PROBLEM_JOBS_SCANNED,
    attempts_scanned: int = PROBLEM_ATTEMPTS_SCANNED,
) -> list[ProblemJobWork]:
    """The jobs of the problem with this sha256 among the newest ``jobs_scanned`` visible ones,
    newest first, each with what it measured (looking at its first ``attempts_scanned`` attempts)."""
    newest = select(Job.id).order_by(Job.id.desc()).limit(jobs_scanned)
    if owner_id is not None:
        newest = newest.where(Job.owner_id == owner_id)
    stmt = (
        select(Job)
        .join(StoredProblem, StoredProblem.id == Job.problem_id)
        .where(Job.id.in_(newest.scalar_subquery()), StoredProblem.sha256 == sha256)
        .order_by(Job.id.desc())
    )
    return [ProblemJobWork(job_id=job.id, target=job.target, verdict=_work_verdict(session, job, attempts_scanned))
            for job in session.scalars(stmt)]
