"""``POST /jobs``, listing, reading, ownership, quotas, cancel and delete, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from api import create_app
from api.deps import VerifiedKeys
from api.dispatch import DispatchError
from config import Settings
from store import (
    ApiKey,
    Job,
    JobEvent,
    JobState,
    StoredProblem,
    Target,
    add_job_usage,
    claim_next_job,
    finish_job,
    get_job,
    session_scope,
)
from tests.support.api import (
    CANDIDATE_SOURCE,
    PROBLEM_SOURCE,
    TEST_STREAM_OPTIONS,
    Key,
    Keys,
    RecordingDispatcher,
    job_body,
    make_settings,
    serve,
)


def post_job(client: TestClient, key: Key, **changes: object) -> dict:
    response = client.post("/jobs", json=job_body(**changes), headers=key.headers)
    assert response.status_code == 202, response.text
    return response.json()


def test_post_job_is_queued_stored_and_dispatched(
    client: TestClient, alice: Key, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    response = client.post(
        "/jobs",
        json=job_body(target="cuda", trajectories=2, budgets={"turns": 5, "max_cost_usd": 1.5}),
        headers=alice.headers,
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/jobs/{job['id']}"
    assert job["state"] == "queued" and job["kind"] == "agent" and job["target"] == "cuda"
    assert job["problem"]["bundled_id"] == "level1/softmax"
    assert job["llm_profile"] == "scripted" and job["trajectories"] == 2
    # Given budgets kept, the rest filled with the server's defaults.
    assert job["budgets"]["turns"] == 5 and job["budgets"]["max_cost_usd"] == 1.5
    assert job["budgets"]["tool_calls"] == 30 and job["budgets"]["target_speedup"] is None
    assert dispatcher.calls == [(job["id"], "cuda")]
    with session_scope(factory) as session:
        stored = get_job(session=session, job_id=job["id"])
        assert stored.owner_id == alice.id and stored.state is JobState.QUEUED
    assert client.get(response.headers["location"], headers=alice.headers).json()["id"] == job["id"]


def test_post_job_with_problem_source(client: TestClient, alice: Key, dispatcher: RecordingDispatcher,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-used")  # the openai profile's key, where the service runs
    job = post_job(client, alice, problem_id=None, problem_source=PROBLEM_SOURCE, target="cpu", llm_profile="openai")
    assert job["problem"]["bundled_id"] is None
    assert dispatcher.calls == [(job["id"], "cpu")]


@pytest.mark.parametrize("default_target", ["cuda", "cpu"])
def test_a_job_without_target_goes_to_the_services_default(
    db_url: str, tmp_path: Path, factory: sessionmaker[Session], default_target: str
) -> None:
    """`kernelloop up` on a machine without a GPU sets ``default_target`` to cpu: a submission that
    names no target must reach its CPU worker, not wait for a GPU one."""
    dispatcher = RecordingDispatcher()
    settings = make_settings(db_url, tmp_path, default_target=default_target)
    alice = Keys(factory).create("alice")
    app = create_app(settings, dispatcher=dispatcher, stream_options=TEST_STREAM_OPTIONS)
    with TestClient(app) as client:
        body = {"problem_id": "level1/softmax"}
        job = client.post("/jobs", headers=alice.headers, json=body).json()
        evaluation = client.post("/evaluations", headers=alice.headers,
                                 json={**body, "candidate_source": CANDIDATE_SOURCE}).json()
    assert job["target"] == evaluation["target"] == default_target
    assert dispatcher.calls == [(job["id"], default_target), (evaluation["id"], default_target)]


BAD_JOB_INPUTS = [
    pytest.param(
        {"problem_id": None, "problem_source": "class Model(:\n    pass\n"},
        "invalid_problem",
        "syntax error at line 1",
        id="malformed-source",
    ),
    pytest.param(
        {"problem_id": None, "problem_source": "def get_inputs():\n    return []\n"},
        "invalid_problem",
        "lacks Model and get_init_inputs at module level",
        id="missing-model",
    ),
    pytest.param(
        {"problem_id": None, "problem_source": PROBLEM_SOURCE + "\nMODE = 'inference'\n"},
        "invalid_problem",
        "MODE is 'train' or 'eval'",
        id="bad-declaration",
    ),
    pytest.param({"problem_id": "level9/nope"}, "unknown_problem", "GET /problems", id="unknown-problem-id"),
    pytest.param({"problem_id": "softmax"}, "unknown_problem", "did you mean level1/softmax", id="near-problem-id"),
    pytest.param({"problem_id": "/etc/passwd"}, "unknown_problem", "no bundled problem", id="path-is-not-an-id"),
    pytest.param({"problem_id": None}, "invalid_request", "exactly one of problem_id", id="no-problem"),
    pytest.param(
        {"problem_source": PROBLEM_SOURCE}, "invalid_request", "exactly one of problem_id", id="two-problems"
    ),
    pytest.param(
        {"llm_profile": "gpt-9"}, "unknown_llm_profile", "choose one of: openai, scripted", id="unknown-profile"
    ),
    pytest.param(
        {"trajectories": 17},
        "invalid_request",
        "trajectories: Input should be less than or equal to 16",
        id="too-many-trajectories",
    ),
    pytest.param({"trajectories": 0}, "invalid_request", "trajectories", id="no-trajectories"),
    # The scripted LLM is refused up front where it has no script, naming the problems it has.
    pytest.param({"problem_id": "level3/mlp", "llm_profile": "scripted"}, "no_script",
                 "no script for level3/mlp on cpu; it has scripts for level1/argmax", id="no-script"),
    pytest.param({"problem_id": None, "problem_source": PROBLEM_SOURCE}, "no_script",
                 "no script for a posted problem", id="posted-problem-under-scripted"),
    pytest.param({"budgets": {"turns": 0}}, "invalid_request", "budgets.turns", id="zero-turns"),
    pytest.param({"budgets": {"wall_clock_s": 1e9}}, "invalid_request", "budgets.wall_clock_s", id="week-long"),
    pytest.param({"target": "tpu"}, "invalid_request", "target: Input should be 'cuda' or 'cpu'", id="bad-target"),
    pytest.param({"api_key": "sk-..."}, "invalid_request", "api_key: Extra inputs are not permitted", id="key-in-body"),
]


@pytest.mark.parametrize(("changes", "code", "message"), BAD_JOB_INPUTS)
def test_bad_job_input_is_a_422_that_says_what_to_fix(
    client: TestClient, alice: Key, dispatcher: RecordingDispatcher, changes: dict, code: str, message: str
) -> None:
    body = {k: v for k, v in job_body(**changes).items() if v is not None}
    response = client.post("/jobs", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["code"] == code
    assert message in error["detail"]
    assert dispatcher.calls == []


def test_a_profile_whose_key_is_not_set_is_refused_before_a_job_exists(
    client: TestClient, alice: Key, dispatcher: RecordingDispatcher, factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--llm openai` on a service without OPENAI_API_KEY: a 422 that names the variable, rather than
    a job that fails after five 401s."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    response = client.post("/jobs", json=job_body(llm_profile="openai"), headers=alice.headers)
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["code"] == "llm_key_missing"
    assert "the LLM profile 'openai' needs an API key in $OPENAI_API_KEY" in error["detail"]
    assert "`export OPENAI_API_KEY=…`" in error["detail"] and "restart the service" in error["detail"]
    assert dispatcher.calls == []
    with session_scope(factory) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-used")
    assert client.post("/jobs", json=job_body(llm_profile="openai"), headers=alice.headers).status_code == 202


def test_malformed_json_is_a_422(client: TestClient, alice: Key) -> None:
    response = client.post(
        "/jobs", content=b'{"problem_id": ', headers={**alice.headers, "content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_request"


def test_oversized_body_is_a_413(
    client: TestClient, alice: Key, settings: Settings, dispatcher: RecordingDispatcher
) -> None:
    big = "x" * (settings.max_body_bytes + 1)
    response = client.post("/jobs", json=job_body(problem_id=None, problem_source=big), headers=alice.headers)
    assert response.status_code == 413
    assert response.json() == {
        "detail": f"request body larger than {settings.max_body_bytes} bytes; send a smaller problem or candidate "
        "source",
        "code": "body_too_large",
    }

    def chunks():  # no Content-Length: the limit counts the bytes as they arrive
        yield b'{"problem_source": "'
        for _ in range(settings.max_body_bytes // 4096 + 1):
            yield b"x" * 4096
        yield b'"}'

    response = client.post("/jobs", content=chunks(), headers={**alice.headers, "content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"
    assert dispatcher.calls == []


def test_missing_invalid_and_revoked_keys_are_401(client: TestClient, keys: Keys) -> None:
    response = client.post("/jobs", json=job_body())
    assert response.status_code == 401
    assert response.json()["code"] == "missing_api_key"
    assert "X-API-Key" in response.json()["detail"]
    response = client.get("/jobs", headers={"X-API-Key": "kl_not-a-key"})
    assert response.status_code == 401 and response.json()["code"] == "invalid_api_key"
    key = keys.create("soon-revoked")
    assert client.get("/jobs", headers=key.headers).status_code == 200
    keys.revoke(key)
    # The API remembers a verified key for a moment (Settings.api_key_cache_s), but a submission
    # re-reads the key under its quota lock: a revoked key never creates a job.
    response = client.post("/jobs", json=job_body(), headers=key.headers)
    assert response.status_code == 401 and response.json()["code"] == "invalid_api_key"
    client.app.state.verified_keys = VerifiedKeys(0.0)  # the cache's time is up
    response = client.get("/jobs", headers=key.headers)
    assert response.status_code == 401 and response.json()["code"] == "invalid_api_key"


def test_a_key_may_come_as_a_bearer_token(client: TestClient, keys: Keys, alice: Key) -> None:
    """Issue 24: ``Authorization: Bearer`` (what most HTTP clients send) was refused."""
    bearer = {"Authorization": f"Bearer {alice.plaintext}"}
    job = client.post("/jobs", json=job_body(), headers=bearer)
    assert job.status_code == 202, job.text
    assert client.get(f"/jobs/{job.json()['id']}", headers=bearer).status_code == 200
    other = keys.create("other")
    # X-API-Key wins over a bearer token: the other key does not see alice's job.
    both = {**bearer, "X-API-Key": other.plaintext}
    assert client.get(f"/jobs/{job.json()['id']}", headers=both).status_code == 404
    refused = client.get("/jobs", headers={"Authorization": "Bearer kl_not-a-key"})
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_api_key"
    missing = client.get("/jobs", headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert missing.status_code == 401 and "Authorization: Bearer" in missing.json()["detail"]


def test_a_verified_key_is_remembered_briefly() -> None:
    cache = VerifiedKeys(ttl_s=0.2)
    key = ApiKey(id=1, name="k", owner="o", key_prefix="kl_x", key_hash="d")
    cache.put("d", key)
    assert cache.get("d") is key and cache.get("other") is None
    time.sleep(0.25)
    assert cache.get("d") is None
    VerifiedKeys(ttl_s=0).put("d", key)


def test_another_keys_job_is_404_and_admins_see_everything(client: TestClient, keys: Keys, alice: Key) -> None:
    bob = keys.create("bob")
    admin = keys.create("root", is_admin=True)
    job = post_job(client, alice)
    for path in (f"/jobs/{job['id']}", f"/jobs/{job['id']}/attempts", f"/jobs/{job['id']}/best",
                 f"/jobs/{job['id']}/messages", f"/jobs/{job['id']}/events"):
        response = client.get(path, headers=bob.headers)
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"
    assert client.post(f"/jobs/{job['id']}/cancel", headers=bob.headers).status_code == 404
    assert client.delete(f"/jobs/{job['id']}", headers=bob.headers).status_code == 404
    # A missing job and someone else's job answer alike: no existence leak.
    missing = client.get("/jobs/999999", headers=bob.headers).json()
    hidden = client.get(f"/jobs/{job['id']}", headers=bob.headers).json()
    assert (missing["code"], hidden["detail"]) == ("not_found", f"job {job['id']} not found")
    assert client.get("/jobs", headers=bob.headers).json()["total"] == 0
    assert client.get(f"/jobs/{job['id']}", headers=admin.headers).status_code == 200
    bobs = post_job(client, bob)
    assert {j["id"] for j in client.get("/jobs", headers=admin.headers).json()["items"]} == {job["id"], bobs["id"]}


def test_a_submission_says_where_its_time_went_in_server_timing(client: TestClient, alice: Key) -> None:
    response = client.post("/jobs", json=job_body(), headers=alice.headers)
    assert response.status_code == 202
    phases = {}
    for entry in response.headers["server-timing"].split(", "):
        name, _, duration = entry.partition(";dur=")
        phases[name] = float(duration)
    assert list(phases) == ["app", "queue", "store", "locks", "announce"]
    assert all(value >= 0 for value in phases.values())
    assert phases["locks"] <= phases["store"] and phases["queue"] + phases["store"] <= phases["app"]
    # Every answer has the app's own time.
    assert client.get("/health").headers["server-timing"].startswith("app;dur=")


def test_concurrency_quota(client: TestClient, keys: Keys, dispatcher: RecordingDispatcher) -> None:
    key = keys.create("one-at-a-time", max_concurrent_jobs=1)
    first = post_job(client, key)
    response = client.post("/jobs", json=job_body(), headers=key.headers)
    assert response.status_code == 429
    assert response.json()["code"] == "quota_exceeded"
    assert "1 jobs queued or running, its limit is 1" in response.json()["detail"]
    # Which quota, for clients that schedule around it (`kernelloop bench`).
    assert response.json()["quota"] == {"name": "max_concurrent_jobs", "limit": 1, "used": 1}
    assert client.post("/evaluations", json={**job_body(), "candidate_source": "class ModelNew: pass"},
                       headers=key.headers).status_code == 429
    assert client.post(f"/jobs/{first['id']}/cancel", headers=key.headers).status_code == 200
    post_job(client, key)  # the slot is free again
    assert len(dispatcher.calls) == 2


def test_concurrent_submissions_of_one_key_cannot_overshoot_its_quota(
    settings: Settings, keys: Keys, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    """Twelve submissions at once over real HTTP (the server runs them on parallel threads): the key
    has room for three, and exactly three get in (`store.key_usage` locks the key)."""
    key = keys.create("burst", max_concurrent_jobs=3)

    async def burst(base: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base, headers=key.headers, timeout=30) as client:
            responses = await asyncio.gather(*(client.post("/jobs", json=job_body()) for _ in range(12)))
        return sorted(r.status_code for r in responses)

    with serve(create_app(settings, dispatcher=dispatcher, stream_options=TEST_STREAM_OPTIONS)) as base:
        assert asyncio.run(burst(base)) == [202] * 3 + [429] * 9
    assert len(dispatcher.calls) == 3
    with session_scope(factory) as session:
        assert sum(1 for _ in session.scalars(select(Job.id).where(Job.owner_id == key.id))) == 3


def test_a_burst_from_two_keys_is_grouped_and_each_key_keeps_its_quota(
    settings: Settings, keys: Keys, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    """Submissions that arrive together are stored in shared transactions (`api.submissions`): each
    key still gets exactly its quota, in arrival order, and each job its own first event."""
    one, two = keys.create("one", max_concurrent_jobs=3), keys.create("two", max_concurrent_jobs=4)

    async def burst(base: str) -> list[tuple[str, int]]:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            senders = [one, two] * 10
            responses = await asyncio.gather(*(client.post("/jobs", json=job_body(), headers=k.headers)
                                               for k in senders))
        return sorted((k.id, r.status_code) for k, r in zip(senders, responses, strict=True))

    app = create_app(settings, dispatcher=dispatcher, stream_options=TEST_STREAM_OPTIONS)
    with serve(app) as base:
        codes = asyncio.run(burst(base))
        assert max(app.state.submission_writer.batch_sizes) > 1  # grouped, not one by one
    assert codes == sorted([(one.id, 202)] * 3 + [(one.id, 429)] * 7 + [(two.id, 202)] * 4 + [(two.id, 429)] * 6)
    assert len(dispatcher.calls) == 7
    with session_scope(factory) as session:
        jobs = session.scalars(select(Job).where(Job.owner_id.in_([one.id, two.id]))).all()
        events = session.execute(select(JobEvent.job_id, JobEvent.id, JobEvent.type, JobEvent.payload)).all()
    assert sorted(dispatcher.calls) == sorted((j.id, "cpu") for j in jobs)
    assert all(j.last_event_id == 1 and j.state is JobState.QUEUED for j in jobs)
    assert sorted(events) == sorted((j.id, 1, "state", {"state": "queued"}) for j in jobs)


def test_two_api_processes_bursting_one_key_keep_its_quota_and_store_nothing_refused(
    settings: Settings, keys: Keys, dispatcher: RecordingDispatcher, factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two apps (two writers, as two API processes) store bursts of one key at once: each batch is
    inserted before the key is locked, yet exactly the quota gets in; the refused submissions'
    jobs, events and posted problem sources are not kept."""
    key = keys.create("two-processes", max_concurrent_jobs=5)
    source = PROBLEM_SOURCE + "# posted for this test alone\n"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-used")

    async def burst(bases: list[str]) -> list[int]:
        async with httpx.AsyncClient(headers=key.headers, timeout=30) as client:
            responses = await asyncio.gather(*(
                client.post(f"{bases[i % 2]}/jobs", json={"problem_source": source, "target": "cpu",
                                                         "llm_profile": "openai"})
                for i in range(24)
            ))
        return sorted(r.status_code for r in responses)

    apps = [create_app(settings, dispatcher=dispatcher, stream_options=TEST_STREAM_OPTIONS) for _ in range(2)]
    with serve(apps[0]) as first, serve(apps[1]) as second:
        assert asyncio.run(burst([first, second])) == [202] * 5 + [429] * 19
        # At the quota, a submission of a source never seen before: refused, and the source not kept.
        unseen = PROBLEM_SOURCE + "# refused\n"
        response = httpx.post(f"{first}/jobs", headers=key.headers,
                              json={"problem_source": unseen, "target": "cpu", "llm_profile": "openai"})
        assert response.status_code == 429, response.text
    with session_scope(factory) as session:
        jobs = session.scalars(select(Job.id).where(Job.owner_id == key.id)).all()
        events = session.scalars(select(JobEvent.job_id).where(JobEvent.job_id.in_(jobs))).all()
        sources = session.scalars(select(StoredProblem.source)).all()
        all_events = session.scalar(select(func.count()).select_from(JobEvent))
    assert len(jobs) == 5 and sorted(events) == sorted(jobs) and all_events == 5
    assert sorted(job_id for job_id, _ in dispatcher.calls) == sorted(jobs)
    assert source in sources and unseen not in sources


