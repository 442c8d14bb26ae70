"""The dashboard's analysis additions in a real browser (headless Chromium), each with a screenshot
in docs/screenshots/: the job header's eager and ``torch.compile`` milliseconds, the roofline of the
attempts, tokens and cost over the wall clock (both following a running job live), two attempts
picked in the attempts table and compared, the leaderboard across jobs and models, and the
sign-in page that says which key to use.

Jobs are written the way a worker writes them (`tests.support.dashboard`); a finished job's rows
are then spread over 18 minutes, as a real session takes, so the time axis means something.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from sqlalchemy import select, update

from store import Attempt, Job, JobState, Message, Target, Trajectory, session_scope
from tests.support.browser import PROMPT, arrived, count, element_screenshot, screenshot, sign_in, text, wait
from tests.support.dashboard import (
    SEED_PROBLEM,
    Service,
    add_attempt,
    agent_session,
    create_running_job,
    finish,
    kernel_variant,
    record_session,
    verdict,
    worker_recorder,
)
from vocabulary.verdict import Status, Verdict

pytestmark = pytest.mark.timeout(180)


def _session_job(service: Service, *, spread_minutes: float = 18.0) -> int:
    """A finished job of two trajectories (10 attempts, 4 timed), its rows spread over time."""
    job_id = create_running_job(service.factory, service.key_id)
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0, temperature=0.2)
        record_session(recorder, 0, agent_session(256), user_prompt=PROMPT)
        recorder.trajectory_started(index=1, temperature=0.9, strategy="fuse the conv too")
        record_session(recorder, 1, agent_session(512, tag=" (t1)"), user_prompt=PROMPT)
        recorder.trajectory_finished(index=0, reason="submitted")
        recorder.trajectory_finished(index=1, reason="turns")
    finish(service.factory, job_id, JobState.SUCCEEDED)
    started = datetime.now(UTC) - timedelta(minutes=spread_minutes + 1)
    with session_scope(service.factory) as session:
        messages = session.scalars(select(Message).join(Trajectory).where(Trajectory.job_id == job_id)
                                   .order_by(Message.id)).all()
        attempts = session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.id)).all()
        rows: list[Any] = sorted([*messages, *attempts], key=lambda r: r.created_at)
        step = timedelta(minutes=spread_minutes) / len(rows)
        for i, row in enumerate(rows):
            row.created_at = started + step * (i + 1)
        session.execute(update(Job).where(Job.id == job_id).values(
            started_at=started, finished_at=started + timedelta(minutes=spread_minutes + 0.5)))
    return job_id


def test_the_job_header_roofline_and_usage_of_a_finished_job(browser: Any, service: Service,
                                                             artifacts_dir: Path) -> None:
    job_id = _session_job(service)
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")
    # The baselines beside the ratios: eager 4 ms, torch.compile 2.5 ms (the verdicts' medians).
    assert text(browser, "eager-ms") == "4.000 ms" and text(browser, "compile-ms") == "2.500 ms"
    assert text(browser, "best-ms") == "1.695 ms"
    # The roofline: four timed attempts under the speed of light (0.21 ms), eager and torch.compile.
    roofline = browser.find_element(By.ID, "roofline")
    points = roofline.find_elements(By.CSS_SELECTOR, "circle.pt")
    assert sorted(int(p.get_attribute("data-n")) for p in points) == [3, 5, 8, 10]
    assert len(roofline.find_elements(By.CSS_SELECTOR, "circle.pt.best")) == 1
    labels = roofline.text
    assert "speed of light 0.21 ms" in labels and "eager 5.25%" in labels and "torch.compile 8.4%" in labels
    assert "achieved GB/s of minimum traffic" in labels and "1.48 TB/s" in labels  # 310 MB in 0.21 ms
    title = points[-1].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert "12.4% of the speed of light" in title and "GB/s" in title and "FLOP/s" in title
    assert "arithmetic intensity 15.6 FLOP/B" in text(browser, "roofline-notes")
    # Tokens and cost over 18 minutes: two cumulative lines, the budgets named, a tick per attempt.
    usage = browser.find_element(By.ID, "usage")
    assert len(usage.find_elements(By.CSS_SELECTOR, "polyline.usage")) == 2
    assert len(usage.find_elements(By.CSS_SELECTOR, "rect.tick")) == 10
    usage_text = usage.text
    assert "tokens 82.8k" in usage_text and "cost $0.14" in usage_text and "budget 400k" in usage_text
    assert "wall clock since the job started" in usage_text and "10 min" in usage_text
    element_screenshot(browser, "job-charts", "job-roofline-usage.png", artifacts_dir)
    # A point opens its attempt.
    browser.execute_script("arguments[0].parentNode.dispatchEvent(new MouseEvent('click', {bubbles: true}))",
                           points[-1])
    wait(browser, lambda b: "/attempts/" in b.current_url, "the attempt behind the point")


def test_the_charts_and_header_follow_a_running_job(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")
    assert text(browser, "eager-ms") == "—" and browser.find_elements(By.ID, "no-roofline")
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0)
        call = {"id": "c1", "type": "function", "function": {"name": "benchmark"}}
        recorder.message(trajectory_index=0, role="assistant", content="A first kernel.", tokens_in=7000,
                         tokens_out=900, cost_usd=0.03, tool_calls=[call])
        recorder.attempt(trajectory_index=0, tool="benchmark", source=kernel_variant(1024), parent_sha256=None,
                         verdict=Verdict.from_dict(verdict(median_ms=2.0)))
    wait(browser, lambda b: text(b, "eager-ms") == "4.000 ms", "eager's milliseconds without a reload")
    assert text(browser, "compile-ms") == "2.500 ms"
    wait(browser, lambda b: count(b, "#roofline circle.pt") == 1, "the roofline's first point")
    wait(browser, lambda b: count(b, "#usage rect.tick") == 1, "the usage chart")
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.attempt(trajectory_index=0, tool="benchmark", source=kernel_variant(256), parent_sha256=None,
                         verdict=Verdict.from_dict(verdict(median_ms=1.0)))
    wait(browser, lambda b: count(b, "#roofline circle.pt") == 2, "the second point, live")
    assert browser.find_element(By.CSS_SELECTOR, "#roofline circle.pt.best").get_attribute("data-n") == "2"


def test_two_attempts_ticked_in_the_table_are_compared(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = _session_job(service)
    sign_in(browser, service, f"/dashboard/jobs/{job_id}")
    button = browser.find_element(By.ID, "compare-button")
    assert not button.is_enabled()

    def tick(n: int) -> None:
        box = browser.find_element(By.CSS_SELECTOR, f'#attempts input[name="n"][value="{n}"]')
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
        box.click()

    tick(2)
    assert button.text == "Tick one more to compare with 2"
    tick(5)
    tick(3)  # a third tick: the oldest gives way
    assert button.text == "Compare 3 ↔ 5" and button.is_enabled()
    assert not browser.find_element(By.CSS_SELECTOR, '#attempts input[value="2"]').is_selected()
    button.click()
    wait(browser, lambda b: "/compare?" in b.current_url, "the comparison")
    assert "n=3" in browser.current_url and "n=5" in browser.current_url
    figures = browser.find_element(By.ID, "compare-figures")
    assert "attempt 3" in figures.text and "attempt 5" in figures.text
    winners = [c.text for c in figures.find_elements(By.CSS_SELECTOR, "td.win")]
    assert winners[:3] == ["1.695", "2.36×", "1.47×"]  # attempt 5 is faster: its figures in bold
    diff = text(browser, "compare-diff")
    assert "const int threads = 1024;" in diff and "const int threads = 256;" in diff
    assert "// third try" in diff and "// vectorised" in diff
    screenshot(browser, "attempt-compare.png", artifacts_dir)
    browser.find_element(By.ID, "swap").click()
    wait(browser, lambda b: "n=5&n=3" in b.current_url, "the swap link")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Attempt 5 → attempt 3"
    assert "− lines are attempt 5's, + lines attempt 3's" in text(browser, "compare-diff")
    # Attempt 4 is the profile: milliseconds per forward (as the harness writes them), the kernel of
    # the candidate's own among cuDNN's marked.
    browser.get(f"{service.base_url}/dashboard/jobs/{job_id}/attempts/4")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#profile tbody tr")]
    assert rows[0].startswith("aten::convolution") and "3.120" in rows[0]
    assert "pool_tanh_scale_bias_kernel" in rows[2] and "yours" in rows[2] and "0.705" in rows[2], rows
    assert "—" not in " ".join(rows)
    element_screenshot(browser, "profile-card", "attempt-profile.png", artifacts_dir)
    # Without two ticks the page says what to do (the form works without the script too).
    browser.get(f"{service.base_url}/dashboard/jobs/{job_id}/compare?n=3")
    assert "Tick exactly two attempts" in browser.find_element(By.TAG_NAME, "main").text


def test_the_leaderboard_ranks_jobs_across_models(browser: Any, service: Service, artifacts_dir: Path) -> None:
    def job(problem: str, llm: tuple[str, str], speedup: float | None, *, target: Target = Target.CUDA,
            device: str = "NVIDIA H200") -> int:
        job_id = create_running_job(service.factory, service.key_id, problem=problem, llm=llm, target=target)
        add_attempt(service.factory, job_id, verdict(Status.FAIL, device=device, target=target.value),
                    tokens=9000, cost_usd=0.02)
        if speedup is not None:
            add_attempt(service.factory, job_id, verdict(median_ms=4.0 / speedup, device=device, target=target.value),
                        tokens=15_000, cost_usd=0.06)
        finish(service.factory, job_id, JobState.SUCCEEDED if speedup else JobState.FAILED,
               error=None if speedup else "no verified kernel")
        return job_id

    gpt = ("openai", "gpt-4o-mini")
    qwen = ("vllm", "Qwen/Qwen3-32B")
    seed = [job(SEED_PROBLEM, gpt, 1.9), job(SEED_PROBLEM, qwen, 2.4), job(SEED_PROBLEM, gpt, 2.1),
            job(SEED_PROBLEM, ("scripted", "scripted"), 1.31)]
    job(SEED_PROBLEM, qwen, None)  # no verified kernel: not ranked
    softmax = [job("level1/softmax", qwen, 0.8, target=Target.CPU, device="cpu"),
               job("level1/softmax", gpt, 1.4, target=Target.CPU, device="cpu")]
    sign_in(browser, service, "/dashboard")
    browser.find_element(By.ID, "nav-leaderboard").click()
    arrived(browser, "/dashboard/leaderboard", "the leaderboard")
    groups = browser.find_elements(By.CSS_SELECTOR, ".lb-group")
    assert [(g.get_attribute("data-problem"), g.get_attribute("data-target")) for g in groups] == [
        ("level1/softmax", "cpu"), (SEED_PROBLEM, "cuda")]

    def ranked(group: Any) -> list[int]:
        return [int(r.get_attribute("data-job-id")) for r in group.find_elements(By.CSS_SELECTOR, "tbody tr")]

    assert ranked(groups[1]) == [seed[1], seed[2], seed[0], seed[3]]
    assert ranked(groups[0]) == [softmax[1], softmax[0]]
    chips = [c.text for c in groups[1].find_elements(By.CSS_SELECTOR, ".chip.model-best")]
    assert chips == ["vllm · Qwen/Qwen3-32B 2.40× (1)", "openai · gpt-4o-mini 2.10× (2)", "scripted 1.31× (1)"]
    top = groups[1].find_element(By.CSS_SELECTOR, "tbody tr")
    assert "NVIDIA H200" in top.text and "4.000 · 2.500" in top.text and "2.40×" in top.text
    screenshot(browser, "leaderboard.png", artifacts_dir)
    widths = browser.execute_script(  # the table fits the page: nothing to scroll sideways at 1280 px
        "return [...document.querySelectorAll('.lb-group')].map(g => [g.scrollWidth, g.clientWidth])")
    assert all(scroll <= client for scroll, client in widths), widths
    Select(browser.find_element(By.ID, "lb-problem")).select_by_visible_text("level1/softmax")
    browser.find_element(By.ID, "lb-apply").click()
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, ".lb-group")) == 1, "one problem")
    assert "problem=level1%2Fsoftmax" in browser.current_url


def test_the_sign_in_page_on_the_service_machine_names_the_local_key(
    browser: Any, service: Service, artifacts_dir: Path, tmp_path: Path
) -> None:
    """`kernelloop up`'s data directory holds the local key (the fixture's service serves tmp_path)."""
    (tmp_path / "local-api-key").write_text(service.key + "\n")
    browser.get(f"{service.base_url}/dashboard")
    wait(browser, lambda b: b.find_elements(By.ID, "api_key"), "the login form")
    hint = text(browser, "login-local-key")
    assert f"cat {tmp_path / 'local-api-key'}" in hint and "sees every job" in hint
    screenshot(browser, "login.png", artifacts_dir, full_page=False)
    browser.find_element(By.ID, "api_key").send_keys(service.key)
    browser.find_element(By.ID, "login-submit").click()
    arrived(browser, "/dashboard", "the jobs list")
