"""`store.leaderboard_rows` and `store.usage_points`: the dashboard's leaderboard and a job's usage
over time, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from store import (
    Target,
    append_message,
    create_api_key,
    create_trajectory,
    leaderboard_rows,
    record_attempt,
    usage_points,
)
from tests.support.store import Builders
from vocabulary.verdict import Status

SOFTMAX = "import torch\n# softmax\n"


def _best(session: Session, job_id: int, *speedups: float) -> None:
    """Attempts of these speedups against eager at 4 ms (one failure first)."""
    record_attempt(session=session, job_id=job_id, trajectory_id=None, tool="benchmark", source="# wrong\n",
                   parent_id=None, verdict=Builders.verdict(Status.FAIL, correct=False))
    for i, speedup in enumerate(speedups):
        record_attempt(session=session, job_id=job_id, trajectory_id=None, tool="benchmark", source=f"# {i}\n",
                       parent_id=None, verdict=Builders.verdict(median_ms=4.0 / speedup))


def test_the_leaderboard_ranks_the_best_of_each_job_within_the_filters(session: Session, build: Any) -> None:
    alice = create_api_key(session=session, name="alice", owner="alice").key.id
    bob = create_api_key(session=session, name="bob", owner="bob").key.id
    softmax = build.problem(SOFTMAX, bundled_id="level1/softmax")
    posted = build.problem()
    slow = build.job(owner_id=alice, problem_id=softmax.id)
    fast = build.job(owner_id=bob, problem_id=softmax.id, target=Target.CUDA)
    middling = build.job(owner_id=alice, problem_id=posted.id)
    nothing = build.job(owner_id=alice, problem_id=softmax.id)
    _best(session, slow.id, 1.1, 1.3)  # its best: 1.3x
    _best(session, fast.id, 2.0)
    _best(session, middling.id, 1.6)
    _best(session, nothing.id)  # only the failure: no verified kernel, not ranked
    session.commit()

    rows = leaderboard_rows(session=session)
    assert [(r.job_id, r.best_n) for r in rows] == [(fast.id, 2), (middling.id, 2), (slow.id, 3)]
    top = rows[0]
    assert top.problem_bundled_id == "level1/softmax" and top.target is Target.CUDA
    assert top.best.speedup_vs_eager == 2.0 and top.best.median_ms == 2.0 and top.llm_model == "script"
    assert top.verdict["baselines"]["eager_ms"] == 4.0 and top.attempts_count == 2
    # A plain key ranks its own jobs; the problem is a bundled id or a sha256; the target filters.
    assert [r.job_id for r in leaderboard_rows(session=session, owner_id=alice)] == [middling.id, slow.id]
    assert [r.job_id for r in leaderboard_rows(session=session, problem="level1/softmax")] == [fast.id, slow.id]
    assert [r.job_id for r in leaderboard_rows(session=session, problem=posted.sha256.upper())] == [middling.id]
    assert [r.job_id for r in leaderboard_rows(session=session, target=Target.CPU)] == [middling.id, slow.id]


def test_usage_points_are_a_jobs_messages_that_used_tokens_in_order(session: Session, build: Any) -> None:
    job, other = build.job(), build.job()
    first = create_trajectory(session=session, job_id=job.id, index=0)
    second = create_trajectory(session=session, job_id=job.id, index=1)
    elsewhere = create_trajectory(session=session, job_id=other.id, index=0)
    append_message(session=session, trajectory_id=first.id, role="user", content="go")  # no usage: left out
    append_message(session=session, trajectory_id=first.id, role="assistant", content="a", tokens_in=900,
                   tokens_out=100, cost_usd=0.01)
    append_message(session=session, trajectory_id=second.id, role="assistant", content="b", tokens_in=1900,
                   tokens_out=100, cost_usd=0.02)
    append_message(session=session, trajectory_id=elsewhere.id, role="assistant", content="c", tokens_in=5)
    session.commit()
    points = usage_points(session=session, job_id=job.id)
    assert [(p.tokens, p.cost_usd) for p in points] == [(1000, 0.01), (2000, 0.02)]
    assert points[0].at <= points[1].at
