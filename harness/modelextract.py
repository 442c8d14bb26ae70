"""``kernelloop model extract``: a profiled model's regions as problem files, each admitted.

Each region of a `vocabulary.regionplan.ModelProfile` is written as ``<region>.py`` (its source, a
KernelBench-format problem) and run through admission (`harness.admission.admit`, in a
sandbox) on the profile's target, like any problem. Beside them: ``suite.txt`` (the admitted ones,
largest first: the suite format of ``kernelloop bench``, as ``problems import`` writes it) and
``model.json`` (the profile: per region its problem file, share of the model's time, operations,
boundary shapes, instances, the admission's outcome; the model's own time; the default selection).
Driver side, standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.admission import AdmissionReport, admit
from harness.options import HarnessOptions
from problems.spec import Problem, parse_problem
from vocabulary.evaluation import Target
from vocabulary.regionplan import DEFAULT_COVERAGE, ModelProfile, Region, select_regions
from vocabulary.wire import JsonObject, Reader, WireError

__all__ = [
    "MODEL_JSON",
    "SUITE_FILE",
    "ExtractedRegion",
    "Extraction",
    "extract_regions",
    "read_model_json",
    "region_problem",
]

MODEL_JSON = "model.json"
SUITE_FILE = "suite.txt"


@dataclass(frozen=True)
class ExtractedRegion:
    name: str
    problem: str
    admitted: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "problem": self.problem, "admitted": self.admitted, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Extraction:
    """What ``extract`` wrote: the profile, the default selection and each region's admission."""

    out_dir: Path
    profile: ModelProfile
    selected: tuple[str, ...]
    regions: tuple[ExtractedRegion, ...]

    @property
    def admitted(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.regions if r.admitted)


def region_problem(region: Region, model_id: str) -> Problem:
    """A region's problem, with the id a job shows (``<model>/<region>``)."""
    return parse_problem(region.source, problem_id=f"{model_id.removesuffix('.py')}/{region.name}")


def model_json(profile: ModelProfile, *, model_file: str, selected: Sequence[str],
               admissions: Sequence[ExtractedRegion] = ()) -> JsonObject:
    """``model.json``'s content: the profile without the regions' sources (they are the problem
    files beside it), with each region's admission, the selection and its coverage."""
    outcomes = {a.name: a for a in admissions}
    data = profile.to_dict()
    regions = []
    for region in data["regions"]:  # type: ignore[union-attr]
        entry = dict(region)  # type: ignore[arg-type]
        entry.pop("source", None)
        outcome = outcomes.get(str(entry["name"]))
        if outcome is not None:
            entry["admitted"], entry["reasons"] = outcome.admitted, list(outcome.reasons)
        regions.append(entry)
    data["regions"] = regions
    data["model_file"] = model_file
    data["selected"] = list(selected)
    data["coverage"] = profile.coverage(selected)
    return data


def read_model_json(path: Path) -> tuple[ModelProfile, tuple[str, ...]]:
    """The profile and selection of an ``extract`` folder's ``model.json`` (the regions' sources
    read back from their problem files beside it).

    Raises:
        ValueError: the file is missing, not JSON, or not a model.json (the message says which).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    try:
        regions = []
        for item in Reader(data, str(path)).items("regions"):
            entry = dict(item) if isinstance(item, dict) else {}
            problem = path.parent / str(entry.get("problem", f"{entry.get('name')}.py"))
            if problem.is_file():
                entry["source"] = problem.read_text()
            regions.append(entry)
        profile = ModelProfile.from_dict({**data, "regions": regions})
        selected = tuple(Reader(data, str(path)).texts("selected", optional=True))
    except WireError as exc:
        raise ValueError(f"{path} is not a model.json written by `kernelloop model extract`: {exc}") from None
    return profile, selected


def extract_regions(profile: ModelProfile, out_dir: Path, *, model_file: str, options: HarnessOptions | None = None,
                    coverage: float = DEFAULT_COVERAGE,
                    on_region: Callable[[ExtractedRegion], None] | None = None) -> Extraction:
    """Write every region of ``profile`` into ``out_dir`` and admit each on the profile's target.

    Args:
        profile: the model's profile.
        out_dir: created if missing; the problem files, ``suite.txt`` and ``model.json`` go there.
        model_file: the model file's name (recorded in ``model.json``).
        options: the harness options of the admission sandboxes.
        coverage: the default selection's share of the model's time.
        on_region: told of each region once admitted or refused.
    """
    options = options or HarnessOptions()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = Target(profile.target)
    outcomes: list[ExtractedRegion] = []
    for region in sorted(profile.regions, key=lambda r: r.share, reverse=True):
        (out_dir / region.problem_file).write_text(region.source)
        report: AdmissionReport = admit(region_problem(region, profile.model), target, options)
        outcome = ExtractedRegion(region.name, region.problem_file, report.admitted, tuple(report.reasons))
        outcomes.append(outcome)
        if on_region is not None:
            on_region(outcome)
    selected = tuple(r.name for r in select_regions(profile, coverage=coverage))
    admitted = [o.problem for o in outcomes if o.admitted]
    (out_dir / SUITE_FILE).write_text(
        f"# {len(admitted)} regions of {model_file} admitted on the {target.value} target by "
        f"`kernelloop model extract`, largest first\n" + "".join(f"{name}\n" for name in admitted))
    (out_dir / MODEL_JSON).write_text(json.dumps(
        model_json(profile, model_file=model_file, selected=selected, admissions=outcomes), indent=1) + "\n")
    order = {r.name: k for k, r in enumerate(profile.regions)}
    return Extraction(out_dir, profile, selected, tuple(sorted(outcomes, key=lambda o: order[o.name])))
