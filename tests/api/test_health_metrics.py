"""``/health`` (database and broker) and ``/metrics`` (Prometheus text)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from tests.support.api import REDIS_URL, Key, RecordingDispatcher, job_body, make_settings
from tests.support.network import free_port


def test_health_embedded(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    health = response.json()
    assert health["status"] == "ok" and health["mode"] == "embedded" and health["broker"] is None
    assert health["database"]["ok"] is True and health["database"]["latency_ms"] >= 0


def test_health_distributed(db_url: str, tmp_path, dispatcher: RecordingDispatcher) -> None:
    settings = make_settings(db_url, tmp_path, broker_url=REDIS_URL)
    with TestClient(create_app(settings, dispatcher=dispatcher)) as client:
        response = client.get("/health")
    assert response.status_code == 200, response.text
    assert response.json()["mode"] == "distributed" and response.json()["broker"]["ok"] is True


def test_health_is_503_when_the_broker_is_down(db_url: str, tmp_path, dispatcher: RecordingDispatcher) -> None:
    settings = make_settings(db_url, tmp_path, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(create_app(settings, dispatcher=dispatcher)) as client:
        response = client.get("/health")
    assert response.status_code == 503
    health = response.json()
    assert health["status"] == "unavailable" and health["database"]["ok"] is True
    assert health["broker"] == {"ok": False, "latency_ms": None, "error": "ConnectionError"}


def test_health_is_503_when_the_database_is_down(tmp_path, dispatcher: RecordingDispatcher) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=1"
    with TestClient(create_app(make_settings(url, tmp_path), dispatcher=dispatcher)) as client:
        response = client.get("/health")
    assert response.status_code == 503
    assert response.json()["database"]["ok"] is False


def test_metrics_parse_as_prometheus_text(client: TestClient, alice: Key) -> None:
    job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    client.post(f"/jobs/{job_id}/cancel", headers=alice.headers)
    second_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    # Ids are not reset between tests (SQLite's AUTOINCREMENT), so a fixed id may be this test's job.
    client.get(f"/jobs/{second_id + 1000}", headers=alice.headers)
    client.get("/no/such/route")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name: f for f in text_string_to_metric_families(response.text)}

    def sample(family: str, suffix: str = "", **labels: str) -> float:
        found = [
            s.value for s in families[family].samples
            if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        assert len(found) == 1, (family, labels, families[family].samples)
        return found[0]

    assert families["kernelloop_jobs"].type == "gauge"
    assert sample("kernelloop_jobs", state="queued") == 1
    assert sample("kernelloop_jobs", state="cancelled") == 1
    assert sample("kernelloop_jobs", state="running") == 0
    assert sample("kernelloop_attempts", status="pass") == 0
    assert sample("kernelloop_job_events") == 3  # queued, cancelled; queued
    assert families["kernelloop_http_requests"].type == "counter"
    assert sample("kernelloop_http_requests", "_total", method="POST", route="/jobs", status="202") == 2
    assert sample("kernelloop_http_requests", "_total", method="GET", route="/jobs/{job_id}", status="404") == 1
    assert sample("kernelloop_http_requests", "_total", method="GET", route="unmatched", status="404") == 1
    histogram = families["kernelloop_http_request_duration_seconds"]
    assert histogram.type == "histogram"
    count = sample("kernelloop_http_request_duration_seconds", "_count", method="POST", route="/jobs")
    inf = sample("kernelloop_http_request_duration_seconds", "_bucket", method="POST", route="/jobs", le="+Inf")
    assert count == inf == 2
    assert sample("kernelloop_sse_streams") == 0


def test_metrics_speak_openmetrics_to_a_scraper_that_asks(client: TestClient, alice: Key) -> None:
    client.post("/jobs", json=job_body(), headers=alice.headers)
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(response.text)}
    assert families["kernelloop_http_requests"].type == "counter"
    [created] = [s for s in families["kernelloop_http_requests"].samples
                 if s.name == "kernelloop_http_requests_total" and s.labels["route"] == "/jobs"]
    assert created.value == 1 and families["kernelloop_jobs"].type == "gauge"