def test_daily_quota(client: TestClient, keys: Keys) -> None:
    key = keys.create("daily", max_jobs_per_day=2)
    for _ in range(2):
        job = post_job(client, key)
        client.post(f"/jobs/{job['id']}/cancel", headers=key.headers)
    response = client.post("/jobs", json=job_body(), headers=key.headers)
    assert response.status_code == 429
    assert "2 jobs in the last 24 hours, its limit is 2" in response.json()["detail"]
    assert response.json()["quota"] == {"name": "max_jobs_per_day", "limit": 2, "used": 2}


def test_listing_filters_by_state_target_and_problem(client: TestClient, keys: Keys) -> None:
    key = keys.create("lister")
    softmax_cpu = post_job(client, key)
    gelu_cpu = post_job(client, key, problem_id="level1/gelu_tanh")
    softmax_cuda = post_job(client, key, target="cuda")
    client.post(f"/jobs/{gelu_cpu['id']}/cancel", headers=key.headers)

    def ids(**params: str) -> list[int]:
        response = client.get("/jobs", params=params, headers=key.headers)
        assert response.status_code == 200, response.text
        return [j["id"] for j in response.json()["items"]]

    assert ids(target="cpu") == [gelu_cpu["id"], softmax_cpu["id"]]
    assert ids(problem="level1/softmax") == [softmax_cuda["id"], softmax_cpu["id"]]
    assert ids(problem="level1/softmax", target="cuda") == [softmax_cuda["id"]]
    assert ids(state="cancelled", target="cpu") == [gelu_cpu["id"]]
    assert ids(problem="level1/nothing") == []
    assert client.get("/jobs", params={"target": "tpu"}, headers=key.headers).status_code == 422


