"""The leaderboard's groups: per problem and target, the jobs with a verified kernel ranked by their
speedup over eager PyTorch, with each model's best beside them (the rows come from
`store.leaderboard_rows`, fastest first)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from display import problem_label
from store import LeaderboardRow
from vocabulary.verdict import Verdict

__all__ = ["LeaderEntry", "LeaderGroup", "ModelBest", "leaderboard_groups", "model_label"]


def model_label(profile: str | None, model: str | None) -> str:
    """``profile · model`` (the model alone when the profile has its name), or "no LLM"."""
    if not profile:
        return "no LLM"
    return profile if not model or model == profile else f"{profile} · {model}"


@dataclass(frozen=True)
class LeaderEntry:
    rank: int
    row: LeaderboardRow
    model: str
    device: str
    eager_ms: float | None
    compile_ms: float | None


@dataclass(frozen=True)
class ModelBest:
    """A model's best entry on one problem and how many of its jobs there are."""

    model: str
    best: LeaderEntry
    jobs: int


@dataclass(frozen=True)
class LeaderGroup:
    """One problem on one target: its entries, ranked."""

    problem: str
    #: What the jobs list's problem filter takes (the bundled id, else the sha256).
    problem_key: str
    target: str
    entries: tuple[LeaderEntry, ...]
    models: tuple[ModelBest, ...]


def _entry(rank: int, row: LeaderboardRow) -> LeaderEntry:
    verdict = Verdict.from_dict(row.verdict)
    eager_ms, compile_ms = verdict.baselines_ms
    return LeaderEntry(rank=rank, row=row, model=model_label(row.llm_profile, row.llm_model),
                       device=verdict.provenance.device or "?", eager_ms=eager_ms, compile_ms=compile_ms)


def leaderboard_groups(rows: Iterable[LeaderboardRow]) -> tuple[LeaderGroup, ...]:
    """Rows grouped by (problem, target), problems in name order, each group in the rows' order."""
    grouped: dict[tuple[str, str], list[LeaderboardRow]] = {}
    for row in rows:
        key = row.problem_bundled_id or row.problem_sha256
        grouped.setdefault((key, row.target.value), []).append(row)
    groups = []
    for (key, target), members in grouped.items():
        entries = tuple(_entry(rank, row) for rank, row in enumerate(members, start=1))
        models: dict[str, list[LeaderEntry]] = {}
        for entry in entries:
            models.setdefault(entry.model, []).append(entry)
        groups.append(LeaderGroup(
            problem=problem_label(members[0].problem_bundled_id, members[0].problem_sha256), problem_key=key,
            target=target, entries=entries,
            models=tuple(ModelBest(model=name, best=found[0], jobs=len(found)) for name, found in models.items())))
    # Bundled problems by id, then posted ones.
    return tuple(sorted(groups, key=lambda g: (not g.problem_key.startswith("level"), g.problem, g.target)))
