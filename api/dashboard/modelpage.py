"""The dashboard's page of a model run: the time breakdown before and after, each region's job,
and the whole-model verdict (figures from `api.model_schemas.ModelRunPublic`)."""

from __future__ import annotations

from dataclasses import dataclass

from api.model_schemas import ModelRunPublic
from vocabulary.modelreport import ApplyReport
from vocabulary.regionplan import ModelProfile

__all__ = ["Bar", "breakdown", "outcomes"]


@dataclass(frozen=True)
class Bar:
    """One region's time in the model before and after its kernel (ms, and % of the longest bar)."""

    name: str
    before_ms: float
    after_ms: float
    before_pct: float
    after_pct: float


def breakdown(run: ModelRunPublic) -> list[Bar]:
    """Every region of the profile, largest first, and the time outside them: before, and after
    (divided by the kept kernel's own speedup: the report's when verified, else the job's best)."""
    profile = ModelProfile.from_dict(run.profile)
    report = ApplyReport.from_dict(run.report) if run.report else None
    speedups: dict[str, float] = {}
    if report is not None:
        speedups = {o.name: o.speedup_vs_eager for o in report.regions if o.included and o.speedup_vs_eager}
    else:
        for region in run.regions:
            best = (region.job or {}).get("best") or {}
            value = best.get("speedup_vs_eager") if isinstance(best, dict) else None
            if isinstance(value, int | float) and value > 0:
                speedups[region.name] = float(value)
    attributed = profile.model_ms * (1 - profile.unattributed_fraction)
    rows = [(r.name, r.share * attributed, r.share * attributed / speedups.get(r.name, 1.0))
            for r in sorted(profile.regions, key=lambda r: r.share, reverse=True)]
    rest = profile.model_ms - attributed
    if rest > 0:
        rows.append(("outside the regions", rest, rest))
    longest = max((before for _, before, _ in rows), default=0.0) or 1.0
    return [Bar(name, before, after, 100 * before / longest, 100 * min(after, longest) / longest)
            for name, before, after in rows]


def outcomes(run: ModelRunPublic) -> dict[str, str]:
    """Each region's place in the verified model: kept, or left out and why."""
    if not run.report:
        return {}
    report = ApplyReport.from_dict(run.report)
    return {o.name: "kept" if o.included else f"left out: {o.reason}" for o in report.regions}