def test_cost_cap(client: TestClient, keys: Keys, factory: sessionmaker[Session]) -> None:
    key = keys.create("capped", cost_cap_usd=3.0)
    job = post_job(client, key, budgets={"max_cost_usd": 5.0})
    assert job["budgets"]["max_cost_usd"] == 3.0  # a job may spend at most what the key has left
    unbudgeted = post_job(client, key)  # no budgets named: the defaults, still within the cap
    assert unbudgeted["budgets"]["max_cost_usd"] == 3.0 and unbudgeted["budgets"]["turns"] > 0
    with session_scope(factory) as session:
        add_job_usage(session=session, job_id=job["id"], cost_usd=3.25)
    response = client.post("/jobs", json=job_body(), headers=key.headers)
    assert response.status_code == 429
    assert "$3.25 of its $3.00 cap" in response.json()["detail"]
    # Evaluations use no LLM: the cost cap does not stop them.
    response = client.post(
        "/evaluations",
        json={**job_body(), "candidate_source": "class ModelNew:\n    pass\n"},
        headers=key.headers,
    )
    assert response.status_code == 202, response.text


def test_paging_and_state_filter(client: TestClient, alice: Key) -> None:
    ids = [post_job(client, alice)["id"] for _ in range(5)]
    client.post(f"/jobs/{ids[0]}/cancel", headers=alice.headers)
    first = client.get("/jobs?limit=2", headers=alice.headers).json()
    assert [j["id"] for j in first["items"]] == ids[::-1][:2]
    assert first["total"] == 5 and first["next_cursor"] == 2
    second = client.get(f"/jobs?limit=2&offset={first['next_cursor']}", headers=alice.headers).json()
    third = client.get(f"/jobs?limit=2&offset={second['next_cursor']}", headers=alice.headers).json()
    assert [j["id"] for j in second["items"] + third["items"]] == ids[::-1][2:]
    assert third["next_cursor"] is None
    cancelled = client.get("/jobs?state=cancelled", headers=alice.headers).json()
    assert [j["id"] for j in cancelled["items"]] == [ids[0]]
    response = client.get("/jobs?limit=0", headers=alice.headers)
    assert response.status_code == 422 and "limit" in response.json()["detail"]
    assert client.get("/jobs?state=paused", headers=alice.headers).status_code == 422


