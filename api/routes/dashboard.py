"""The dashboard: server-rendered pages for browsers, signed in by a session cookie.

``/login`` exchanges an API key for the cookie of `api.dashboard.session`; the pages (the jobs
list with its filters, a job, an attempt, a problem) read the store like the JSON routes (a key
sees its own jobs, an admin all: `OwnedJob` checks a page's job as they check theirs), and the
job page updates itself from ``/jobs/{id}/events`` and ``/jobs/{id}`` (which accept the cookie
too). None of these routes is in the OpenAPI schema: they are HTML for people, not an API. Routes
only: the queries are `store`'s, what the pages show is built in `api.dashboard.views`.
"""

from __future__ import annotations

import ipaddress
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from api import services
from api.dashboard import pages, views
from api.dashboard.browser import BrowserDep, OwnedJob, html_page, not_found_as_page, not_found_page
from api.dashboard.charts import baselines_ms, compile_line, job_charts
from api.dashboard.highlight import highlight, stylesheet
from api.dashboard.problem_facts import read_facts
from api.dashboard.session import (
    CSRF_FIELD,
    LOGIN_CSRF_COOKIE,
    clear_session_cookie,
    codec_for,
    read_session,
    set_session_cookie,
)
from api.deps import MAX_ID, JobId, SessionDep, SessionFactoryDep, lookup_api_key
from api.schemas import AttemptPublic, JobPublic
from api.timings import job_time_to_verdict
from store import (
    Attempt,
    JobState,
    Target,
    events_after,
    first_attempts,
    get_attempt,
    job_timings,
    last_messages,
    list_job_problems,
    list_jobs,
    list_trajectories,
    problem_work,
    usage_points,
)
from vocabulary.wire import Reader

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

STATIC_DIR = Path(__file__).resolve().parent.parent / "dashboard" / "static"
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_STATIC_FILES = {p.name: p for p in STATIC_DIR.iterdir() if p.suffix in _STATIC_TYPES} if STATIC_DIR.is_dir() else {}
#: The highlighter's stylesheet, made by Pygments from its style (not a file of ours).
PYGMENTS_CSS = "pygments.css"
#: Messages in a job page's timeline (the newest; the rest are at /jobs/{id}/messages).
MAX_PAGE_MESSAGES = 600
#: Stored events the page's script replays to say what the worker is doing now (the current
#: attempt's steps, the last message): enough for a cold start's header build and baselines.
RECENT_EVENTS = 60
JOBS_PER_PAGE = 50


def _safe_next(value: str | None) -> str:
    """A local path to go back to after signing in; anything else (another site) becomes /dashboard."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value or "\n" in value:
        return "/dashboard"
    return value


# -- sign in and out -------------------------------------------------------------------------------


@router.get("/")
def root() -> RedirectResponse:
    """The dashboard."""
    return RedirectResponse("/dashboard", status_code=307)


def _local_key(request: Request) -> pages.LocalKeyHint | None:
    """Where `kernelloop up`'s local key is, for a browser on the service's own machine (a page
    seen from elsewhere names no path of the host)."""
    try:
        loopback = request.client is not None and ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:
        loopback = False
    settings = request.app.state.settings
    path = settings.local_key_path
    if not loopback or not path.is_file():
        return None
    return pages.LocalKeyHint(path=str(path), sees_every_job=settings.database_is_local)


@router.get("/login")
def login_form(request: Request, next: Annotated[str | None, Query(max_length=2048)] = None) -> HTMLResponse:
    """The sign-in form (a double-submit cookie guards it against cross-site posts)."""
    token = secrets.token_urlsafe(16)
    response = html_page(pages.login_page(login_csrf=token, next_path=_safe_next(next), local_key=_local_key(request)))
    response.set_cookie(
        LOGIN_CSRF_COOKIE, token, max_age=3600, path="/login", httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form body (no multipart: the dashboard's forms have no files)."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    fields = parse_qs((await request.body()).decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items() if values}


@router.post("/login")
async def login(request: Request, factory: SessionFactoryDep) -> Response:
    """Exchange an API key for a session cookie, then go back where the browser came from."""
    form = await _form(request)
    next_path = _safe_next(form.get("next"))
    expected = request.cookies.get(LOGIN_CSRF_COOKIE)
    token = secrets.token_urlsafe(16)

    def again(error: str, status_code: int) -> HTMLResponse:
        response = html_page(pages.login_page(login_csrf=token, next_path=next_path, error=error,
                                          local_key=_local_key(request)), status_code)
        response.set_cookie(
            LOGIN_CSRF_COOKIE, token, max_age=3600, path="/login", httponly=True, samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    if not expected or not secrets.compare_digest(expected, form.get(CSRF_FIELD, "")):
        return again("The form expired; sign in again.", 400)
    plaintext = form.get("api_key", "").strip()
    key = await run_in_threadpool(lookup_api_key, factory, plaintext) if plaintext else None
    if key is None:
        return again("That key is unknown or revoked.", 401)
    response = RedirectResponse(next_path, status_code=303)
    set_session_cookie(response, request, codec_for(request).issue(key_id=key.id, key_hash=key.key_hash))
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the browser's session (the form carries the session's CSRF token)."""
    form = await _form(request)
    session = read_session(request)
    if session is not None and not codec_for(request).check_csrf(session, form.get(CSRF_FIELD)):
        return html_page(pages.message_page(heading="Not signed out", text="The form expired; reload the page."), 403)
    response = RedirectResponse("/login", status_code=303)
    clear_session_cookie(response, request)
    return response


