"""The referee's stage events reach the job's event stream (the dashboard's and the CLI's "now")."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from agent.retry import NO_RETRY
from config import Settings
from harness import StageListener
from store import claim_job, events_after, session_scope
from tests.support import fake_agent
from tests.support.worker import evaluation_job, quick_options
from vocabulary.evaluation import Depth, Target
from vocabulary.events import EventType
from vocabulary.stages import StageEvent, StageName, StagePhase
from vocabulary.verdict import Stage, Status, Verdict
from worker.runner import RunOutcome, run_claimed_job

WORKER = "stage-worker"


class StagedReferee:
    """A referee that reports the stages a real evaluation goes through, then passes."""

    target = Target.CPU

    def __init__(self) -> None:
        self.on_stage: StageListener | None = None

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        assert self.on_stage is not None, "the runner sets the listener before evaluating"
        for stage in (StageName.REFERENCE_START, StageName.COMPILE, StageName.LOAD, StageName.CORRECTNESS,
                      StageName.TIMING):
            self.on_stage(StageEvent(stage, StagePhase.STARTED))
            self.on_stage(StageEvent(stage, StagePhase.FINISHED, 0.25))
        return Verdict(status=Status.PASS, stage=Stage.DONE, message="correct and timed")

    @property
    def device_specs(self) -> dict[str, Any]:
        return {"name": "fake"}

    def close(self) -> None:
        return None


def test_stage_events_are_stored_as_job_events_in_order(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = evaluation_job(session)
    with session_scope(sqlite_factory) as session:
        assert claim_job(session=session, job_id=job_id, worker_id=WORKER, lease_seconds=30) is not None
    outcome = run_claimed_job(job_id, settings=sqlite_settings, session_factory=sqlite_factory, worker_id=WORKER,
                              harness_options=quick_options(sqlite_settings.resolved_cache_dir),
                              run_agent=fake_agent.run_job, referee_factory=lambda *a: StagedReferee(),
                              retry=NO_RETRY)
    assert outcome is RunOutcome.SUCCEEDED
    with session_scope(sqlite_factory) as session:
        events = [(e.type, dict(e.payload)) for e in events_after(session=session, job_id=job_id)]
    stages = [p for t, p in events if t == EventType.STAGE]
    assert [(p["stage"], p["phase"]) for p in stages] == [
        (s, phase) for s in ("reference_start", "compile", "load", "correctness", "timing")
        for phase in ("started", "finished")]
    assert {k: v for k, v in stages[1].items() if k != "at"} == {"stage": "reference_start", "phase": "finished",
                                                                "seconds": 0.25}
    assert all(isinstance(p["at"], str) and p["at"][:2] == "20" for p in stages)
    # They come before the attempt they belong to.
    types = [t for t, _ in events]
    assert types.index("attempt") > max(i for i, t in enumerate(types) if t == EventType.STAGE)
