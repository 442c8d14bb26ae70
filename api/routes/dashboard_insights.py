"""The dashboard's analysis pages: the leaderboard across jobs and models, two attempts of a job
compared, and a job's charts (roofline, tokens and cost over time) and time to verdict as the
live page refetches them. Thin: the store's queries (`store.insights`) read, `api.dashboard` lays out and renders."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from api import services
from api.dashboard import insight_pages, pages
from api.dashboard.browser import BrowserDep, OwnedJob, html_page, not_found_as_page
from api.dashboard.charts import job_charts
from api.dashboard.compare import compare_attempts
from api.dashboard.leaderboard import leaderboard_groups
from api.dashboard.views import MAX_PAGE_ATTEMPTS
from api.deps import MAX_ID, JobId, SessionDep
from api.schemas import JobPublic
from api.timings import job_time_to_verdict
from store import Target, first_attempts, get_attempt, job_timings, leaderboard_rows, list_job_problems, usage_points

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/dashboard/leaderboard")
def leaderboard(
    browser: BrowserDep,
    session: SessionDep,
    problem: Annotated[str, Query(max_length=128)] = "",
    target: Annotated[str, Query(max_length=16)] = "",
) -> HTMLResponse:
    """Per problem and target, the visible jobs' best kernels ranked, across jobs and models."""
    try:
        filters = pages.JobFilters(target=Target(target) if target else None, problem=problem or None)
    except ValueError as exc:
        page = pages.message_page(heading="Unknown filter", text=f"{exc}; pick one from the list.",
                                  owner=browser.owner, csrf=browser.csrf)
        return html_page(page, 400)
    rows = leaderboard_rows(session=session, owner_id=browser.owner_filter, problem=filters.problem,
                            target=filters.target)
    body = insight_pages.leaderboard_page(
        groups=leaderboard_groups(rows), problems=list_job_problems(session=session, owner_id=browser.owner_filter),
        filters=filters, owner=browser.owner, csrf=browser.csrf, sees_every_job=browser.key.is_admin)
    return html_page(body)


@router.get("/dashboard/jobs/{job_id}/compare")
def compare(
    job_id: JobId, browser: BrowserDep, session: SessionDep,
    n: Annotated[list[int], Query(max_length=16)] = [],  # noqa: B006 - FastAPI copies a query default
) -> HTMLResponse:
    """Two attempts of a job side by side (``?n=3&n=5``, as the attempts table's ticks send them:
    the first is the diff's "−" side)."""
    picked = list(dict.fromkeys(i for i in n if 1 <= i <= MAX_ID))
    pair = f" or its attempts {picked[0]} and {picked[1]}" if len(picked) == 2 else ""
    with not_found_as_page(browser, f"Job {job_id}{pair}"):
        job = services.get_owned_job(session=session, key=browser.key, job_id=job_id)
        if len(picked) != 2:
            page = pages.message_page(
                heading="Pick two attempts", owner=browser.owner, csrf=browser.csrf,
                text=f"Tick exactly two attempts in the attempts table of job {job_id} to compare them "
                     f"(this asked for {len(picked)}).")
            return html_page(page, 400)
        first, second = (get_attempt(session=session, job_id=job_id, n=i) for i in picked)
    body = insight_pages.compare_page(job=JobPublic.from_job(job), comparison=compare_attempts(first, second),
                                      owner=browser.owner, csrf=browser.csrf)
    return html_page(body)


@router.get("/dashboard/jobs/{job_id}/charts.html")
def charts_fragment(job: OwnedJob, session: SessionDep) -> HTMLResponse:
    """The job's roofline and usage charts, as an HTML fragment for the live page."""
    attempts = first_attempts(session=session, job_id=job.id, limit=MAX_PAGE_ATTEMPTS)
    charts = job_charts(job, attempts, usage_points(session=session, job_id=job.id), now=datetime.now(UTC))
    return html_page(insight_pages.job_charts_fragment(charts=charts))


@router.get("/dashboard/jobs/{job_id}/timings.html")
def timings_fragment(job: OwnedJob, session: SessionDep) -> HTMLResponse:
    """The job's time to verdict (`api.timings`), as an HTML fragment for the live page."""
    timings = job_time_to_verdict(job_timings(session=session, job_id=job.id))
    return html_page(insight_pages.job_timings_fragment(job=JobPublic.from_job(job), timings=timings))
