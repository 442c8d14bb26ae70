"""The page of a model run (HTML, no browser): the time before and after per region, each region's
job, the whole-model verdict; another key's run is not found."""

from __future__ import annotations

import httpx
import pytest

from store import ModelRunState, NewModelRegion, Target, create_model_run, finish_model_run, session_scope
from tests.support.dashboard import Service, create_key, login, verdict
from tests.support.models import fake_profile
from vocabulary.modelreport import ApplyReport, RegionOutcome
from vocabulary.verdict import Verdict

pytestmark = pytest.mark.timeout(120)


def _run(service: Service, owner_id: int) -> int:
    profile = fake_profile()
    regions = [NewModelRegion(name=str(r["name"]), share=float(r["share"]), source=str(r["source"]),  # type: ignore[index, arg-type]
                              declarations={"id": f"mlp_stack/{r['name']}"}, budgets={})  # type: ignore[index]
               for r in profile["regions"][1:]]  # type: ignore[index]
    report = ApplyReport(
        model="mlp_stack.py", target="cpu",
        regions=(RegionOutcome("r2_linear_gelu", 0.5, True, "", 2.0, 1.5),
                 RegionOutcome("r3_linear_add", 0.3, False, "breaks the whole model: trial 1: max abs error 3.2", 1.1)),
        verdict=Verdict.from_dict(verdict(median_ms=8.0)), predicted_speedup=1.25)
    with session_scope(service.factory) as session:
        run_id = create_model_run(session=session, name="mlp_stack.py", model_source="# m", model_sha256="0" * 64,
                                  target=Target.CPU, profile=profile, regions=regions, owner_id=owner_id).id
        finish_model_run(session=session, run_id=run_id, state=ModelRunState.SUCCEEDED, report=report.to_dict())
    return run_id


def test_a_model_runs_page_shows_the_breakdown_the_jobs_and_the_verdict(service: Service) -> None:
    run_id = _run(service, service.key_id)
    with httpx.Client(base_url=service.base_url, follow_redirects=True) as client:
        login(client, service.key, f"/dashboard/models/{run_id}")
        page = client.get(f"/dashboard/models/{run_id}")
    assert page.status_code == 200
    text = page.text
    assert f"Model run {run_id}: mlp_stack.py" in text and "PASS" in text
    assert "r2_linear_gelu" in text and "r3_linear_add" in text and "outside the regions" in text
    assert "left out: breaks the whole model: trial 1: max abs error 3.2" in text
    assert "1.25×" in text  # the prediction beside the measured figures
    assert text.count('class="bar after"') == 4  # three regions of the profile and the rest
    assert 'href="/dashboard/jobs/' in text


def test_another_keys_model_run_is_not_found(service: Service) -> None:
    other, _ = create_key(service.factory, "bob")
    run_id = _run(service, other)
    with httpx.Client(base_url=service.base_url, follow_redirects=True) as client:
        login(client, service.key, "/dashboard")
        page = client.get(f"/dashboard/models/{run_id}")
    assert page.status_code == 404 and f"Model run {run_id} does not exist" in page.text
