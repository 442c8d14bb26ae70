"""``/models``: a model run's jobs created and announced, its checks, its owner, its quotas."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import Key, Keys, RecordingDispatcher
from tests.support.models import example, fake_profile


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "mlp_stack.py", "model_source": example("mlp_stack").source,
                            "profile": fake_profile(), "llm_profile": "scripted", "budgets": {"tool_calls": 40}}
    body.update(changes)
    return body


def test_a_model_run_queues_the_default_selection_with_budgets_split_by_share(
        client: TestClient, alice: Key, dispatcher: RecordingDispatcher) -> None:
    response = client.post("/models", json=_body(), headers=alice.headers)
    assert response.status_code == 202, response.text
    run = response.json()
    assert response.headers["Location"] == f"/models/{run['id']}"
    # 0.5 + 0.3 cover 80 % of the time: two regions, the largest first.
    assert [r["name"] for r in run["regions"]] == ["r2_linear_gelu", "r3_linear_add"]
    assert run["state"] == "running" and run["coverage"] == 0.8 and run["report"] is None
    assert [c[0] for c in dispatcher.calls] == [r["job_id"] for r in run["regions"]]
    jobs = [client.get(f"/jobs/{r['job_id']}", headers=alice.headers).json() for r in run["regions"]]
    assert [j["problem"]["bundled_id"] for j in jobs] == [None, None]
    assert jobs[0]["budgets"]["tool_calls"] > jobs[1]["budgets"]["tool_calls"]
    assert client.get(f"/models/{run['id']}", headers=alice.headers).json()["regions"][0]["job_state"] == "queued"


def test_regions_and_top_choose_and_an_unknown_region_is_named(client: TestClient, alice: Key) -> None:
    top = client.post("/models", json=_body(top=1), headers=alice.headers).json()
    assert [r["name"] for r in top["regions"]] == ["r2_linear_gelu"]
    chosen = client.post("/models", json=_body(regions=["r1_layer_norm"]), headers=alice.headers).json()
    assert [r["name"] for r in chosen["regions"]] == ["r1_layer_norm"]
    wrong = client.post("/models", json=_body(regions=["r9_nothing"]), headers=alice.headers)
    assert wrong.status_code == 422 and wrong.json()["code"] == "unknown_region"
    assert "r1_layer_norm, r2_linear_gelu, r3_linear_add" in wrong.json()["detail"]


def test_bad_models_and_profiles_are_refused_before_anything_is_stored(client: TestClient, alice: Key) -> None:
    not_a_model = client.post("/models", json=_body(model_source="x = 1\n"), headers=alice.headers)
    assert not_a_model.status_code == 422 and not_a_model.json()["code"] == "invalid_model"
    elsewhere = client.post("/models", json=_body(target="cuda"), headers=alice.headers)
    assert elsewhere.status_code == 422 and "profile the model on the run's target" in elsewhere.json()["detail"]
    broken = client.post("/models", json=_body(profile={"model": "x"}), headers=alice.headers)
    assert broken.status_code == 422 and broken.json()["code"] == "invalid_profile"
    unscripted = client.post("/models", json=_body(name="other.py"), headers=alice.headers)
    assert unscripted.status_code == 422 and unscripted.json()["code"] == "no_script"
    assert client.get("/models", headers=alice.headers).json()["total"] == 0


def test_a_run_is_its_keys_and_counts_against_its_quotas(client: TestClient, alice: Key, keys: Keys) -> None:
    run = client.post("/models", json=_body(), headers=alice.headers).json()
    bob = keys.create("bob", max_concurrent_jobs=1)
    assert client.get(f"/models/{run['id']}", headers=bob.headers).status_code == 404
    full = client.post("/models", json=_body(), headers=bob.headers)
    assert full.status_code == 429 and "needs 2 jobs at once" in full.json()["detail"]
    assert full.json()["quota"]["name"] == "max_concurrent_jobs"
    cancelled = client.post(f"/models/{run['id']}/cancel", headers=alice.headers).json()
    assert cancelled["state"] == "cancelled" and {r["job_state"] for r in cancelled["regions"]} == {"cancelled"}
