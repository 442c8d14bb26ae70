"""Model runs in the store (SQLite and PostgreSQL): a run's region jobs, its one apply, its end."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from store import (
    JobState,
    ModelRunState,
    NewModelRegion,
    NotFound,
    Target,
    cancel_model_run,
    claim_model_apply,
    create_model_run,
    finish_job,
    finish_model_run,
    get_model_run,
    list_model_runs,
    model_run_of_job,
    region_jobs,
    split_budgets,
)
from tests.support.models import fake_profile
from tests.support.store import Builders
from vocabulary.regionplan import share_weights


def _run(session: Session, owner_id: int | None = None) -> int:
    profile = fake_profile()
    regions = [NewModelRegion(name=str(r["name"]), share=float(r["share"]), source=str(r["source"]),  # type: ignore[index, arg-type]
                              declarations={"id": f"mlp_stack/{r['name']}"}, budgets={"tool_calls": 10})  # type: ignore[index]
               for r in profile["regions"]]  # type: ignore[union-attr]
    return create_model_run(session=session, name="mlp_stack.py", model_source="# model", model_sha256="0" * 64,
                            target=Target.CPU, profile=profile, regions=regions, owner_id=owner_id,
                            llm_profile="scripted").id


def test_a_run_queues_one_job_per_region_largest_share_first(session: Session) -> None:
    run_id = _run(session)
    jobs = region_jobs(session=session, run_id=run_id)
    assert [(j.region.name, j.region.position) for j in jobs] == [
        ("r2_linear_gelu", 0), ("r3_linear_add", 1), ("r1_layer_norm", 2)]
    assert all(j.job is not None and j.job.state is JobState.QUEUED and j.job.budgets == {"tool_calls": 10}
               for j in jobs)
    assert model_run_of_job(session=session, job_id=jobs[0].job.id) == run_id  # type: ignore[union-attr]
    assert get_model_run(session=session, run_id=run_id).state is ModelRunState.RUNNING


def test_the_whole_model_is_applied_once_and_only_after_every_job_ended(session: Session, build: Builders) -> None:
    run_id = _run(session)
    jobs = [j.job for j in region_jobs(session=session, run_id=run_id)]
    assert not claim_model_apply(session=session, run_id=run_id)  # jobs still queued
    for job in jobs:
        assert job is not None
        job.state, job.worker_id = JobState.RUNNING, "w"
        session.flush()
        finish_job(session=session, job_id=job.id, worker_id="w", state=JobState.SUCCEEDED)
    assert claim_model_apply(session=session, run_id=run_id)
    assert not claim_model_apply(session=session, run_id=run_id)  # one caller wins
    finish_model_run(session=session, run_id=run_id, state=ModelRunState.SUCCEEDED, report={"passed": True})
    run = get_model_run(session=session, run_id=run_id)
    assert run.state is ModelRunState.SUCCEEDED and run.report == {"passed": True} and run.finished_at is not None
    with pytest.raises(ValueError, match="not a final state"):
        finish_model_run(session=session, run_id=run_id, state=ModelRunState.APPLYING)


def test_a_cancelled_run_cancels_its_queued_jobs_and_lists_are_per_owner(session: Session, build: Builders) -> None:
    from store import create_api_key

    alice = create_api_key(session=session, name="a", owner="alice").key.id
    mine, other = _run(session, owner_id=alice), _run(session)
    cancel_model_run(session=session, run_id=mine)
    assert get_model_run(session=session, run_id=mine).state is ModelRunState.CANCELLED
    assert {j.job.state for j in region_jobs(session=session, run_id=mine)} == {JobState.CANCELLED}  # type: ignore[union-attr]
    assert [r.id for r in list_model_runs(session=session, owner_id=alice).items] == [mine]
    assert {r.id for r in list_model_runs(session=session).items} >= {mine, other}
    with pytest.raises(NotFound):
        get_model_run(session=session, run_id=10**6)


def test_budgets_are_split_by_share_with_a_floor_and_turns_kept() -> None:
    weights = share_weights({"big": 0.9, "small": 0.1})
    assert weights["big"] > weights["small"] > 0 and abs(sum(weights.values()) - 1) < 1e-9
    split = split_budgets({"turns": 10, "tool_calls": 60, "wall_clock_s": 600.0}, weights)
    assert split["big"]["turns"] == split["small"]["turns"] == 10
    assert split["big"]["tool_calls"] > split["small"]["tool_calls"] >= 6
    assert split["small"]["wall_clock_s"] >= 120.0
