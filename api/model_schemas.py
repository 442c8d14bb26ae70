"""The JSON of ``/models``: a model run's request and its public form."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import BestSummary, BudgetsInput
from problems import MAX_SOURCE_BYTES
from store import JsonField, ModelRun, RegionJob
from vocabulary.evaluation import Target
from vocabulary.regionplan import ModelProfile, amdahl

__all__ = ["ModelRegionPublic", "ModelRunCreate", "ModelRunPublic"]

#: A model's profile carries each region's problem source: up to this many bytes of JSON.
MAX_PROFILE_BYTES = 4 * 1024 * 1024
MAX_REGIONS = 64


class ModelRunCreate(BaseModel):
    """A model run: one agent job per selected region of a profiled model."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="The model file's name (`resnet_block.py`).")
    model_source: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES,
                              description="The model file's source (problem format). Checked statically, never run "
                              "by the API.")
    profile: dict[str, JsonField] = Field(
        description="Its profile on the run's target: `kernelloop model profile --json` or `model.json` of "
        "`kernelloop model extract` with the regions' sources (`ModelProfile`).")
    target: Target | None = Field(default=None, description="Default: the profile's target.")
    regions: list[str] | None = Field(default=None, max_length=MAX_REGIONS,
                                      description="Regions to optimise (default: the largest until `coverage`).")
    top: int | None = Field(default=None, ge=1, le=MAX_REGIONS, description="The `top` largest regions.")
    coverage: float = Field(default=0.8, gt=0, le=1, description="The default selection's share of the time.")
    llm_profile: str | None = Field(default=None, min_length=1, max_length=64)
    budgets: BudgetsInput = Field(
        default=BudgetsInput(),
        description="The whole run's budgets: tool calls, tokens, cost and wall clock are split among the regions "
        "by share (each at least enough to compile, check, time and submit); turns bound each trajectory.")
    trajectories: int | None = Field(default=None, ge=1, le=16)


class ModelRegionPublic(BaseModel):
    name: str
    share: float
    ops: list[str]
    kind: str
    lone_vendor_call: bool
    instances: int
    job_id: int | None
    job_state: str | None
    job: dict[str, Any] | None = Field(description="The region's job: its state and best attempt (`best`).")


class ModelRunPublic(BaseModel):
    id: int
    name: str
    state: str
    target: str
    llm_profile: str | None
    model_sha256: str
    created_at: datetime
    finished_at: datetime | None
    error: str | None
    model_ms: float
    compile_ms: float | None
    coverage: float
    regions: list[ModelRegionPublic]
    predicted_speedup: float | None = Field(
        description="What the regions' best speedups so far predict for the whole model (Amdahl).")
    report: dict[str, JsonField] | None = Field(description="The whole patched model's report once verified.")
    profile: dict[str, JsonField]
    links: dict[str, str]

    @classmethod
    def from_run(cls, run: ModelRun, regions: list[RegionJob]) -> ModelRunPublic:
        profile = ModelProfile.from_dict(run.profile)
        by_name = {r.name: r for r in profile.regions}
        public: list[ModelRegionPublic] = []
        speedups: dict[str, float] = {}
        for item in regions:
            region = by_name.get(item.region.name)
            job = item.job
            best = job.best_attempt if job is not None else None
            if best is not None and best.speedup_vs_eager:
                speedups[item.region.name] = best.speedup_vs_eager
            public.append(ModelRegionPublic(
                name=item.region.name, share=item.region.share, ops=list(region.ops) if region else [],
                kind=region.kind if region else "", lone_vendor_call=bool(region and region.lone_vendor_call),
                instances=len(region.instances) if region else 0, job_id=job.id if job else None,
                job_state=job.state.value if job else None,
                job={"id": job.id, "state": job.state.value, "attempts": job.attempts_count,
                     "best": BestSummary.from_attempt(best).model_dump(mode="json") if best is not None else None,
                     "links": {"self": f"/jobs/{job.id}", "dashboard": f"/dashboard/jobs/{job.id}"}}
                if job is not None else None))
        return cls(
            id=run.id, name=run.name, state=run.state.value, target=run.target.value, llm_profile=run.llm_profile,
            model_sha256=run.model_sha256, created_at=run.created_at, finished_at=run.finished_at, error=run.error,
            model_ms=profile.model_ms, compile_ms=profile.compile_ms,
            coverage=profile.coverage(r.region.name for r in regions), regions=public,
            predicted_speedup=amdahl(profile, speedups) if speedups else None,
            report=dict(run.report) if run.report is not None else None, profile=dict(run.profile),
            links={"self": f"/models/{run.id}", "dashboard": f"/dashboard/models/{run.id}"})