def test_cancel_semantics(client: TestClient, alice: Key, factory: sessionmaker[Session]) -> None:
    queued = post_job(client, alice)
    response = client.post(f"/jobs/{queued['id']}/cancel", headers=alice.headers)
    assert response.status_code == 200
    assert response.json()["outcome"] == "cancelled" and response.json()["job"]["state"] == "cancelled"
    again = client.post(f"/jobs/{queued['id']}/cancel", headers=alice.headers)
    assert again.status_code == 200 and again.json()["outcome"] == "already_finished"

    running = post_job(client, alice)
    with session_scope(factory) as session:
        claimed = claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=60)
        assert claimed is not None and claimed.id == running["id"]
    response = client.post(f"/jobs/{running['id']}/cancel", headers=alice.headers)
    assert response.status_code == 202
    assert response.json()["outcome"] == "requested"
    assert response.json()["job"]["cancel_requested"] is True
    assert response.json()["job"]["state"] == "running"

    with session_scope(factory) as session:
        finish_job(session=session, job_id=running["id"], worker_id="w1", state=JobState.SUCCEEDED)
    response = client.post(f"/jobs/{running['id']}/cancel", headers=alice.headers)
    assert response.status_code == 409
    assert response.json()["code"] == "illegal_transition"
    assert "already finished" in response.json()["detail"]


