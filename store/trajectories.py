"""Trajectories (one chat each) and their messages, with the counters budgets are checked against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store._sql import bump_counter
from store.errors import NotFound
from store.jobs import add_job_usage
from store.models import Message, Trajectory, utcnow
from store.pagination import DEFAULT_PAGE_SIZE, RowPage, check_limit, keyset_page
from store.states import TrajectoryState
from vocabulary.wire import JsonObject, JsonValue

__all__ = [
    "append_message",
    "create_trajectory",
    "last_messages",
    "list_messages",
    "list_trajectories",
    "set_trajectory_state",
    "tool_call_names",
]

_FINISHED = frozenset(
    {TrajectoryState.SUBMITTED, TrajectoryState.EXHAUSTED, TrajectoryState.FAILED, TrajectoryState.CANCELLED}
)


def create_trajectory(
    *,
    session: Session,
    job_id: int,
    index: int,
    temperature: float | None = None,
    strategy_hint: str | None = None,
    now: datetime | None = None,
) -> Trajectory:
    """Add trajectory number ``index`` (0-based, unique within the job) to a job."""
    trajectory = Trajectory(
        job_id=job_id,
        index=index,
        temperature=temperature,
        strategy_hint=strategy_hint,
        state=TrajectoryState.PENDING,
        created_at=now or utcnow(),
    )
    session.add(trajectory)
    session.flush()
    return trajectory


def list_trajectories(*, session: Session, job_id: int) -> list[Trajectory]:
    stmt = select(Trajectory).where(Trajectory.job_id == job_id).order_by(Trajectory.index)
    return list(session.scalars(stmt))


def set_trajectory_state(
    *,
    session: Session,
    trajectory_id: int,
    state: TrajectoryState,
    error: str | None = None,
    now: datetime | None = None,
) -> Trajectory:
    """Record a trajectory's progress: ``running`` stamps its start, a final state its end."""
    trajectory = session.get(Trajectory, trajectory_id)
    if trajectory is None:
        raise NotFound("trajectory", trajectory_id)
    now = now or utcnow()
    trajectory.state = state
    if state is TrajectoryState.RUNNING and trajectory.started_at is None:
        trajectory.started_at = now
    if state in _FINISHED:
        trajectory.finished_at = now
        trajectory.error = error
    session.flush()
    return trajectory


def tool_call_names(tool_calls: Sequence[JsonValue] | None) -> list[str]:
    """The functions a message's ``tool_calls`` (as the column stores them) call, ``?`` for an
    entry that names none."""
    names = []
    for call in tool_calls or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        names.append(str(name or (call.get("name") if isinstance(call, Mapping) else None) or "?"))
    return names


def append_message(
    *,
    session: Session,
    trajectory_id: int,
    role: str,
    content: str | None,
    tool_calls: Sequence[JsonObject] | None = None,
    tool_call_id: str | None = None,
    tokens_in: int = 0,
    tokens_out: int = 0,
    latency_ms: float | None = None,
    cost_usd: float = 0.0,
    tokens_reasoning: int | None = None,
    tokens_cached: int | None = None,
    now: datetime | None = None,
) -> Message:
    """Store one chat message and count it.

    An ``assistant`` message is a turn, and each of its ``tool_calls`` a tool call, on the
    trajectory's counters (what its budgets are checked against); its tokens and cost are added
    to the job's totals. ``tokens_reasoning`` (part of ``tokens_out``) and ``tokens_cached`` (part
    of ``tokens_in``) are ``None`` when the server reported none.

    Raises:
        NotFound: no trajectory with that id.
    """
    job_id = session.scalar(select(Trajectory.job_id).where(Trajectory.id == trajectory_id))
    if job_id is None:
        raise NotFound("trajectory", trajectory_id)
    # Adding to the job's totals first takes the job row's lock: messages of one job then get
    # their ids, and commit, one after the other, so paging by id never skips a late commit.
    add_job_usage(
        session=session, job_id=job_id, tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost_usd,
        tokens_reasoning=tokens_reasoning or 0, tokens_cached=tokens_cached or 0,
    )
    is_turn = role == "assistant"
    seq = bump_counter(
        session,
        Trajectory,
        trajectory_id,
        Trajectory.messages_count,
        turns=Trajectory.turns + (1 if is_turn else 0),
        tool_calls=Trajectory.tool_calls + (len(tool_calls or ()) if is_turn else 0),
    )
    message = Message(
        trajectory_id=trajectory_id,
        seq=seq,
        role=role,
        content=content,
        tool_calls=list(tool_calls) if tool_calls is not None else None,
        tool_call_id=tool_call_id,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        latency_ms=latency_ms,
        cost_usd=cost_usd,
        tokens_reasoning=tokens_reasoning,
        tokens_cached=tokens_cached,
        created_at=now or utcnow(),
    )
    session.add(message)
    session.flush()
    return message


def list_messages(
    *,
    session: Session,
    job_id: int,
    trajectory_index: int | None = None,
    after_id: int = 0,
    limit: int = DEFAULT_PAGE_SIZE,
) -> RowPage[Message]:
    """A job's messages in the order they were stored (all trajectories, or one by index).

    Keyset pages on the message id: ``next_cursor`` is the next ``after_id``.
    """
    check_limit(limit)
    stmt = (
        select(Message)
        .join(Trajectory, Message.trajectory_id == Trajectory.id)
        .where(Trajectory.job_id == job_id, Message.id > after_id)
        .order_by(Message.id)
        .limit(limit + 1)
    )
    if trajectory_index is not None:
        stmt = stmt.where(Trajectory.index == trajectory_index)
    return keyset_page(list(session.scalars(stmt)), limit=limit, key=lambda m: m.id)


def last_messages(*, session: Session, job_id: int, limit: int) -> list[Message]:
    """A job's newest ``limit`` messages (all trajectories), in the order they were stored."""
    stmt = (
        select(Message)
        .join(Trajectory, Message.trajectory_id == Trajectory.id)
        .where(Trajectory.job_id == job_id)
        .order_by(Message.id.desc())
        .limit(limit)
    )
    return list(reversed(list(session.scalars(stmt))))
