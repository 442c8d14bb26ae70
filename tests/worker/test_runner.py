"""`worker.runner.run_claimed_job` in-process on SQLite: evaluation and agent jobs, infra retries, cancel, loss.

Evaluations on the CPU target use the seed-1 examples, whose build is in the shared test cache.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from agent.retry import InfraRetry
from config import Settings
from harness import HarnessOptions
from store import (
    JobState,
    TrajectoryState,
    cancel_job,
    events_after,
    get_job,
    list_attempts,
    list_messages,
    list_trajectories,
    reap_expired_leases,
    session_scope,
    utcnow,
)
from tests.support import fake_agent
from tests.support.waiting import wait_for
from tests.support.worker import (
    INFRA,
    SEED1_CPU,
    SEED1_CPU_WRONG,
    ScriptedReferee,
    agent_job,
    claim,
    evaluation_job,
    quick_options,
    run_claimed,
)
from vocabulary.budgets import Budgets
from vocabulary.evaluation import Target
from vocabulary.timing import Timing
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from vocabulary.wire import WireError
from worker.runner import RunOutcome, agent_budgets, retime_options


def _events(factory: sessionmaker[Session], job_id: int) -> list[tuple[str, dict[str, Any]]]:
    with session_scope(factory) as session:
        return [(e.type, e.payload) for e in events_after(session=session, job_id=job_id)]


@pytest.mark.slow
def test_an_evaluation_job_stores_its_verdict_and_succeeds(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        good, wrong = evaluation_job(session, SEED1_CPU), evaluation_job(session, SEED1_CPU_WRONG)
    for job_id in (good, wrong):
        claim(sqlite_factory, job_id)
        assert run_claimed(sqlite_settings, sqlite_factory, job_id) is RunOutcome.SUCCEEDED
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=good)
        assert job.state is JobState.SUCCEEDED and job.error is None and job.lease_expires_at is None
        (attempt,) = list_attempts(session=session, job_id=good).items
        assert attempt.tool == "evaluate" and attempt.status is Status.PASS and attempt.correct
        assert attempt.median_ms is not None and attempt.speedup_vs_eager is not None
        assert attempt.verdict["depth"] == "benchmark" and job.best_attempt_id == attempt.id
        assert job.gpu_seconds == 0  # a CPU job
        # The candidate's failure is the verdict's business; the job itself succeeded.
        job = get_job(session=session, job_id=wrong)
        assert job.state is JobState.SUCCEEDED and job.best_attempt_id is None
        (attempt,) = list_attempts(session=session, job_id=wrong).items
        assert attempt.status is Status.FAIL and attempt.stage == "correctness"
    events = _events(sqlite_factory, good)
    # The referee's stages (cached builds and baselines send none) come before the attempt.
    stages = [(p["stage"], p["phase"]) for t, p in events if t == "stage"]
    assert stages[-6:] == [(s, phase) for s in ("load", "correctness", "timing") for phase in ("started", "finished")]
    events = [(t, p) for t, p in events if t != "stage"]
    assert [t for t, _ in events] == ["state", "state", "progress", "progress", "attempt", "state"]
    assert events[2][1]["phase"] == "started" and events[3][1] == {"phase": "evaluating", "depth": "benchmark"}
    assert events[4][1]["status"] == "pass" and events[-1][1]["state"] == "succeeded"


PASSED = Verdict(status=Status.PASS, stage=Stage.DONE, message="correct and timed")


def test_infra_failures_are_retried_then_the_job_succeeds(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    referee = ScriptedReferee([INFRA, INFRA, PASSED])
    with session_scope(sqlite_factory) as session:
        job_id = evaluation_job(session)
    claim(sqlite_factory, job_id)
    outcome = run_claimed(sqlite_settings, sqlite_factory, job_id, referee_factory=lambda *a: referee,
                          retry=InfraRetry(delays_s=(0.0, 0.0)))
    assert outcome is RunOutcome.SUCCEEDED
    assert referee.asked == ["benchmark"] * 3 and referee.closed >= 3
    with session_scope(sqlite_factory) as session:
        (attempt,) = list_attempts(session=session, job_id=job_id).items  # only the final verdict
        assert attempt.status is Status.PASS
    retries = [p for t, p in _events(sqlite_factory, job_id) if t == "progress" and p["phase"] == "infra_retry"]
    assert [r["tries"] for r in retries] == [1, 2] and retries[0]["stage"] == "correctness"


def test_infra_failures_on_every_try_fail_the_job_with_the_reason(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = evaluation_job(session)
    claim(sqlite_factory, job_id)
    outcome = run_claimed(sqlite_settings, sqlite_factory, job_id,
                          referee_factory=lambda *a: ScriptedReferee([INFRA] * 3),
                          retry=InfraRetry(delays_s=(0.0, 0.0)))
    assert outcome is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.FAILED
        assert job.error == ("infrastructure error after 3 tries, at stage correctness: "
                             "the comparer failed: channel closed")
        (attempt,) = list_attempts(session=session, job_id=job_id).items
        assert attempt.error_kind is ErrorKind.INFRA


@pytest.mark.slow
def test_an_agent_job_runs_the_agent_with_the_evaluator_and_recorder(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "compile_then_check")
    claim(sqlite_factory, job_id)
    # The script checks correctness but never times a candidate: no verified kernel, so the job
    # fails, saying so (a job succeeds only with a best attempt).
    assert run_claimed(sqlite_settings, sqlite_factory, job_id) is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.FAILED and job.error == "no verified kernel (the agent stopped: submitted)"
        attempts = list_attempts(session=session, job_id=job_id).items
        assert [(a.tool, a.status) for a in attempts] == [("compile", Status.PASS),
                                                          ("check_correctness", Status.PASS)]
        assert attempts[1].parent_id == attempts[0].id
        assert attempts[1].verdict["depth"] == "correctness"
        (trajectory,) = list_trajectories(session=session, job_id=job_id)
        assert trajectory.state is TrajectoryState.SUBMITTED
        assert len(list_messages(session=session, job_id=job_id).items) == 3


def test_agent_budgets_merge_the_job_over_the_defaults(sqlite_settings: Settings) -> None:
    budgets = agent_budgets({"turns": 4, "unknown": 1, "max_cost_usd": None}, sqlite_settings)
    assert budgets == Budgets(turns=4, tool_calls=30, max_tokens=400_000, max_cost_usd=5.0, wall_clock_s=3600.0)
    assert agent_budgets({"tool_calls": 12}, sqlite_settings).tool_calls == 12
    assert agent_budgets({"target_speedup": 2}, sqlite_settings).target_speedup == 2.0


def test_a_budget_of_the_wrong_type_is_named(sqlite_settings: Settings) -> None:
    with pytest.raises(WireError, match="'turns' is not an integer"):
        agent_budgets({"turns": "4"}, sqlite_settings)


def test_an_unknown_llm_profile_fails_the_job_with_what_to_fix(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "compile_then_check", llm_profile="gpt-9")
    claim(sqlite_factory, job_id)
    fake_agent.CALLS.clear()
    assert run_claimed(sqlite_settings, sqlite_factory, job_id,
                       referee_factory=lambda *a: ScriptedReferee([])) is RunOutcome.FAILED
    assert fake_agent.CALLS == []
    with session_scope(sqlite_factory) as session:
        assert get_job(session=session, job_id=job_id).error == (
            "unknown LLM profile 'gpt-9' (this service has: openai, scripted)")


def test_a_worker_without_the_profiles_key_fails_the_job_at_once_naming_it(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose environment lacks the profile's key (one the API did not share it with): the job
    fails before any request, rather than after five 401s."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "compile_then_check", llm_profile="openai")
    claim(sqlite_factory, job_id)
    fake_agent.CALLS.clear()
    assert run_claimed(sqlite_settings, sqlite_factory, job_id,
                       referee_factory=lambda *a: ScriptedReferee([])) is RunOutcome.FAILED
    assert fake_agent.CALLS == []
    with session_scope(sqlite_factory) as session:
        error = get_job(session=session, job_id=job_id).error or ""
    assert "the LLM profile 'openai' needs an API key in $OPENAI_API_KEY, which is not set in this worker's " \
           "environment" in error


def _run_in_thread(settings: Settings, factory: sessionmaker[Session], job_id: int) -> tuple[threading.Thread, list]:
    result: list[RunOutcome] = []
    thread = threading.Thread(target=lambda: result.append(
        run_claimed(settings, factory, job_id, referee_factory=lambda *a: ScriptedReferee([]))))
    thread.start()
    return thread, result


def test_a_cancel_stops_a_running_agent_job_at_its_next_safe_point(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "until_cancelled")
    claim(sqlite_factory, job_id)
    thread, result = _run_in_thread(sqlite_settings, sqlite_factory, job_id)

    def chatted() -> bool:
        with session_scope(sqlite_factory) as session:
            return len(list_messages(session=session, job_id=job_id).items) >= 3

    wait_for(chatted, timeout=10, what="the fake agent's messages")
    with session_scope(sqlite_factory) as session:
        cancel_job(session=session, job_id=job_id)
    thread.join(timeout=10)
    assert result == [RunOutcome.CANCELLED]
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.CANCELLED and job.error == "cancelled by its owner"
        (trajectory,) = list_trajectories(session=session, job_id=job_id)
        assert trajectory.state is TrajectoryState.CANCELLED
    assert [t for t, _ in _events(sqlite_factory, job_id)][-2:] == ["trajectory", "state"]


def test_a_job_reaped_from_under_its_worker_is_left_to_its_new_holder(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "until_cancelled")
    claim(sqlite_factory, job_id)
    thread, result = _run_in_thread(sqlite_settings, sqlite_factory, job_id)
    wait_for(lambda: _events(sqlite_factory, job_id)[-1][0] == "message", timeout=10, what="a message")
    with session_scope(sqlite_factory) as session:
        later = utcnow() + timedelta(seconds=60)
        (reaped,) = reap_expired_leases(session=session, max_requeues=1, now=later)
        assert reaped.state is JobState.QUEUED
    thread.join(timeout=10)
    assert result == [RunOutcome.LOST]
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.QUEUED and job.worker_id is None and job.requeue_count == 1


def test_a_job_not_held_by_the_worker_is_not_run(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = evaluation_job(session)
    assert run_claimed(sqlite_settings, sqlite_factory, job_id) is RunOutcome.LOST  # still queued
    claim(sqlite_factory, job_id, worker="someone-else")
    assert run_claimed(sqlite_settings, sqlite_factory, job_id) is RunOutcome.LOST


def test_quarantined_candidates_are_retimed_in_a_fresh_process(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "quarantine")
    claim(sqlite_factory, job_id)
    built: list[tuple[Target, HarnessOptions]] = []
    # Timed: only a timed pass becomes a job's best.
    retimed = Verdict(status=Status.PASS, stage=Stage.DONE, message="correct and timed",
                      timing=Timing.from_samples([1.0, 1.01, 0.99], clock="perf_counter"))

    def factory(problem: Any, target: Target, options: HarnessOptions) -> ScriptedReferee:
        built.append((target, options))
        return ScriptedReferee([retimed])

    base = quick_options(sqlite_settings.resolved_cache_dir).replace(secret_seed=7)
    assert run_claimed(sqlite_settings, sqlite_factory, job_id, referee_factory=factory,
                       harness_options=base) is RunOutcome.SUCCEEDED
    (_, job_options), (_, retime) = built
    assert job_options == base
    assert retime == retime_options(base)
    assert retime.secret_seed is None and retime.suspicious_speedup == float("inf") and retime.rejudge
    assert retime.timing.min_repeats >= 50 and retime.trials == base.trials
    with session_scope(sqlite_factory) as session:
        (attempt,) = list_attempts(session=session, job_id=job_id).items
        assert attempt.tool == "retime" and attempt.status is Status.PASS
        assert get_job(session=session, job_id=job_id).best_attempt_id == attempt.id
    assert any(p.get("phase") == "retime" for t, p in _events(sqlite_factory, job_id) if t == "progress")


def _timed(ms: float, status: Status = Status.PASS) -> Verdict:
    return Verdict(status=status, stage=Stage.DONE if status is Status.PASS else Stage.INTEGRITY,
                   message="correct and timed", timing=Timing.from_samples([ms, ms, ms], clock="monotonic"))


def test_the_best_is_the_fastest_kernel_that_passes_again_in_a_fresh_process(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "benchmark_two")
    claim(sqlite_factory, job_id)
    # The job's own referee times the two sources 1 ms and 2 ms; re-judged, the faster one fails
    # (its figure did not hold in a fresh process) and the slower one passes at 2.1 ms.
    referees = iter([ScriptedReferee([_timed(1.0), _timed(2.0)]), ScriptedReferee([_timed(1.0, Status.FAIL)]),
                     ScriptedReferee([_timed(2.1)])])
    built: list[HarnessOptions] = []

    def factory(problem: Any, target: Target, options: HarnessOptions) -> ScriptedReferee:
        built.append(options)
        return next(referees)

    assert run_claimed(sqlite_settings, sqlite_factory, job_id, referee_factory=factory,
                       harness_options=quick_options(sqlite_settings.resolved_cache_dir)) is RunOutcome.SUCCEEDED
    assert [o.rejudge for o in built] == [False, True, True]
    with session_scope(sqlite_factory) as session:
        attempts = list_attempts(session=session, job_id=job_id).items
        assert [(a.tool, a.status, a.median_ms) for a in attempts] == [
            ("benchmark", Status.PASS, 1.0), ("benchmark", Status.PASS, 2.0),
            ("retime", Status.FAIL, 1.0), ("retime", Status.PASS, 2.1)]
        assert attempts[2].parent_id == attempts[0].id and attempts[3].parent_id == attempts[1].id
        # The re-judged attempt is the best, although an unconfirmed one timed faster.
        assert get_job(session=session, job_id=job_id).best_attempt_id == attempts[3].id
    phases = [p.get("phase") for t, p in _events(sqlite_factory, job_id) if t == "progress"]
    assert phases.count("rejudge") == 2


def test_a_job_whose_kernels_all_fail_their_rejudging_has_no_best(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "benchmark_two")
    claim(sqlite_factory, job_id)
    referees = iter([ScriptedReferee([_timed(1.0), _timed(2.0)]), ScriptedReferee([_timed(1.0, Status.FAIL)]),
                     ScriptedReferee([_timed(2.0, Status.FAIL)])])
    assert run_claimed(sqlite_settings, sqlite_factory, job_id, referee_factory=lambda *a: next(referees),
                       harness_options=quick_options(sqlite_settings.resolved_cache_dir)) is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.best_attempt_id is None and job.state is JobState.FAILED
        assert job.error is not None and "passed again when re-judged in a fresh process" in job.error


def test_an_agent_error_fails_the_job_with_it(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "fail")
    claim(sqlite_factory, job_id)
    assert run_claimed(sqlite_settings, sqlite_factory, job_id,
                       referee_factory=lambda *a: ScriptedReferee([])) is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.FAILED and job.error == "the LLM endpoint failed: 401 Unauthorized"
        (trajectory,) = list_trajectories(session=session, job_id=job_id)
        assert trajectory.state is TrajectoryState.FAILED
