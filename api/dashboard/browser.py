"""What every dashboard route shares: the signed-in browser (`BrowserDep`: the session cookie's
key and its CSRF token, or a redirect to ``/login`` that comes back), the HTML response with the
pages' security headers, and the not-found page. A new page's route module takes these three
(see `api.routes.dashboard` and `api.routes.dashboard_insights`).

A page of one job takes `OwnedJob`: the path's job if the browser's key may see it, checked by
`api.services.get_owned_job` as the JSON routes check it, else the not-found page (404, never
403: another key's job and a missing one look the same). A page whose not-found text names
something else (an attempt of the job, a model run) wraps its lookups in `not_found_as_page`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from api import services
from api.dashboard import pages
from api.dashboard.session import codec_for, read_session
from api.deps import JobId, SessionDep, SessionFactoryDep, browser_key
from store import ApiKey, Job, NotFound

__all__ = [
    "PAGE_HEADERS",
    "Browser",
    "BrowserDep",
    "OwnedJob",
    "PageNotFound",
    "html_page",
    "not_found_as_page",
    "not_found_page",
    "page_not_found_response",
]

#: Security headers of every page: no framing (clickjacking), scripts and styles from here only.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def html_page(body: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status_code, headers=PAGE_HEADERS)


class Browser:
    """The signed-in key of a page request and its CSRF token."""

    def __init__(self, key: ApiKey, csrf: str) -> None:
        self.key = key
        self.csrf = csrf

    @property
    def owner(self) -> str:
        admin = " (admin: every key's jobs)" if self.key.is_admin else ""
        return f"{self.key.owner} · {self.key.key_prefix}…{admin}"

    @property
    def owner_filter(self) -> int | None:
        """What the store's queries take as ``owner_id``: ``None`` (every owner's) for an admin."""
        return None if self.key.is_admin else self.key.id


def _require_browser(request: Request, factory: SessionFactoryDep) -> Browser:
    """The page's key, or a redirect to /login that comes back here."""
    session = read_session(request)
    key = browser_key(request, factory) if session is not None else None
    if key is None or session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise HTTPException(303, "sign in first", headers={"Location": f"/login?next={quote(target)}"})
    return Browser(key, codec_for(request).csrf_token(session))


BrowserDep = Annotated[Browser, Depends(_require_browser)]


def not_found_page(browser: Browser, what: str) -> HTMLResponse:
    page = pages.message_page(
        heading="Not found", text=f"{what} does not exist, or belongs to another key"
        + ("." if browser.key.is_admin else " (an admin key sees every job: on the machine of `kernelloop up`, "
           "its local key is one)."), owner=browser.owner,
        csrf=browser.csrf,
    )
    return html_page(page, 404)


class PageNotFound(Exception):
    """What a page shows does not exist, or belongs to another key: `page_not_found_response`
    answers it (`api.errors.install_error_handlers` installs it), so a dependency can end a
    request with the not-found page."""

    def __init__(self, browser: Browser, what: str) -> None:
        super().__init__(f"{what} not found")
        self.browser = browser
        self.what = what


async def page_not_found_response(_request: Request, exc: Exception) -> HTMLResponse:
    assert isinstance(exc, PageNotFound)
    return not_found_page(exc.browser, exc.what)


@contextmanager
def not_found_as_page(browser: Browser, what: str) -> Iterator[None]:
    """The store's `NotFound` in the block (another key's row included) as the not-found page of ``what``."""
    try:
        yield
    except NotFound:
        raise PageNotFound(browser, what) from None


def _owned_job(job_id: JobId, browser: BrowserDep, session: SessionDep) -> Job:
    with not_found_as_page(browser, f"Job {job_id}"):
        job = services.get_owned_job(session=session, key=browser.key, job_id=job_id)
    return job


#: The path's ``job_id`` job, read in the request's session, if the browser's key may see it.
OwnedJob = Annotated[Job, Depends(_owned_job)]
