"""``kernelloop model apply --from RUN``: a model run's best kernels read through the API, for the
model file the run profiled only."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from cli.client.modelruns import fetch_run_kernels
from problems import parse_problem
from store import NewModelRegion, Target, create_model_run, region_jobs, session_scope
from tests.support.dashboard import Service, add_attempt, live_service, verdict
from tests.support.models import example, fake_profile

pytestmark = pytest.mark.timeout(120)


def _run(service: Service, model_source: str) -> int:
    profile = fake_profile()
    model = parse_problem(model_source, problem_id="mlp_stack.py")
    regions = [NewModelRegion(name=str(r["name"]), share=float(r["share"]), source=str(r["source"]),  # type: ignore[index, arg-type]
                              declarations={"id": f"mlp_stack/{r['name']}"}, budgets={})  # type: ignore[index]
               for r in profile["regions"][1:]]  # type: ignore[index]
    with session_scope(service.factory) as session:
        run_id = create_model_run(session=session, name="mlp_stack.py", model_source=model.source,
                                  model_sha256=model.sha256, target=Target.CPU, profile=profile, regions=regions,
                                  owner_id=service.key_id).id
        first = region_jobs(session=session, run_id=run_id)[0].job
        assert first is not None
        job_id = first.id
    add_attempt(service.factory, job_id, verdict(median_ms=2.0), source="# the best kernel of r2\n")
    return run_id


def test_the_runs_verified_kernels_come_with_their_verdicts_and_the_runs_profile(tmp_path: Path) -> None:
    model = example("mlp_stack")
    with live_service(tmp_path) as service:
        run_id = _run(service, model.source)
        profile, kernels = fetch_run_kernels(run_id, model, api=service.base_url, key=service.key)
        assert [r.name for r in profile.regions] == ["r1_layer_norm", "r2_linear_gelu", "r3_linear_add"]
        assert list(kernels) == ["r2_linear_gelu"]  # r3's job has no verified kernel yet
        assert kernels["r2_linear_gelu"].source == "# the best kernel of r2\n"
        assert kernels["r2_linear_gelu"].verdict is not None and kernels["r2_linear_gelu"].verdict.is_verified
        edited = parse_problem(model.source + "\n# edited\n", problem_id="mlp_stack.py")
        with pytest.raises(typer.Exit):
            fetch_run_kernels(run_id, edited, api=service.base_url, key=service.key)