# -- pages -----------------------------------------------------------------------------------------


@router.get("/dashboard")
def jobs_list(
    browser: BrowserDep,
    session: SessionDep,
    state: Annotated[str, Query(max_length=16)] = "",
    target: Annotated[str, Query(max_length=16)] = "",
    problem: Annotated[str, Query(max_length=128)] = "",
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> HTMLResponse:
    """Your jobs (every job for an admin key), newest first; filtered by state, target, problem.

    The filter form sends every field, an empty one meaning "any".
    """
    owner = browser.owner_filter
    try:
        filters = pages.JobFilters(state=JobState(state) if state else None,
                                   target=Target(target) if target else None, problem=problem or None)
    except ValueError as exc:
        page = pages.message_page(heading="Unknown filter", text=f"{exc}; pick one from the list.",
                                  owner=browser.owner, csrf=browser.csrf)
        return html_page(page, 400)
    listed = list_jobs(session=session, owner_id=owner, state=filters.state, target=filters.target,
                       problem=filters.problem, limit=JOBS_PER_PAGE, offset=offset)
    body = pages.jobs_page(
        jobs=[JobPublic.from_job(j) for j in listed.items], owner=browser.owner, csrf=browser.csrf,
        filters=filters,
        problems=list_job_problems(session=session, owner_id=owner), next_offset=listed.next_cursor,
        total=listed.total,
    )
    return html_page(body)


@router.get("/dashboard/jobs/{job_id}")
def job_view(job: OwnedJob, browser: BrowserDep, session: SessionDep) -> HTMLResponse:
    """One job, live: attempts, the speedup chart, the agent's messages, what runs now, the best kernel."""
    # The event id first, then the rest: anything missing from the page has a later event.
    last_event_id = job.last_event_id
    now = datetime.now(UTC)
    public = JobPublic.from_job(job)
    attempts = first_attempts(session=session, job_id=job.id, limit=views.MAX_PAGE_ATTEMPTS)
    trajectories = views.trajectory_views(list_trajectories(session=session, job_id=job.id))
    recent = events_after(session=session, job_id=job.id, after_id=max(0, last_event_id - RECENT_EVENTS),
                          limit=RECENT_EVENTS)
    messages = last_messages(session=session, job_id=job.id, limit=MAX_PAGE_MESSAGES)
    body = pages.job_page(
        job=public,
        attempts=[AttemptPublic.from_attempt(a) for a in attempts],
        trajectories=trajectories,
        timeline=views.timeline(messages, attempts, trajectories),
        recent_events=views.event_views(e for e in recent if e.id <= last_event_id),
        best_source=job.best_attempt.source if job.best_attempt is not None else None,
        last_event_id=last_event_id,
        compile_line=compile_line(attempts),
        elapsed_s=views.elapsed_s(job, now),
        charts=job_charts(job, attempts, usage_points(session=session, job_id=job.id), now=now),
        timings=job_time_to_verdict(job_timings(session=session, job_id=job.id)),
        baselines=baselines_ms(attempts),
        owner=browser.owner,
        csrf=browser.csrf,
        now=now,
    )
    return html_page(body)


@router.get("/dashboard/models/{run_id}")
def model_run_view(run_id: Annotated[int, PathParam(ge=1, le=MAX_ID)], browser: BrowserDep,
                   session: SessionDep) -> HTMLResponse:
    """One model run: the time breakdown before and after, each region's job, the whole-model verdict."""
    from api import modelruns
    from api.dashboard import modelpage

    with not_found_as_page(browser, f"Model run {run_id}"):
        run = modelruns.get_owned_model_run(session=session, key=browser.key, run_id=run_id)
    return html_page(pages.model_page(run=run, bars=modelpage.breakdown(run), outcomes=modelpage.outcomes(run),
                                      owner=browser.owner, csrf=browser.csrf))


@router.get("/dashboard/jobs/{job_id}/attempts/{n}")
def attempt_view(
    job_id: JobId, n: Annotated[int, PathParam(ge=1, le=MAX_ID)], browser: BrowserDep, session: SessionDep
) -> HTMLResponse:
    """One attempt: figures, compiler errors, trials, timing samples, provenance, source and diffs."""
    with not_found_as_page(browser, f"Attempt {n} of job {job_id}"):
        job = services.get_owned_job(session=session, key=browser.key, job_id=job_id)
        attempt = get_attempt(session=session, job_id=job_id, n=n)
    parent = session.get(Attempt, attempt.parent_id) if attempt.parent_id is not None else None
    trajectories = views.trajectory_views(list_trajectories(session=session, job_id=job_id))
    view = views.attempt_view(attempt, parent=parent, best=job.best_attempt, trajectories=trajectories,
                              attempts_count=job.attempts_count)
    body = pages.attempt_page(job=JobPublic.from_job(job), attempt=view, owner=browser.owner, csrf=browser.csrf)
    return html_page(body)


@router.get("/dashboard/jobs/{job_id}/best.html")
def best_fragment(job: OwnedJob) -> HTMLResponse:
    """The best kernel's highlighted source, as an HTML fragment for the live page."""
    best = job.best_attempt
    if best is None:
        return html_page('<span class="muted">No verified kernel yet.</span>')
    response = html_page(highlight(best.source))
    response.headers["X-Attempt-N"] = str(best.n)
    return response


@router.get("/dashboard/problems/{problem_id:path}")
def problem_view(
    problem_id: Annotated[str, PathParam(max_length=128)], browser: BrowserDep, session: SessionDep
) -> HTMLResponse:
    """A bundled problem: source, input shapes, sizes, and the FLOPs and bytes measured so far."""
    problem = services.find_bundled_problem(problem_id)
    if problem is None:
        return not_found_page(browser, f"Problem {problem_id!r}")
    body = pages.problem_page(
        name=problem.id, description=problem.description, source=problem.source, mode=problem.mode.value,
        policy=problem.policy.value, atol=problem.atol, rtol=problem.rtol, sha256=problem.sha256,
        facts=read_facts(problem.source),
        jobs=problem_work(session=session, sha256=problem.sha256, owner_id=browser.owner_filter),
        owner=browser.owner, csrf=browser.csrf,
    )
    return html_page(body)


@router.get("/dashboard/jobs/{job_id}/problem")
def job_problem_view(job: OwnedJob, browser: BrowserDep, session: SessionDep) -> HTMLResponse:
    """The problem of one job (a posted source has no bundled page)."""
    stored = job.problem
    declarations = Reader(stored.declarations or {}, f"problem {stored.id}'s declarations")
    body = pages.problem_page(
        name=stored.bundled_id or f"problem of job {job.id}",
        description=declarations.text("description", ""),
        source=stored.source, mode=declarations.text("mode", "train"),
        policy=declarations.text("policy", "mixed"), atol=declarations.optional_number("atol"),
        rtol=declarations.optional_number("rtol"), sha256=stored.sha256, facts=read_facts(stored.source),
        jobs=problem_work(session=session, sha256=stored.sha256, owner_id=browser.owner_filter),
        owner=browser.owner, csrf=browser.csrf,
    )
    return html_page(body)


@router.get("/dashboard/static/{name}")
def static_file(name: Annotated[str, PathParam(max_length=64)]) -> Response:
    """The dashboard's script and stylesheets (a fixed set of files, nothing else on disk)."""
    if name == PYGMENTS_CSS:
        return Response(stylesheet(), media_type=_STATIC_TYPES[".css"], headers={"Cache-Control": "no-cache"})
    path = _STATIC_FILES.get(name)
    if path is None:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(
        path, media_type=_STATIC_TYPES[path.suffix], headers={"Cache-Control": "no-cache"}
    )
