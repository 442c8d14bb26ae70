"""The dashboard in a real browser (headless Chromium through Selenium), page by page: a running
job whose stage updates live, a finished one with two trajectories, an attempt with its diffs, a
failed job, the jobs list and its filters, a problem, and the API docs, all served by the app
(the browser has no network but this machine's).

The pages' data is written the way a worker writes it: jobs through the store, the agent's
trajectories, messages and attempts through the worker's own `StoreRecorder`, and the referee's
``stage`` events as the worker appends them. Each test saves a screenshot of what it checked
into docs/screenshots/ (and ``$KERNELLOOP_ARTIFACTS``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from problems import parse_problem
from store import JobKind, JobState, Target, create_job, session_scope
from tests.support.browser import PROMPT, arrived, count, screenshot, sign_in, text, wait
from tests.support.dashboard import (
    SEED_PROBLEM,
    Service,
    add_attempt,
    agent_session,
    create_running_job,
    finish,
    kernel_variant,
    record_session,
    stage_event,
    store_problem,
    verdict,
    worker_recorder,
)
from vocabulary.verdict import Status, Verdict

pytestmark = pytest.mark.timeout(180)

def _open_streams(service: Service) -> int:
    metrics = httpx.get(f"{service.base_url}/metrics").text
    return int(float(re.search(r"^kernelloop_sse_streams (\S+)$", metrics, re.M).group(1)))  # type: ignore[union-attr]


def _seconds(shown: str) -> float:
    """``12.3 s`` or ``1 min 05 s`` as seconds."""
    match = re.search(r"(?:(\d+) min )?(\d+(?:\.\d)?) s", shown)
    assert match, shown
    return 60 * int(match.group(1) or 0) + float(match.group(2))


def _two_trajectories(service: Service, job_id: int) -> None:
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0, temperature=0.2)
        record_session(recorder, 0, agent_session(256), user_prompt=PROMPT)
        recorder.trajectory_started(index=1, temperature=0.9, strategy="fuse the conv too")
        record_session(recorder, 1, agent_session(512, tag=" (t1)"), user_prompt=PROMPT)
        recorder.trajectory_finished(index=0, reason="submitted")
        recorder.trajectory_finished(index=1, reason="turns")


def test_a_running_job_shows_its_current_stage_live(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    now = datetime.now(UTC)
    # A cold cache: the header build and the reference are done, the baselines are being timed.
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0, temperature=0.2)
        recorder.message(trajectory_index=0, role="system", content="You write CUDA kernels …")
        recorder.message(trajectory_index=0, role="user", content=PROMPT)
    stage_event(service.factory, job_id, "header_build", "started", at=now - timedelta(seconds=95))
    stage_event(service.factory, job_id, "header_build", "finished", 63.2, at=now - timedelta(seconds=32))
    stage_event(service.factory, job_id, "reference_start", "started", at=now - timedelta(seconds=32))
    stage_event(service.factory, job_id, "reference_start", "finished", 8.1, at=now - timedelta(seconds=24))
    stage_event(service.factory, job_id, "baselines", "started", at=now - timedelta(seconds=24))
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")

    wait(browser, lambda b: "timing eager PyTorch and torch.compile" in text(b, "now-text"), "the current stage")
    steps = browser.find_elements(By.CSS_SELECTOR, "#now-steps li")
    assert [s.get_attribute("data-stage") for s in steps] == ["header_build", "reference_start", "baselines"]
    assert [s.get_attribute("class") for s in steps] == ["step done", "step done", "step running"]
    assert "1 min 03 s" in steps[0].text and "8.1 s" in steps[1].text
    # The running stage's clock ticks, counted from the worker's timestamp.
    first = _seconds(text(browser, "now-elapsed"))
    assert 20 <= first < 60
    wait(browser, lambda b: _seconds(text(b, "now-elapsed")) >= first + 2, "the elapsed time to tick")
    wait(browser, lambda b: "on" in b.find_element(By.ID, "live").get_attribute("class"), "the event stream")
    screenshot(browser, "job-running.png", artifacts_dir)

    # The worker moves on: the baselines end, the first candidate compiles; the page follows.
    stage_event(service.factory, job_id, "baselines", "finished", 21.4)
    stage_event(service.factory, job_id, "compile", "started", attempt=1, trajectory=0)
    wait(browser, lambda b: text(b, "now-text") == "compiling the candidate (trajectory 0, attempt 1)",
          "the compile stage")
    wait(browser, lambda b: count(b, "#now-steps li.done") == 3, "the baselines done")
    broken, slow = kernel_variant(128, broken=True), kernel_variant(1024)
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.message(trajectory_index=0, role="assistant", content="A fused pool-first epilogue.",
                         tool_calls=[{"id": "c1", "type": "function", "function": {"name": "compile"}}],
                         tokens_in=5200, tokens_out=800)
        recorder.attempt(trajectory_index=0, tool="compile", source=broken, parent_sha256=None,
                         verdict=Verdict.from_dict(verdict(Status.ERROR)))
    wait(browser, lambda b: b.find_elements(By.ID, "attempt-1"), "attempt 1's row without a reload")
    wait(browser, lambda b: text(b, "now-text").startswith("attempt 1 judged: error"), "the verdict in the panel")
    wait(browser, lambda b: count(b, "#timeline li.tl-attempt") == 1, "the attempt in the timeline")
    assert count(browser, "#timeline li.tl-message") == 3
    assert "→ compile" in browser.find_elements(By.CSS_SELECTOR, "#timeline li.tl-message")[-1].text
    assert count(browser, "#chart path.miss") == 1 and count(browser, "#chart circle.pt") == 0
    # A timed attempt: a point in trajectory 0's colour, the best so far.
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.attempt(trajectory_index=0, tool="benchmark", source=slow, parent_sha256=None,
                         verdict=Verdict.from_dict(verdict(median_ms=4.0 / 1.31)))
    wait(browser, lambda b: count(b, "#chart circle.pt.series-0") == 1, "the timed point")
    wait(browser, lambda b: text(b, "best-eager") == "1.31×", "the new best")
    wait(browser, lambda b: "load_inline" in text(b, "best-source"), "the best kernel's source")
    assert browser.find_elements(By.CSS_SELECTOR, "#best-source span.kn")  # highlighted by Pygments

    finish(service.factory, job_id, JobState.SUCCEEDED)
    wait(browser, lambda b: text(b, "job-state") == "succeeded", "the final state")
    wait(browser, lambda b: "hidden" in b.find_element(By.ID, "now").get_attribute("class"), "the panel to go")
    wait(browser, lambda b: "on" not in b.find_element(By.ID, "live").get_attribute("class"), "the stream's end")
    assert not browser.find_elements(By.ID, "cancel-job")


def test_a_finished_job_draws_trajectories_and_untimed_passes_apart_from_failures(
    browser: Any, service: Service, artifacts_dir: Path
) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    _two_trajectories(service, job_id)
    finish(service.factory, job_id, JobState.SUCCEEDED)
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")

    # Per trajectory: compile error, wrong, slow (timed), profile (passed, untimed), fast (timed).
    wait(browser, lambda b: b.find_element(By.ID, "chart").get_attribute("data-series") == "2", "two series")
    assert count(browser, "#chart circle.pt.series-0") == 2 and count(browser, "#chart circle.pt.series-1") == 2
    assert count(browser, "#chart polyline.series-line") == 2
    untimed = browser.find_elements(By.CSS_SELECTOR, "#chart path.untimed")
    assert len(untimed) == 2 and {u.get_attribute("class") for u in untimed} == {"untimed series-0",
                                                                                  "untimed series-1"}
    misses = browser.find_elements(By.CSS_SELECTOR, "#chart path.miss")
    assert len(misses) == 4 and all("status-pass" not in m.get_attribute("class") for m in misses)
    legend = text(browser, "chart-legend")
    assert "trajectory 0 · T=0.2" in legend and "trajectory 1 · T=0.9 · fuse the conv too" in legend
    assert "passed, not timed" in legend
    # The timeline beside the attempts: every message, every attempt, in order.
    assert count(browser, "#timeline li.tl-message") == 2 * (2 + 6 + 6)
    assert count(browser, "#timeline li.tl-attempt") == 10
    first_attempt = browser.find_element(By.CSS_SELECTOR, "#timeline li.tl-attempt")
    assert "attempt 1" in first_attempt.text and "compile" in first_attempt.text
    assert "hidden" in browser.find_element(By.ID, "now").get_attribute("class")
    assert text(browser, "best-eager") == "2.36×"
    screenshot(browser, "job-page.png", artifacts_dir)

    # An attempt's number opens its page.
    browser.find_element(By.CSS_SELECTOR, "#attempt-3 td.num a").click()
    arrived(browser, f"/dashboard/jobs/{job_id}/attempts/3", "attempt 3's page")


def test_an_attempt_page_has_its_source_diffs_trials_samples_and_provenance(
    browser: Any, service: Service, artifacts_dir: Path
) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    _two_trajectories(service, job_id)
    finish(service.factory, job_id, JobState.SUCCEEDED)
    # Attempt 3: the slow kernel, edited from the wrong one (attempt 2); the best is attempt 5.
    sign_in(browser, service, f"/dashboard/jobs/{job_id}/attempts/3")
    assert "pass" in text(browser, "attempt") and text(browser, "a-eager") == "0.82×"
    assert text(browser, "parent-link") == "attempt 2"
    parent_diff = text(browser, "diff-parent")
    assert "attempt 2" in parent_diff and "+2 −2" in parent_diff
    assert "const int threads = 1024;" in parent_diff and "const int threads = 64;" in parent_diff
    assert "// third try" in parent_diff and "// second try" in parent_diff
    best_diff = text(browser, "diff-best")
    assert "the job's best" in best_diff and "attempt 5" in best_diff and "const int threads = 256;" in best_diff
    assert count(browser, "#diff-parent tr.add") == 2 and count(browser, "#diff-parent tr.del") == 2
    assert count(browser, "#trials tbody tr") == 3 and "pass" in text(browser, "trials")
    # The timing samples of the candidate, eager and torch.compile (six each), with their medians.
    assert [g.get_attribute("data-series") for g in browser.find_elements(By.CSS_SELECTOR, "#samples g.series")] == [
        "candidate", "eager", "torch.compile"]
    assert count(browser, "#samples circle") == 18
    samples = text(browser, "samples")
    assert "candidate 4.878 ms (n=6)" in samples and "eager 4.000 ms (n=6)" in samples
    provenance = text(browser, "provenance")
    assert "NVIDIA H200" in provenance and "2.11.0" in provenance and "4.83G" in provenance
    assert browser.find_elements(By.CSS_SELECTOR, "#attempt-source span.kr")  # CUDA qualifiers, by Pygments
    assert count(browser, "pre.code") == 1 and not browser.find_elements(By.CSS_SELECTOR, ".diff-card pre")
    screenshot(browser, "attempt-page.png", artifacts_dir)

    # Attempt 1 did not compile: the compiler's errors, no trials, no samples.
    browser.find_element(By.ID, "prev-attempt").click()
    arrived(browser, "/attempts/2", "attempt 2")
    browser.find_element(By.ID, "prev-attempt").click()
    wait(browser, lambda b: b.find_elements(By.ID, "compile-errors"), "attempt 1's compiler errors")
    assert 'identifier "TILE" is undefined' in text(browser, "compile-errors")
    assert browser.find_elements(By.ID, "no-trials") and browser.find_elements(By.ID, "no-samples")
    screenshot(browser, "attempt-compile-error.png", artifacts_dir)


def test_a_failed_job_says_why(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0)
        record_session(recorder, 0, agent_session()[:3], user_prompt=PROMPT)
        recorder.trajectory_finished(index=0, reason="llm_error")
    error = "the LLM failed: openai.APIConnectionError: Connection refused (profile openai, 4 retries)"
    finish(service.factory, job_id, JobState.FAILED, error=error)
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")
    assert text(browser, "job-state") == "failed" and text(browser, "job-error") == error
    assert text(browser, "best-eager") == "—" and text(browser, "best-label") == "none verified yet"
    assert "disabled" in browser.find_element(By.ID, "download-best").get_attribute("class")
    wait(browser, lambda b: count(b, "#chart path.miss") == 2, "the failures on the chart")
    assert count(browser, "#chart circle.pt") == 0
    assert "hidden" in browser.find_element(By.ID, "now").get_attribute("class")
    screenshot(browser, "job-failed.png", artifacts_dir)


POSTED = '''import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
'''


def test_the_jobs_list_filters_by_state_target_and_problem(
    browser: Any, service: Service, artifacts_dir: Path
) -> None:
    running = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, running, verdict(median_ms=4.0 / 1.52), tokens=20_000, cost_usd=0.05)
    softmax_ok = create_running_job(service.factory, service.key_id, problem="level1/softmax", target=Target.CPU)
    add_attempt(service.factory, softmax_ok, verdict(median_ms=0.5, eager_ms=0.6, compile_ms=0.55, target="cpu",
                                                     device="cpu"))
    finish(service.factory, softmax_ok, JobState.SUCCEEDED)
    softmax_failed = create_running_job(service.factory, service.key_id, problem="level1/softmax")
    add_attempt(service.factory, softmax_failed, verdict(Status.FAIL))
    finish(service.factory, softmax_failed, JobState.FAILED, error="no kernel passed")
    with session_scope(service.factory) as session:
        posted = create_job(session=session, problem_id=store_problem(session, parse_problem(POSTED, problem_id="p"),
                                                                      bundled=False),
                            target=Target.CPU, owner_id=service.key_id, kind=JobKind.AGENT).id
    sign_in(browser, service, "/dashboard")

    def listed() -> list[int]:
        return [int(r.get_attribute("data-job-id")) for r in browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
                if r.get_attribute("data-job-id")]

    assert listed() == [posted, softmax_failed, softmax_ok, running] and text(browser, "jobs-total") == "4 jobs"
    # A failed job says why in the list.
    reason = browser.find_element(By.CSS_SELECTOR, f'#jobs tr[data-job-id="{softmax_failed}"] .reason')
    assert reason.text == "no kernel passed" and reason.is_displayed()
    options = [o.text for o in Select(browser.find_element(By.ID, "filter-problem")).options]
    assert options[:3] == ["any", "level1/softmax", SEED_PROBLEM] and options[3].startswith("posted ")
    screenshot(browser, "jobs-list.png", artifacts_dir)

    Select(browser.find_element(By.ID, "filter-problem")).select_by_visible_text("level1/softmax")
    browser.find_element(By.ID, "filter-apply").click()
    wait(browser, lambda b: listed() == [softmax_failed, softmax_ok], "the softmax jobs")
    Select(browser.find_element(By.ID, "filter-state")).select_by_visible_text("failed")
    browser.find_element(By.ID, "filter-apply").click()
    wait(browser, lambda b: listed() == [softmax_failed], "the failed softmax job")
    assert "state=failed" in browser.current_url and "problem=level1%2Fsoftmax" in browser.current_url
    Select(browser.find_element(By.ID, "filter-state")).select_by_visible_text("any")
    Select(browser.find_element(By.ID, "filter-problem")).select_by_visible_text("any")
    Select(browser.find_element(By.ID, "filter-target")).select_by_visible_text("cpu")
    browser.find_element(By.ID, "filter-apply").click()
    wait(browser, lambda b: listed() == [posted, softmax_ok], "the cpu jobs")
    Select(browser.find_element(By.ID, "filter-state")).select_by_visible_text("cancelled")
    browser.find_element(By.ID, "filter-apply").click()
    wait(browser, lambda b: "No job matches these filters." in text(b, "jobs"), "an empty result said plainly")
    browser.find_element(By.ID, "filter-clear").click()
    wait(browser, lambda b: len(listed()) == 4, "every job again")


def test_jobs_list_and_problem_page(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, job_id, verdict(median_ms=4.0 / 1.5))
    sign_in(browser, service, "/dashboard")
    row = browser.find_element(By.CSS_SELECTOR, f'#jobs tr[data-job-id="{job_id}"]')
    assert "conv_tanh_scale_bias_maxpool" in row.text and "1.50×" in row.text
    row.find_element(By.LINK_TEXT, f"#{job_id}").click()
    arrived(browser, f"/dashboard/jobs/{job_id}", "the job page")
    wait(browser, lambda b: _open_streams(service) == 1, "the job page's event stream")
    browser.find_element(By.ID, "problem-link").click()
    wait(browser, lambda b: b.find_elements(By.ID, "inputs"), "the problem page")
    # Leaving the page closes its stream (a back/forward-cached page would otherwise keep it).
    wait(browser, lambda b: _open_streams(service) == 0, "the stream to close")
    inputs = browser.find_element(By.ID, "inputs").text
    assert "[128, 8, 256, 256]" in inputs and "[8, 8, 64, 64]" in inputs
    work = browser.find_element(By.ID, "work").text
    assert "4.83G" in work and "NVIDIA H200" in work
    assert "class Model" in browser.find_element(By.ID, "problem-source").text
    screenshot(browser, "problem-page.png", artifacts_dir)
    # Signing out ends the session: the next page asks for a key again.
    browser.find_element(By.ID, "logout").click()
    wait(browser, lambda b: "/login" in b.current_url, "the login page")
    browser.get(f"{service.base_url}/dashboard/jobs/{job_id}")
    assert "/login" in browser.current_url


def _resources(browser: Any) -> list[str]:
    return list(browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"))


def test_the_api_docs_render_from_the_apps_own_files(browser: Any, service: Service, artifacts_dir: Path) -> None:
    browser.get(f"{service.base_url}/docs")
    wait(browser, lambda b: "kernelloop" in b.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text,
          "Swagger UI's title")
    wait(browser, lambda b: count(b, ".swagger-ui .opblock") >= 15, "the operations")
    assert "/jobs/{job_id}/events" in text(browser, "swagger-ui")
    loaded = _resources(browser)
    assert any(u.endswith("/docs/static/swagger-ui-bundle.js") for u in loaded)
    assert all(u.startswith(service.base_url) for u in loaded), loaded
    screenshot(browser, "api-docs.png", artifacts_dir, full_page=False)

    browser.get(f"{service.base_url}/redoc")
    wait(browser, lambda b: "Queue an agent job" in b.find_element(By.TAG_NAME, "body").text, "ReDoc's operations")
    # ReDoc's sidebar links its maker's logo on a CDN: the page's policy refuses it (no request).
    foreign = [u for u in _resources(browser) if not u.startswith(service.base_url)]
    console = browser.get_log("browser")
    refused = " ".join(e["message"] for e in console if e["source"] == "security" and "blocked" in e["message"])
    assert all(u in refused for u in foreign), (foreign, console)