def test_delete_semantics(client: TestClient, alice: Key) -> None:
    job = post_job(client, alice)
    response = client.delete(f"/jobs/{job['id']}", headers=alice.headers)
    assert response.status_code == 409
    assert "cancel it first" in response.json()["detail"]
    client.post(f"/jobs/{job['id']}/cancel", headers=alice.headers)
    response = client.delete(f"/jobs/{job['id']}", headers=alice.headers)
    assert response.status_code == 204 and response.content == b""
    assert client.get(f"/jobs/{job['id']}", headers=alice.headers).status_code == 404
    assert client.delete(f"/jobs/{job['id']}", headers=alice.headers).status_code == 404


def test_a_broker_failure_cancels_the_job_and_answers_503(
    settings: Settings, alice: Key, factory: sessionmaker[Session]
) -> None:
    class DownDispatcher:
        def job_created(self, job_id: int, target: str) -> None:
            raise DispatchError("connection refused")

    with TestClient(create_app(settings, dispatcher=DownDispatcher())) as client:
        response = client.post("/jobs", json=job_body(), headers=alice.headers)
        assert response.status_code == 503
        assert response.json()["code"] == "queue_unavailable"
        jobs = client.get("/jobs", headers=alice.headers).json()["items"]
    assert [j["state"] for j in jobs] == ["cancelled"]
    assert "not queued" in jobs[0]["error"]
