"""Browser sessions against the live API: the login form, the signed cookie, CSRF on unsafe
requests, ownership through the cookie, and the header auth left as it was."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api import NullDispatcher, create_app
from api.dashboard.session import COOKIE_NAME, CSRF_HEADER
from config import Settings
from store import JobState, revoke_api_key, session_scope
from tests.support.dashboard import (
    Service,
    add_attempt,
    create_key,
    create_running_job,
    finish,
    login,
    migrated_factory,
    verdict,
)
from vocabulary.verdict import Status

pytestmark = pytest.mark.timeout(120)


def _csrf(client: httpx.Client) -> str:
    match = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/dashboard").text)
    assert match
    return match.group(1)


def test_login_sets_a_signed_httponly_lax_cookie(service: Service) -> None:
    with httpx.Client(base_url=service.base_url) as client:
        response = login(client, service.key, "/dashboard/jobs/7?x=1")
        assert response.status_code == 303 and response.headers["location"] == "/dashboard/jobs/7?x=1"
        [header] = [h for h in response.headers.get_list("set-cookie") if h.startswith(f"{COOKIE_NAME}=")]
        cookie = SimpleCookie(header)[COOKIE_NAME]
        assert cookie["httponly"] and cookie["samesite"].lower() == "lax" and cookie["path"] == "/"
        assert service.key not in header  # the key itself never goes to the browser
        page = client.get("/dashboard")
        assert page.status_code == 200 and "alice" in page.text
        assert page.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in page.headers[
            "content-security-policy"]


def test_login_refuses_bad_keys_forged_forms_and_foreign_redirects(service: Service) -> None:
    with httpx.Client(base_url=service.base_url) as client:
        assert login(client, "kl_not-a-key").status_code == 401
        assert COOKIE_NAME not in client.cookies
        # A cross-site post has no login cookie to match its token.
        forged = httpx.post(f"{service.base_url}/login", data={"api_key": service.key, "csrf_token": "x"})
        assert forged.status_code == 400 and COOKIE_NAME not in forged.cookies
        for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
            response = login(client, service.key, target)
            assert response.headers["location"] == "/dashboard"


def test_pages_without_a_session_go_to_login(service: Service) -> None:
    response = httpx.get(f"{service.base_url}/dashboard/jobs/3")
    assert response.status_code == 303 and response.headers["location"] == "/login?next=/dashboard/jobs/3"
    tampered = httpx.get(f"{service.base_url}/dashboard", cookies={COOKIE_NAME: "v1.e30.forged"})
    assert tampered.status_code == 303
    assert httpx.get(f"{service.base_url}/jobs", cookies={COOKIE_NAME: "v1.e30.forged"}).status_code == 401


def test_cookie_reads_json_sse_and_downloads_of_own_jobs_only(service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, job_id, verdict(median_ms=2.0), source="class ModelNew: pass  # best\n")
    finish(service.factory, job_id)
    bob_id, bob_key = create_key(service.factory, "bob")
    bobs_job = create_running_job(service.factory, bob_id)
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        assert client.get(f"/jobs/{job_id}").json()["state"] == "succeeded"
        assert [j["id"] for j in client.get("/jobs").json()["items"]] == [job_id]
        assert client.get(f"/jobs/{job_id}/best.py").text.endswith("# best\n")
        assert client.get(f"/jobs/{job_id}/problem").json()["bundled_id"] == "level2/conv_tanh_scale_bias_maxpool"
        stream = client.get(f"/jobs/{job_id}/events")
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert "event: attempt" in stream.text and "event: end" in stream.text
        # Bob's job is "not found" for Alice's session, as for her key.
        assert client.get(f"/jobs/{bobs_job}").status_code == 404
        assert client.get(f"/jobs/{bobs_job}/events").status_code == 404
        assert client.get(f"/dashboard/jobs/{bobs_job}").status_code == 404
    with httpx.Client(base_url=service.base_url) as bob:
        login(bob, bob_key)
        assert [j["id"] for j in bob.get("/jobs").json()["items"]] == [bobs_job]


#: Every dashboard page of one job, after ``/dashboard/jobs/{id}``.
JOB_PAGES = ("", "/attempts/1", "/best.html", "/problem", "/compare?n=1&n=2", "/charts.html", "/timings.html")


def test_every_page_of_a_job_answers_another_keys_job_as_a_missing_one(service: Service) -> None:
    bob_id, bob_key = create_key(service.factory, "bob")
    bobs_job = create_running_job(service.factory, bob_id)
    add_attempt(service.factory, bobs_job, verdict(median_ms=2.0))
    add_attempt(service.factory, bobs_job, verdict(median_ms=1.0))
    missing = bobs_job + 1000

    def answer(client: httpx.Client, job_id: int, page: str) -> tuple[int, str]:
        """The status and the page, its job id left out (the two jobs' pages differ only there)."""
        response = client.get(f"/dashboard/jobs/{job_id}{page}")
        return response.status_code, re.sub(rf"\b([Jj]ob) {job_id}\b", r"\1 …", response.text)

    with httpx.Client(base_url=service.base_url) as bob:
        login(bob, bob_key)
        for page in JOB_PAGES:
            assert answer(bob, bobs_job, page)[0] == 200, page
    with httpx.Client(base_url=service.base_url) as alice:
        login(alice, service.key)
        for page in JOB_PAGES:
            refused = answer(alice, bobs_job, page)
            assert refused[0] == 404 and "belongs to another key" in refused[1], page
            assert refused == answer(alice, missing, page), page  # 404, never 403: no job id is revealed


def test_cookie_posts_need_the_csrf_token_headers_do_not(service: Service) -> None:
    first = create_running_job(service.factory, service.key_id)
    second = create_running_job(service.factory, service.key_id)
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        refused = client.post(f"/jobs/{first}/cancel")
        assert refused.status_code == 403 and refused.json()["code"] == "csrf_rejected"
        assert client.post(f"/jobs/{first}/cancel", headers={CSRF_HEADER: "wrong"}).status_code == 403
        accepted = client.post(f"/jobs/{first}/cancel", headers={CSRF_HEADER: _csrf(client)})
        assert accepted.status_code == 202 and accepted.json()["outcome"] == "requested"
    # The header auth is unchanged: no cookie, no token needed.
    by_header = httpx.post(f"{service.base_url}/jobs/{second}/cancel", headers=service.headers())
    assert by_header.status_code == 202
    assert httpx.get(f"{service.base_url}/jobs").json()["code"] == "missing_api_key"


def test_a_header_wins_over_the_cookie_and_revoking_the_key_ends_the_session(service: Service) -> None:
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        wrong = client.get("/jobs", headers={"X-API-Key": "kl_wrong"})
        assert wrong.status_code == 401 and wrong.json()["code"] == "invalid_api_key"
        with session_scope(service.factory) as session:
            revoke_api_key(session=session, api_key_id=service.key_id)
        assert client.get("/jobs").status_code == 401
        assert client.get("/dashboard").status_code == 303


def test_logout_needs_the_token_and_clears_the_cookie(service: Service) -> None:
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        assert client.post("/logout", data={"csrf_token": "nope"}).status_code == 403
        assert client.get("/dashboard").status_code == 200
        response = client.post("/logout", data={"csrf_token": _csrf(client)})
        assert response.status_code == 303 and response.headers["location"] == "/login"
        assert client.get("/dashboard").status_code == 303


def test_pages_escape_what_jobs_store(service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, job_id, verdict(Status.FAIL, message="<script>alert(1)</script>"))
    finish(service.factory, job_id, JobState.FAILED, error="<img src=x onerror=alert(2)>")
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        page = client.get(f"/dashboard/jobs/{job_id}").text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<img src=x" not in page and "&lt;img src=x" in page


def test_a_configured_secret_is_shared_by_api_processes_a_generated_one_is_not(tmp_path: Path) -> None:
    url, factory = migrated_factory(tmp_path)
    _, key = create_key(factory)

    def app(secret: str | None) -> TestClient:
        settings = Settings(_env_file=None, database_url=url, data_dir=tmp_path, session_secret=secret)  # type: ignore[call-arg]
        return TestClient(create_app(settings, dispatcher=NullDispatcher()), follow_redirects=False)

    def signed_in(client: TestClient) -> str:
        assert login(client, key).status_code == 303
        return str(client.cookies[COOKIE_NAME])

    def reads_jobs(client: TestClient, cookie: str) -> int:
        client.cookies.set(COOKIE_NAME, cookie)
        return client.get("/jobs").status_code

    with app("shared secret") as one, app("shared secret") as two, app(None) as three, app(None) as four:
        assert reads_jobs(two, signed_in(one)) == 200
        generated = signed_in(three)
        assert reads_jobs(four, generated) == 401
        assert reads_jobs(three, generated) == 200
    factory.kw["bind"].dispose()
