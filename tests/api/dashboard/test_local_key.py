"""Whose job is it (issue 24, item 6): the README's client flow on `kernelloop up`'s data directory,
then the dashboard signed in with the local key, as the banner says.

On the machine's own database (SQLite in the data directory) the local key is the owner's: an
admin that sees every job, those of keys made with ``keys create`` too. Keys stay confined to
their own jobs, and with a configured database (a deployment) the local key is a plain key. The
sign-in page, opened on that machine, says where the local key is; failed jobs say why in the list.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api import NullDispatcher, create_app
from cli.keys import ensure_local_key
from config import Settings
from store import JobState, create_api_key, make_engine, make_session_factory, session_scope, set_api_key_admin
from tests.support.api import serve
from tests.support.dashboard import add_attempt, create_running_job, finish, login, verdict
from vocabulary.verdict import Status

pytestmark = pytest.mark.timeout(120)


def _up_settings(data: Path, **overrides: object) -> Settings:
    return Settings(_env_file=None, data_dir=data, **overrides)  # type: ignore[arg-type]


@contextmanager
def _dashboard(settings: Settings) -> Iterator[str]:
    with serve(create_app(settings, dispatcher=NullDispatcher())) as base:
        yield base


def _keys_create(settings: Settings, name: str) -> tuple[int, str]:
    """What `kernelloop keys create --name NAME` makes: a plain key."""
    engine = make_engine(settings.resolved_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            issued = create_api_key(session=session, name=name, owner=name)
            return issued.key.id, issued.plaintext
    finally:
        engine.dispose()


def test_the_local_key_sees_a_job_submitted_with_another_key(tmp_path: Path) -> None:
    settings = _up_settings(tmp_path / "data")
    local = ensure_local_key(settings)  # what `kernelloop up` does before serving
    me_id, _ = _keys_create(settings, "me")
    other_id, other_key = _keys_create(settings, "someone-else")
    factory = make_session_factory(make_engine(settings.resolved_database_url))
    submitted = create_running_job(factory, me_id, problem="level1/softmax")  # `kernelloop submit`, with me's key
    add_attempt(factory, submitted, verdict(Status.FAIL))
    finish(factory, submitted, JobState.FAILED, error="no verified kernel: 1 attempt, none passed the checks")
    with _dashboard(settings) as base:
        with httpx.Client(base_url=base) as browser:
            form = browser.get("/login")
            assert f'<pre class="command">cat {local.path}</pre>' in form.text  # the sign-in page says which key
            assert "sees every job, those submitted with other keys too" in " ".join(form.text.split())
            assert login(browser, local.plaintext, f"/dashboard/jobs/{submitted}").status_code == 303
            page = browser.get(f"/dashboard/jobs/{submitted}")
            assert page.status_code == 200, page.text
            assert "does not exist, or belongs to another key" not in page.text
            listed = browser.get("/dashboard").text
            assert f'data-job-id="{submitted}"' in listed and "admin: every key&#39;s jobs" in listed
            # The failed job says why in the list.
            assert "no verified kernel: 1 attempt, none passed the checks" in listed
        with httpx.Client(base_url=base) as browser:  # another key: still confined to its own jobs
            login(browser, other_key, "/dashboard")
            refused = browser.get(f"/dashboard/jobs/{submitted}")
            assert refused.status_code == 404 and "an admin key sees every job" in refused.text
            assert f'data-job-id="{submitted}"' not in browser.get("/dashboard").text
    assert other_id != me_id
    factory.kw["bind"].dispose()


def test_a_plain_local_key_of_an_earlier_version_becomes_the_owners(tmp_path: Path) -> None:
    settings = _up_settings(tmp_path / "data")
    first = ensure_local_key(settings)
    engine = make_engine(settings.resolved_database_url)
    with session_scope(make_session_factory(engine)) as session:
        set_api_key_admin(session=session, api_key_id=first.key_id, is_admin=False)  # as versions before made it
    again = ensure_local_key(settings)
    assert (again.key_id, again.created) == (first.key_id, False)
    with session_scope(make_session_factory(engine)) as session:
        from store import ApiKey

        assert session.get(ApiKey, first.key_id).is_admin  # type: ignore[union-attr]
    engine.dispose()


def test_with_a_database_server_the_local_key_stays_a_plain_key(tmp_path: Path, fresh_postgres_url: str) -> None:
    """A shared database (a deployment's PostgreSQL): the local key of whoever runs `optimize`
    against it sees its own jobs only, and the sign-in page does not call it the owner's."""
    settings = _up_settings(tmp_path / "data", database_url=fresh_postgres_url)
    local = ensure_local_key(settings)
    me_id, _ = _keys_create(settings, "me")
    factory = make_session_factory(make_engine(settings.resolved_database_url))
    submitted = create_running_job(factory, me_id, problem="level1/softmax")
    with _dashboard(settings) as base, httpx.Client(base_url=base) as browser:
        form = " ".join(browser.get("/login").text.split())
        assert f"cat {local.path}" in form and "sees every job, those submitted" not in form
        login(browser, local.plaintext, "/dashboard")
        assert browser.get(f"/dashboard/jobs/{submitted}").status_code == 404
    factory.kw["bind"].dispose()
