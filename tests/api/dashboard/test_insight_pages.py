"""The analysis pages without a browser: who sees what (the leaderboard, a comparison and a job's
charts are confined to the key's jobs like every page), what they refuse, and the charts' layout
as values (`api.dashboard.charts`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from api.dashboard.charts import roofline_chart, usage_chart
from store import Attempt, JobState, UsagePoint
from tests.support.dashboard import Service, add_attempt, create_key, create_running_job, finish, login, verdict
from vocabulary.verdict import Status

pytestmark = pytest.mark.timeout(120)


def _job_with_kernels(service: Service, owner_id: int, problem: str = "level1/softmax") -> int:
    job_id = create_running_job(service.factory, owner_id, problem=problem)
    add_attempt(service.factory, job_id, verdict(Status.FAIL), tokens=4000, cost_usd=0.01)
    add_attempt(service.factory, job_id, verdict(median_ms=2.0), tokens=6000, cost_usd=0.02)
    add_attempt(service.factory, job_id, verdict(median_ms=1.0), tokens=6000, cost_usd=0.02)
    finish(service.factory, job_id, JobState.SUCCEEDED)
    return job_id


def test_the_analysis_pages_are_confined_to_the_keys_jobs(service: Service) -> None:
    alices = _job_with_kernels(service, service.key_id)
    mallory_id, mallory_key = create_key(service.factory, "mallory")
    mallorys = _job_with_kernels(service, mallory_id)
    _, admin_key = create_key(service.factory, "root", is_admin=True)
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        board = client.get("/dashboard/leaderboard").text
        assert f'data-job-id="{alices}"' in board and f'data-job-id="{mallorys}"' not in board
        compared = client.get(f"/dashboard/jobs/{alices}/compare", params=[("n", "2"), ("n", "3")])
        assert compared.status_code == 200 and "Attempt 2 → attempt 3" in compared.text
        charts = client.get(f"/dashboard/jobs/{alices}/charts.html")
        assert charts.status_code == 200 and 'id="roofline"' in charts.text and 'id="usage"' in charts.text
        assert charts.headers["content-security-policy"].startswith("default-src 'self'")
        for path in (f"/dashboard/jobs/{mallorys}/compare?n=2&n=3", f"/dashboard/jobs/{mallorys}/charts.html"):
            refused = client.get(path)
            assert refused.status_code == 404 and "belongs to another key" in refused.text, path
        # What it refuses: one attempt, or an attempt the job does not have.
        one = client.get(f"/dashboard/jobs/{alices}/compare?n=2")
        assert one.status_code == 400 and "Tick exactly two attempts" in one.text
        assert client.get(f"/dashboard/jobs/{alices}/compare?n=2&n=9").status_code == 404
        assert client.get("/dashboard/leaderboard?target=tpu").status_code == 400
    with httpx.Client(base_url=service.base_url) as client:
        login(client, mallory_key)
        board = client.get("/dashboard/leaderboard").text
        assert f'data-job-id="{mallorys}"' in board and f'data-job-id="{alices}"' not in board
    with httpx.Client(base_url=service.base_url) as client:
        login(client, admin_key)
        board = client.get("/dashboard/leaderboard").text
        assert f'data-job-id="{mallorys}"' in board and f'data-job-id="{alices}"' in board
        assert "every job with a verified kernel" in board


def test_the_charts_are_in_the_job_page_and_follow_a_signed_out_browser_to_login(service: Service) -> None:
    job_id = _job_with_kernels(service, service.key_id)
    with httpx.Client(base_url=service.base_url) as client:
        assert client.get(f"/dashboard/jobs/{job_id}/charts.html").status_code == 303
        login(client, service.key)
        page = client.get(f"/dashboard/jobs/{job_id}").text
    assert 'id="job-charts"' in page and 'id="roofline"' in page and 'id="eager-ms">4.000 ms' in page
    assert 'name="n" value="3"' in page and 'action="/dashboard/jobs/' in page


def _attempt(n: int, median_ms: float | None, *, status: Status = Status.PASS, at: datetime | None = None) -> Any:
    v = verdict(status, median_ms=median_ms) if status is Status.PASS else verdict(status)
    return Attempt(n=n, tool="benchmark", status=status, median_ms=median_ms if status is Status.PASS else None,
                   verdict=v, created_at=at or datetime.now(UTC))


def test_the_roofline_puts_faster_attempts_nearer_the_roof() -> None:
    unknown = _attempt(1, None, status=Status.ERROR)
    unknown.verdict = {**unknown.verdict, "sol_ms": None}  # a build that failed: no roofline measured
    assert roofline_chart([unknown], job_id=1, best_n=None) is None
    chart = roofline_chart([_attempt(1, 4.0), _attempt(2, None, status=Status.FAIL), _attempt(3, 0.42)],
                           job_id=7, best_n=3)
    assert chart is not None
    slow, fast = chart.marks
    assert (slow.n, fast.n) == (1, 3) and fast.y < slow.y and "best" in fast.css and "best" not in slow.css
    assert "50% of the speed of light" in fast.title and fast.href == "/dashboard/jobs/7/attempts/3"
    roof = next(line for line in chart.lines if line.css == "roof")
    eager = next(line for line in chart.lines if line.css == "line-eager")
    assert roof.y1 < fast.y < eager.y1 == slow.y  # 100 % > 50 % > eager's 5.25 % = the slow one's (4 ms)
    assert any(label.text == "1.48 TB/s" for label in chart.labels)  # 310 MB in 0.21 ms: the roof's bandwidth


def test_the_usage_chart_steps_up_and_shows_budgets_in_view() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    points = [UsagePoint(at=start + timedelta(seconds=60 * i), tokens=10_000, cost_usd=0.5) for i in (1, 2, 3)]
    attempts = [_attempt(1, 2.0, at=start + timedelta(seconds=90))]
    chart = usage_chart(job_id=1, start=start, end=start + timedelta(seconds=200), points=points,
                        attempts=attempts, total_tokens=35_000, total_cost=1.5, max_tokens=100_000,
                        max_cost_usd=50.0, wall_clock_s=240.0)
    assert chart is not None
    texts = [label.text for label in chart.labels]
    # Tokens: 30k in messages, 35k on the job (a failed call's): the last step reaches 35k.
    assert "tokens 35k" in texts and "budget 100k" in texts
    tokens_line = chart.polylines[0].points.split()
    assert len(tokens_line) == 1 + 2 * 3 + 2
    # The cost budget ($50) is 33 times what was spent: named, not drawn; the wall clock's is drawn.
    budgets = [line for line in chart.lines if line.css == "budget"]
    assert len(budgets) == 2 and "budget $50.00" in texts and "wall clock budget 4 min" in texts
    assert [m.n for m in chart.marks] == [1] and chart.marks[0].css == "tick status-pass"
    assert usage_chart(job_id=1, start=start, end=start, points=[], attempts=[], total_tokens=0, total_cost=0.0,
                       max_tokens=None, max_cost_usd=None, wall_clock_s=None) is None
