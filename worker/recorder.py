"""`StoreRecorder`: the agent's ``Recorder`` over the store, one short transaction per call.

Every write first renews the job's lease in the same transaction (`store.heartbeat`, which locks
the job row until commit): a worker that lost its job (reaped, cancelled and finished, deleted)
writes nothing more and gets `store.LeaseLost`, which the runner turns into "stop quietly".

Events this module appends to the job's stream (the store already appends ``state``,
``cancel_requested`` and ``attempt``), with their payloads as `vocabulary.events` types them:
``trajectory`` (`TrajectoryPayload`: a start with its temperature and strategy, an end with its
reason), ``message`` (`MessagePayload`: the called functions' names, the content's first
characters in ``preview``; the whole message is at ``GET /jobs/{id}/messages``) and ``progress``
(`ProgressPayload`: the runner's milestones and infra retries) and ``stage``
(``{"stage", "phase": "started"|"finished", "seconds", "at"}``: the referee's stages, `harness.progress`:
header build, reference start, baselines, compile, load, correctness, timing; one started and one
finished per stage that runs, none for a cached one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from agent import StopReason
from store import (
    LeaseLost,
    LeaseStatus,
    Trajectory,
    TrajectoryState,
    add_job_usage,
    append_event,
    append_message,
    create_trajectory,
    fastest_verified_attempt,
    find_attempt_by_source,
    heartbeat,
    record_attempt,
    session_scope,
    set_best_attempt,
    set_trajectory_state,
    tool_call_names,
    utcnow,
)
from vocabulary.events import EventType, MessagePayload, ProgressPayload, StagePayload, TrajectoryPayload
from vocabulary.stages import StageEvent
from vocabulary.verdict import Verdict
from vocabulary.wire import JsonObject, JsonValue
from worker import metrics
from worker.lease import LeaseKeeper

__all__ = ["MESSAGE_PREVIEW_CHARS", "StoreRecorder", "VerifiedAttempt", "trajectory_state_for"]

#: Characters of a message's content carried in its live event.
MESSAGE_PREVIEW_CHARS = 240


@dataclass(frozen=True)
class VerifiedAttempt:
    """A stored timed pass, as the worker re-judges it."""

    attempt_id: int
    n: int
    trajectory_id: int | None
    tool: str
    source: str
    sha256: str


def trajectory_state_for(reason: str) -> TrajectoryState:
    """The final state of a trajectory that ended for ``reason``: `agent.StopReason.outcome`, the
    one mapping (a reason that is already a state's value is that state; anything else, ``failed``)."""
    try:
        return TrajectoryState(StopReason(reason).outcome)
    except ValueError:
        pass
    try:
        return TrajectoryState(reason)
    except ValueError:
        return TrajectoryState.FAILED


class StoreRecorder:
    """Implements ``agent.Recorder`` for one job run by one worker.

    Args:
        session_factory: sessions on the service's database.
        job_id: the running job.
        worker_id: the worker holding its lease.
        lease_seconds: how far each write extends the lease.
        lease: the job's `LeaseKeeper`: what `cancelled` asks, and what learns of a lost lease.
    """

    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        job_id: int,
        worker_id: str,
        lease_seconds: float,
        lease: LeaseKeeper,
    ) -> None:
        self._factory = session_factory
        self.session_factory = session_factory
        self.job_id = job_id
        self.worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._lease = lease
        self._trajectory_ids: dict[int, int] = {}

    # -- the Recorder protocol -----------------------------------------------------------
    def trajectory_started(self, *, index: int, temperature: float | None = None, strategy: str | None = None) -> None:
        """Mark trajectory ``index`` running (its row is reused after a re-queue)."""
        with self._guarded() as session:
            trajectory = session.scalars(
                select(Trajectory).where(Trajectory.job_id == self.job_id, Trajectory.index == index)
            ).first()
            if trajectory is None:
                trajectory = create_trajectory(session=session, job_id=self.job_id, index=index,
                                               temperature=temperature, strategy_hint=strategy)
            set_trajectory_state(session=session, trajectory_id=trajectory.id, state=TrajectoryState.RUNNING)
            payload = TrajectoryPayload(index=index, trajectory_id=trajectory.id, state=TrajectoryState.RUNNING.value,
                                        temperature=temperature, strategy=strategy)
            self._event(session, EventType.TRAJECTORY, payload.to_dict())
            self._trajectory_ids[index] = trajectory.id

    def message(
        self,
        *,
        trajectory_index: int,
        role: str,
        content: str | None,
        tool_calls: Sequence[JsonObject] | None = None,
        tool_call_id: str | None = None,
        tokens_in: int = 0,
        tokens_out: int = 0,
        latency_ms: float | None = None,
        cost_usd: float = 0.0,
        tokens_reasoning: int = 0,
        tokens_cached: int = 0,
    ) -> None:
        """Store one chat message of trajectory ``trajectory_index`` (an assistant message with
        its call's usage; reasoning and cached tokens are parts of ``tokens_out`` and ``tokens_in``)."""
        llm = role == "assistant"
        with self._guarded() as session:
            trajectory_id = self._trajectory_id(session, trajectory_index)
            stored = append_message(
                session=session, trajectory_id=trajectory_id, role=role, content=content,
                tool_calls=tool_calls, tool_call_id=tool_call_id, tokens_in=tokens_in, tokens_out=tokens_out,
                latency_ms=latency_ms, cost_usd=cost_usd, tokens_reasoning=tokens_reasoning if llm else None,
                tokens_cached=tokens_cached if llm else None,
            )
            payload = MessagePayload(
                trajectory=trajectory_index, trajectory_id=trajectory_id, message_id=stored.id, seq=stored.seq,
                role=role, tool_calls=tool_call_names(tool_calls), tool_call_id=tool_call_id, tokens_in=tokens_in,
                tokens_out=tokens_out, tokens_reasoning=stored.tokens_reasoning, tokens_cached=stored.tokens_cached,
                latency_ms=latency_ms, cost_usd=cost_usd, preview=(content or "")[:MESSAGE_PREVIEW_CHARS],
            )
            self._event(session, EventType.MESSAGE, payload.to_dict())
        metrics.LLM_TOKENS.labels("in").inc(max(0, tokens_in))
        metrics.LLM_TOKENS.labels("out").inc(max(0, tokens_out))
        metrics.LLM_COST.inc(max(0.0, cost_usd))

    def usage(self, *, trajectory_index: int, tokens_in: int, tokens_out: int, cost_usd: float,
              tokens_reasoning: int = 0, tokens_cached: int = 0) -> None:
        """Add the usage of LLM calls that produced no message (abandoned, cut or failed tries) to
        the job's totals."""
        with self._guarded() as session:
            add_job_usage(session=session, job_id=self.job_id, tokens_in=tokens_in, tokens_out=tokens_out,
                          cost_usd=cost_usd, tokens_reasoning=tokens_reasoning, tokens_cached=tokens_cached)

    def find_attempt(self, *, source_sha256: str, tool: str) -> Verdict | None:
        """The stored verdict of this job for the same source and tool (infra failures excepted),
        read back from its JSON column."""
        with session_scope(self._factory) as session:
            found = find_attempt_by_source(session=session, job_id=self.job_id, sha256=source_sha256, tool=tool)
            return found.read_verdict() if found is not None else None

    def attempt(
        self,
        *,
        trajectory_index: int | None,
        tool: str,
        source: str,
        parent_sha256: str | None,
        verdict: Verdict,
    ) -> None:
        """Store one evaluated candidate (its ``attempt`` event comes from the store)."""
        with self._guarded() as session:
            trajectory_id = (self._trajectory_id(session, trajectory_index) if trajectory_index is not None
                             else None)
            parent_id = None
            if parent_sha256:
                parent = find_attempt_by_source(session=session, job_id=self.job_id, sha256=parent_sha256,
                                                include_infra_errors=True)
                parent_id = parent.id if parent is not None else None
            record_attempt(session=session, job_id=self.job_id, trajectory_id=trajectory_id, tool=tool,
                           source=source, parent_id=parent_id, verdict=verdict)

    def fastest_verified(self, *, exclude: Sequence[str] = ()) -> VerifiedAttempt | None:
        """The job's fastest timed pass whose source is not in ``exclude`` (digests), if any."""
        with self._guarded() as session:
            found = fastest_verified_attempt(session=session, job_id=self.job_id, exclude=exclude)
            if found is None:
                return None
            return VerifiedAttempt(attempt_id=found.id, n=found.n, trajectory_id=found.trajectory_id,
                                   tool=found.tool, source=found.source, sha256=found.sha256)

    def rejudged(self, *, of: VerifiedAttempt, tool: str, verdict: Verdict) -> int:
        """Store the re-judging of ``of`` (its source again, in a fresh process); its attempt id."""
        with self._guarded() as session:
            attempt = record_attempt(session=session, job_id=self.job_id, trajectory_id=of.trajectory_id, tool=tool,
                                     source=of.source, parent_id=of.attempt_id, verdict=verdict)
            return attempt.id

    def set_best(self, attempt_id: int | None) -> None:
        """The job's best is ``attempt_id`` (a re-judged kernel), or none."""
        with self._guarded() as session:
            set_best_attempt(session=session, job_id=self.job_id, attempt_id=attempt_id)

    def trajectory_finished(self, *, index: int, reason: str) -> None:
        """Record how trajectory ``index`` ended (``reason``: an ``agent.StopReason`` value)."""
        state = trajectory_state_for(reason)
        with self._guarded() as session:
            trajectory_id = self._trajectory_id(session, index)
            error = None if state is TrajectoryState.SUBMITTED else reason
            set_trajectory_state(session=session, trajectory_id=trajectory_id, state=state, error=error)
            ended = TrajectoryPayload(index=index, trajectory_id=trajectory_id, state=state.value, reason=reason)
            self._event(session, EventType.TRAJECTORY, ended.to_dict())

    def cancelled(self) -> bool:
        """Whether the agent should stop at this safe point (cancel requested, or the job lost)."""
        return self._lease.should_stop()

    # -- beyond the protocol ---------------------------------------------------------------
    def progress(self, phase: str, **details: JsonValue) -> None:
        """Append a ``progress`` event (the runner's milestones)."""
        with self._guarded() as session:
            self._event(session, EventType.PROGRESS, ProgressPayload(phase=phase, details=details).to_dict())

    def stage(self, event: StageEvent) -> None:
        """Append a ``stage`` event (a `harness.Referee`'s ``on_stage`` listener)."""
        with self._guarded() as session:
            # "at": when it happened, so a view that catches up later still shows the right elapsed time.
            payload = StagePayload(event.stage, event.phase, event.seconds, at=utcnow().isoformat())
            self._event(session, EventType.STAGE, payload.to_dict())

    # -- internals -------------------------------------------------------------------------
    @contextmanager
    def _guarded(self) -> Iterator[Session]:
        """A unit of work that first renews the lease, and writes nothing if the job is not ours."""
        with session_scope(self._factory) as session:
            status = heartbeat(session=session, job_id=self.job_id, worker_id=self.worker_id,
                               lease_seconds=self._lease_seconds)
            self._lease.note(status)
            if status is LeaseStatus.LOST:
                raise LeaseLost(self.job_id, self.worker_id)
            yield session

    def _trajectory_id(self, session: Session, index: int) -> int:
        known = self._trajectory_ids.get(index)
        if known is not None:
            return known
        found = session.scalar(
            select(Trajectory.id).where(Trajectory.job_id == self.job_id, Trajectory.index == index)
        )
        if found is None:
            raise ValueError(f"trajectory {index} of job {self.job_id} was never started (trajectory_started)")
        self._trajectory_ids[index] = found
        return found

    def _event(self, session: Session, type: EventType, payload: JsonObject) -> None:
        append_event(session=session, job_id=self.job_id, type=type, payload=payload)
