"""Own models end to end, on the CPU: profile → extract → optimise (the scripted LLM, with the
example kernels) → the whole patched model verified by the referee, for the three kinds of model.

Each model is profiled once in its sandbox; every region is written as a problem and
admitted; the default selection (the largest regions until 80 % of the time) must be admitted;
its regions become one model run, whose jobs run here through the worker's runner with the
scripted LLM (compile, check, time, submit: one real C++ build per model, shared by its region
kernels); the last job's end verifies the patched model whole. Slow (a minute or two of CPU: every
evaluation starts the referee's sandboxes), so the whole run is made for the attention block alone (the
most regions, and every kind the MLP stack has: norm, linear, linear + add). The two others are
profiled, extracted and selected the same way, and their example kernels patched into the whole
model must pass the referee's trials (the model run's last step, without the region jobs before it:
the region jobs' path is the same for every model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

import agent
from config import Settings
from harness import HarnessOptions, Referee
from harness.modelextract import MODEL_JSON, SUITE_FILE, extract_regions, region_problem
from harness.modelsandbox import profile_model
from harness.patchsource import patched_source
from problems import Problem
from store import (
    ModelRunState,
    NewModelRegion,
    Target,
    create_model_run,
    get_job,
    get_model_run,
    list_attempts,
    region_jobs,
    session_scope,
    split_budgets,
)
from tests.support.models import MODELS, example, kernels
from tests.support.worker import WORKER, claim, quick_options
from vocabulary.evaluation import Depth
from vocabulary.modelreport import ApplyReport
from vocabulary.regionplan import ModelProfile, Region, select_regions, share_weights
from vocabulary.verdict import Status
from worker.runner import RunOutcome, run_claimed_job

#: The model run end to end; the others' own parts (capture, extraction, their kernels in the
#: whole model) are checked by the test after it.
WHOLE_RUN = "attention_block"


def _profiled_and_extracted(name: str, tmp_path: Path, options: HarnessOptions) -> tuple[Problem, ModelProfile,
                                                                                           list[Region]]:
    """The model profiled in its sandbox, every region extracted, the default selection admitted."""
    model = example(name)
    profile = profile_model(model, Target.CPU, options, compile_gains=False)
    assert profile.faithful and profile.capture.whole and profile.capture.dynamic
    assert abs(sum(r.share for r in profile.regions) - 1) < 1e-6 and profile.model_ms > 0

    extraction = extract_regions(profile, tmp_path / "extract", model_file=f"{name}.py", options=options)
    chosen = select_regions(profile)
    assert profile.coverage(r.name for r in chosen) >= 0.8
    assert {r.name for r in chosen} <= set(extraction.admitted), [r.reasons for r in extraction.regions]
    written = json.loads((tmp_path / "extract" / MODEL_JSON).read_text())
    assert written["selected"] == [r.name for r in chosen] and written["coverage"] >= 0.8
    assert all((tmp_path / "extract" / r["problem"]).is_file() and "share" in r and r["inputs"]
               for r in written["regions"])
    assert set((tmp_path / "extract" / SUITE_FILE).read_text().split("\n")[1:-1]) == {
        f"{n}.py" for n in extraction.admitted}
    return model, profile, chosen


def _options(harness_cache: Path) -> HarnessOptions:
    # Not quarantined by a speedup over an eager baseline slowed down by a busy host (tiny CPU
    # sizes, a 2-core machine): what is tested here is the pipeline, not the timing.
    return quick_options(harness_cache).replace(suspicious_speedup=float("inf"))


@pytest.mark.parametrize("name", sorted(set(MODELS) - {WHOLE_RUN}))
def test_a_model_is_profiled_extracted_and_its_kernels_pass_in_the_whole_model(
        name: str, tmp_path: Path, harness_cache: Path) -> None:
    options = _options(harness_cache)
    model, _, chosen = _profiled_and_extracted(name, tmp_path, options)
    source = patched_source(model_name=f"{name}.py", regions=chosen, model_source=model.source,
                            kernels={r.name: kernels(name)[r.name] for r in chosen})
    with Referee(model, Target.CPU, options.replace(prestart=False)) as referee:
        verdict = referee.evaluate(source, Depth.CORRECTNESS)
    assert verdict.status is Status.PASS and verdict.correct, f"{verdict.message}\n{verdict.log[-3000:]}"


def test_a_model_is_profiled_extracted_optimised_and_verified_whole(
        tmp_path: Path, sqlite_settings: Settings, sqlite_factory: sessionmaker[Session], harness_cache: Path) -> None:
    name = WHOLE_RUN
    options = _options(harness_cache)
    model, profile, chosen = _profiled_and_extracted(name, tmp_path, options)

    weights = share_weights({r.name: r.share for r in chosen})
    budgets = split_budgets({"tool_calls": 12 * len(chosen), "turns": 8}, weights)
    with session_scope(sqlite_factory) as session:
        run_id = create_model_run(
            session=session, name=f"{name}.py", model_source=model.source, model_sha256=model.sha256,
            target=Target.CPU, profile=profile.to_dict(), llm_profile="scripted",
            regions=[NewModelRegion(r.name, r.share, r.source, {k: v for k, v in region_problem(
                r, model.id).to_dict().items() if k != "source"}, budgets[r.name]) for r in chosen]).id
        job_ids = [item.job.id for item in region_jobs(session=session, run_id=run_id) if item.job]
    for job_id in job_ids:
        claim(sqlite_factory, job_id)
        outcome = run_claimed_job(job_id, settings=sqlite_settings, session_factory=sqlite_factory,
                                  worker_id=WORKER, harness_options=options, run_agent=agent.run_job)
        with session_scope(sqlite_factory) as session:
            job = get_job(session=session, job_id=job_id)
            why = [(a.tool, a.status.value, a.verdict.get("message")) for a in list_attempts(
                session=session, job_id=job_id).items]
        assert outcome is RunOutcome.SUCCEEDED, (job.error, why)

    with session_scope(sqlite_factory) as session:
        run = get_model_run(session=session, run_id=run_id)
        state, report_data, error = run.state, run.report, run.error
    assert state is ModelRunState.SUCCEEDED, error
    assert report_data is not None
    report = ApplyReport.from_dict(report_data)
    assert report.passed and set(report.included) == {r.name for r in chosen}
    assert all(o.speedup_vs_eager is not None for o in report.regions)  # each region's own, from its job
    verdict = report.verdict
    assert verdict is not None and verdict.status is Status.PASS and verdict.correct
    assert verdict.speedup_vs_eager is not None and report.predicted_speedup is not None
    assert report_data["eager_ms"] and report_data["patched_ms"]
