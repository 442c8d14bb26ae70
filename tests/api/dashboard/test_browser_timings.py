"""The job page's time to verdict in a real browser (headless Chromium), with a screenshot in
docs/screenshots/job-time-to-verdict.png: p50 and p95 per stage (the queue wait first), lane
seconds per attempt kind, attempts per hour of lane time; and the table following a running job.

The attempts carry the stage seconds of an H200 session as the referee records them (a cold
cache's header build and reference start on the first, cached builds on the re-judging).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from sqlalchemy import update

from store import Job, get_job, session_scope
from tests.support.browser import element_screenshot, sign_in, text, wait
from tests.support.dashboard import (
    Service,
    add_attempt,
    create_running_job,
    kernel_variant,
    login,
    verdict,
    worker_recorder,
)
from vocabulary.stages import StageSeconds
from vocabulary.verdict import Stage, Status, Verdict

pytestmark = pytest.mark.timeout(180)

#: (verdict, stage seconds) of a session: a compile error, a wrong kernel, a slow one, two fast ones,
#: the fastest re-judged in a fresh process.
SESSION = [
    (dict(status=Status.ERROR, depth="compile"), StageSeconds(header_build=38.5, compile=41.2)),
    (dict(status=Status.FAIL), StageSeconds(reference_start=4.8, baselines=6.1, compile=35.0, load=0.35,
                                            correctness=1.55)),
    (dict(median_ms=4.0 / 0.82), StageSeconds(compile=33.4, load=0.34, correctness=1.45, timing=1.52)),
    (dict(median_ms=4.0 / 1.9), StageSeconds(compile=34.1, load=0.31, correctness=1.48, timing=1.41)),
    (dict(median_ms=4.0 / 2.36), StageSeconds(compile=31.9, load=0.33, correctness=1.5, timing=1.38)),
    (dict(median_ms=4.0 / 2.3), StageSeconds(reference_start=4.6, baselines=2.2, load=0.36, correctness=1.52,
                                             timing=1.44)),
]


def _cells(browser: Any, table_id: str, key: str) -> dict[str, list[str]]:
    rows = browser.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
    return {row.get_attribute(key): [td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows}


def test_the_job_page_shows_where_each_attempts_seconds_went(browser: Any, service: Service,
                                                             artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    with session_scope(service.factory) as session:  # it waited 3.5 s for a worker
        created = get_job(session=session, job_id=job_id).created_at
        session.execute(update(Job).where(Job.id == job_id).values(started_at=created + timedelta(seconds=3.5)))
    for i, (figures, seconds) in enumerate(SESSION):
        tool = "retime" if i == len(SESSION) - 1 else "benchmark"
        add_attempt(service.factory, job_id, verdict(**figures, stage_seconds=seconds), tool=tool,
                    source=kernel_variant(64 * (i + 1)))
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")
    stages = wait(browser, lambda b: _cells(b, "timings-stages", "data-stage"), "the time to verdict's stages")
    assert list(stages) == ["queue_wait", "header_build", "reference_start", "baselines", "compile", "load",
                            "correctness", "timing"]
    assert stages["queue_wait"] == ["queue wait", "1", "3.50", "3.50", "3.50"]
    # Five compiles ran (the re-judging's build was cached): p50 34.1 s, p95 40.0 s.
    assert stages["compile"] == ["compile", "5", "34.1", "40.0", "176"]
    assert stages["timing"][:4] == ["timing lane", "4", "1.42", "1.51"]
    kinds = _cells(browser, "timings-kinds", "data-kind")
    assert list(kinds) == ["compile_error", "wrong", "correct", "fast", "all"]
    assert kinds["compile_error"][:3] == ["compile error", "1", "0.00"]
    assert kinds["fast"][:2] == ["fast", "3"] and kinds["all"][:3] == ["all", "6", "32.6"]
    # Six verdicts in 32.6 s of lane time.
    assert text(browser, "verdicts-per-lane-hour") == "662"
    assert "(per GPU-hour)" in text(browser, "timings-summary")
    element_screenshot(browser, "timings-card", "job-time-to-verdict.png", artifacts_dir)

    # Live: another attempt arrives and the table follows without a reload.
    with worker_recorder(service.factory, job_id) as recorder:
        wrong = verdict(Status.FAIL, stage=Stage.INTEGRITY,
                        stage_seconds=StageSeconds(compile=30.0, load=0.3, correctness=2.2))
        recorder.attempt(trajectory_index=None, tool="benchmark", source=kernel_variant(2048), parent_sha256=None,
                         verdict=Verdict.from_dict(wrong))
    wait(browser, lambda b: _cells(b, "timings-kinds", "data-kind")["wrong"][1] == "2", "the new wrong attempt")
    assert _cells(browser, "timings-kinds", "data-kind")["all"][1] == "7"


def test_a_queued_job_has_no_timings_yet(browser: Any, service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    with session_scope(service.factory) as session:
        session.execute(update(Job).where(Job.id == job_id).values(started_at=None))
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")
    wait(browser, lambda b: b.find_elements(By.ID, "no-timings"), "the note")
    assert "the first row comes when a worker claims the job" in text(browser, "no-timings")
    assert not browser.find_elements(By.ID, "timings-stages")


def test_the_live_fragment_and_attempts_judged_before_stage_seconds(service: Service) -> None:
    """``/dashboard/jobs/{id}/timings.html`` (what the live page fetches): attempts whose verdicts
    carry no stage seconds are counted and said to be so, not shown as zero seconds."""
    job_id = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, job_id, verdict(median_ms=2.0))
    add_attempt(service.factory, job_id, verdict(Status.FAIL))
    with httpx.Client(base_url=service.base_url) as client:
        assert client.get(f"/dashboard/jobs/{job_id}/timings.html").status_code == 303  # to the sign-in page
        login(client, service.key)
        fragment = client.get(f"/dashboard/jobs/{job_id}/timings.html")
        assert fragment.status_code == 200 and 'id="timings-card"' in fragment.text
        assert "2 attempts, none with stage seconds" in fragment.text and "timings-kinds" not in fragment.text
        assert 'data-stage="queue_wait"' in fragment.text
        assert client.get(f"/dashboard/jobs/{job_id + 7}/timings.html").status_code == 404
