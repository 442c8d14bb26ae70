"""The dashboard in a real browser (headless Chromium through Selenium): sign in with a key, the
job page shows the attempts and the chart, and a new attempt stored while the page is open
appears without a reload (Server-Sent Events)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import Status
from store import JobState
from tests.dashboard.support import (
    REPO,
    Service,
    add_attempt,
    create_running_job,
    finish,
    seed_attempts,
    verdict,
)

pytestmark = pytest.mark.timeout(180)

#: Speedups vs eager of the seeded attempts (None: a failed one); eager 4 ms, torch.compile 2.5 ms.
SEEDED = (0.82, None, 1.31, 1.74, None, 2.36, 2.21)
WAIT_S = 15
SCREENSHOT = REPO / "docs" / "screenshots" / "job-page.png"


def _wait(browser: Any, condition: Any, what: str) -> Any:
    return WebDriverWait(browser, WAIT_S, poll_frequency=0.1).until(condition, message=what)


def _sign_in(browser: Any, service: Service, path: str) -> None:
    browser.get(service.base_url + path)
    field = _wait(browser, lambda b: b.find_element(By.ID, "api_key"), "the login form")
    assert "/login" in browser.current_url
    field.send_keys(service.key)
    browser.find_element(By.ID, "login-submit").click()
    _wait(browser, lambda b: b.current_url.endswith(path), f"the redirect back to {path}")


def _open_streams(service: Service) -> int:
    metrics = httpx.get(f"{service.base_url}/metrics").text
    return int(float(re.search(r"^kernelloop_sse_streams (\S+)$", metrics, re.M).group(1)))  # type: ignore[union-attr]


def _points(browser: Any) -> int:
    return len(browser.find_elements(By.CSS_SELECTOR, "#chart circle.pt"))


def _text(browser: Any, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def _full_page_screenshot(browser: Any, *paths: Path) -> None:
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(int(height) + 20, 4000))
    png = browser.get_screenshot_as_png()
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)


def test_job_page_loads_charts_and_updates_live(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    seed_attempts(service.factory, job_id, SEEDED)
    _sign_in(browser, service, f"/dashboard/jobs/{job_id}")

    # The page as stored: every attempt a row, every timed one a point, eager and compile lines.
    rows = browser.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")
    assert len(rows) == len(SEEDED)
    timed = sum(s is not None for s in SEEDED)
    _wait(browser, lambda b: _points(b) == timed, f"{timed} points on the chart")
    assert browser.find_element(By.ID, "chart").get_attribute("data-points") == str(timed)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart path.miss")) == len(SEEDED) - timed
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chart text")]
    assert "eager 1×" in labels and "torch.compile 1.60×" in labels
    assert _text(browser, "best-eager") == "2.36×"
    assert _text(browser, "job-state") == "running"
    _wait(browser, lambda b: "on" in b.find_element(By.ID, "live").get_attribute("class"), "the event stream")

    # A worker stores a faster attempt: the row, the point and the best kernel appear by themselves.
    kernel = (REPO / "examples" / "seed1_cuda.py").read_text()
    n = add_attempt(service.factory, job_id, verdict(median_ms=4.0 / 3.05), source=kernel, tokens=15_000,
                    cost_usd=0.04)
    _wait(browser, lambda b: b.find_elements(By.ID, f"attempt-{n}"), f"row {n} without a reload")
    _wait(browser, lambda b: _points(b) == timed + 1, "the new point")
    _wait(browser, lambda b: _text(b, "best-eager") == "3.05×", "the new best speedup")
    _wait(browser, lambda b: "load_inline" in _text(b, "best-source"), "the new best kernel's source")
    assert "best" in browser.find_element(By.ID, f"attempt-{n}").get_attribute("class")
    assert browser.find_elements(By.CSS_SELECTOR, "#best-source span.k")  # highlighted
    assert browser.find_element(By.ID, "download-best").get_attribute("href").endswith(f"/jobs/{job_id}/best.py")

    # A failed attempt arrives as a miss, not a point.
    add_attempt(service.factory, job_id, verdict(Status.FAIL))
    _wait(browser, lambda b: b.find_elements(By.ID, f"attempt-{n + 1}"), "the failed attempt's row")
    assert _points(browser) == timed + 1

    _full_page_screenshot(browser, artifacts_dir / "job-page.png", SCREENSHOT)
    assert SCREENSHOT.stat().st_size > 20_000

    # The job ends: the state changes and the stream closes.
    finish(service.factory, job_id, JobState.SUCCEEDED)
    _wait(browser, lambda b: _text(b, "job-state") == "succeeded", "the final state")
    _wait(browser, lambda b: "on" not in b.find_element(By.ID, "live").get_attribute("class"), "the stream's end")
    assert not browser.find_elements(By.ID, "cancel-job")


def test_jobs_list_and_problem_page(browser: Any, service: Service, artifacts_dir: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    seed_attempts(service.factory, job_id, (1.5,))
    _sign_in(browser, service, "/dashboard")
    row = browser.find_element(By.CSS_SELECTOR, f'#jobs tr[data-job-id="{job_id}"]')
    assert "conv_tanh_scale_bias_maxpool" in row.text and "1.50×" in row.text
    row.find_element(By.LINK_TEXT, f"#{job_id}").click()
    _wait(browser, lambda b: b.current_url.endswith(f"/dashboard/jobs/{job_id}"), "the job page")
    _wait(browser, lambda b: _open_streams(service) == 1, "the job page's event stream")
    browser.find_element(By.ID, "problem-link").click()
    _wait(browser, lambda b: b.find_elements(By.ID, "inputs"), "the problem page")
    # Leaving the page closes its stream (a back/forward-cached page would otherwise keep it).
    _wait(browser, lambda b: _open_streams(service) == 0, "the stream to close")
    inputs = browser.find_element(By.ID, "inputs").text
    assert "[128, 8, 256, 256]" in inputs and "[2, 8, 32, 32]" in inputs
    work = browser.find_element(By.ID, "work").text
    assert "4.83G" in work and "NVIDIA H200" in work
    assert "class Model" in browser.find_element(By.ID, "problem-source").text
    _full_page_screenshot(browser, artifacts_dir / "problem-page.png")
    # Signing out ends the session: the next page asks for a key again.
    browser.find_element(By.ID, "logout").click()
    _wait(browser, lambda b: "/login" in b.current_url, "the login page")
    browser.get(f"{service.base_url}/dashboard/jobs/{job_id}")
    assert "/login" in browser.current_url
