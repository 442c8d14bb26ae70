"""What this machine measured before for a baselines key: the check that keeps the cache honest.

A baseline timed while the host was busy can be far too slow with a tight spread (a replay on a
2-core host timed eager at 39.9 ms instead of 0.13 ms); cached, it made every later candidate
"428x faster". So every baselines figure the referee measures is recorded per machine and key
(``baselines/record/<key>-<machine>.json``, the latest `RECORD_LIMIT`) and judged by the
fastest figure earlier requests (other jobs, other times) recorded: other work only ever slows a
run down, so that one is the machine's best estimate. A new figure more than `AGREEMENT_RATIO`
from it is re-taken (`MAX_RETAKES`); if no re-take agrees, the evaluation uses the fastest figure
the machine has for the key and caches nothing. A figure is cached only once *confirmed*: it
agrees with the fastest earlier figure and is not noisy itself ("noisy" here: a wide spread of its
own samples; a loaded host alone is no reason, the agreement is the evidence). The first figure
of a key is used, not cached. Two busy jobs in a row cannot confirm each other; a machine that
really became slower is believed once its old figures leave the record. Standard
library only; `harness.reference.ReferenceClient` decides.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from harness.recordfile import RecordFile
from vocabulary.timing import Baselines, Timing
from vocabulary.wire import JsonObject, Reader

__all__ = ["AGREEMENT_RATIO", "MAX_RETAKES", "RECORD_LIMIT", "BaselineRecord", "RecordedFigure", "agrees",
           "describe", "fastest", "machine_id", "measure_consistently"]

#: Two figures agree when the slower is at most this many times the faster (eager, and
#: torch.compile when both have one). CPU medians of one kernel move by tens of percent on a
#: shared host from one run to the next; a poisoned figure was 300x off.
AGREEMENT_RATIO = 1.5
#: Re-takes of a figure that disagrees with the record, in one request.
MAX_RETAKES = 2
#: Figures kept per key and machine (the oldest go first).
RECORD_LIMIT = 8


def machine_id() -> str:
    """This machine, as the record names it: host name and CPU model (a cache directory shared
    between machines keeps one record per machine)."""
    model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return hashlib.sha256(f"{platform.node()}|{model}".encode()).hexdigest()[:12]


def _noisy(timing: Timing | None) -> bool:
    """A spread too wide to judge by. A loaded host alone does not disqualify a figure: agreeing
    with a figure measured at another time is the stronger evidence."""
    return timing is None or timing.spread_noisy


def _agree(a: Timing | None, b: Timing | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    low, high = sorted((a.median_ms, b.median_ms))
    return low > 0 and high / low <= AGREEMENT_RATIO


def agrees(a: Baselines, b: Baselines) -> bool:
    """Whether two baselines measurements agree (`AGREEMENT_RATIO`), eager and torch.compile."""
    return _agree(a.eager, b.eager) and _agree(a.torch_compile, b.torch_compile)


@dataclass(frozen=True)
class RecordedFigure:
    """One measurement of a key's baselines, and the request (job) that made it."""

    baselines: Baselines
    request: str

    @property
    def usable(self) -> bool:
        """Not noisy: a figure that can confirm another (or be confirmed)."""
        return not _noisy(self.baselines.eager) and not (self.baselines.torch_compile is not None
                                                         and _noisy(self.baselines.torch_compile))

    def to_dict(self) -> JsonObject:
        return {"request": self.request, "baselines": self.baselines.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> RecordedFigure:
        r = Reader(data, "a recorded baselines figure")
        return cls(baselines=Baselines.from_dict(r.data.get("baselines")), request=r.text("request"))


class BaselineRecord:
    """The baselines figures this machine measured for one key (see the module's docstring).

    Args:
        directory: the baselines cache (``baselines/``); the record lives in ``record/`` inside.
        key: the baselines key (`harness.reference.ReferenceClient.baseline_key`).
        request: who is measuring now (a Referee): its own figures never confirm each other.
    """

    def __init__(self, directory: Path, key: str, request: str) -> None:
        self._file = RecordFile(directory / "record" / f"{key}-{machine_id()}.json",
                                parse=RecordedFigure.from_dict, dump=RecordedFigure.to_dict, limit=RECORD_LIMIT)
        self.request = request

    def earlier(self) -> list[RecordedFigure]:
        """The figures other requests recorded (what a new one is judged by)."""
        return [f for f in self._file.read() if f.request != self.request]

    def add(self, baselines: Baselines) -> None:
        """Record a figure this request measured (noisy ones too: they are what the machine did)."""
        self._file.append(RecordedFigure(baselines, self.request))

    def agreeing(self, baselines: Baselines) -> bool:
        """Whether ``baselines`` agrees with the fastest figure other requests recorded (other work
        only ever slows a run down, so that one is the machine's best estimate; agreeing with a
        slowed one would let two busy jobs in a row confirm each other)."""
        earlier = [f.baselines for f in self.earlier()]
        return bool(earlier) and agrees(baselines, fastest(earlier))

    def confirmed(self, baselines: Baselines) -> bool:
        """Whether ``baselines`` is not noisy itself and agrees with the fastest figure other
        requests recorded (`agreeing`)."""
        return RecordedFigure(baselines, self.request).usable and self.agreeing(baselines)


def fastest(candidates: list[Baselines]) -> Baselines:
    """The measurement with the fastest eager median (other work only ever slows a run down)."""
    return min(candidates, key=lambda b: b.eager.median_ms if b.eager is not None else float("inf"))


def describe(figures: list[Baselines]) -> str:
    """Eager medians as the notes show them: ``"39.9, 40.1 ms"``."""
    values = [b.eager.median_ms for b in figures if b.eager is not None]
    return ", ".join(f"{v:.4g}" for v in values) + " ms" if values else "none"



def measure_consistently(record: BaselineRecord, measure: Callable[[], Baselines], *,
                         keep: bool) -> tuple[Baselines, bool]:
    """Measure baselines until a figure agrees with the machine's record (see the module's
    docstring): returns the baselines to use (their notes say when they are not a fresh, agreeing
    figure) and whether they are confirmed (may be cached). ``keep``: record what is measured
    (off for a replay, which keeps nothing)."""
    earlier = [f.baselines for f in record.earlier()]
    measured: list[Baselines] = []
    for _ in range(1 + (MAX_RETAKES if earlier else 0)):
        figure = measure()
        confirmed, agreeing = record.confirmed(figure), record.agreeing(figure)
        if keep:
            record.add(figure)
        measured.append(figure)
        if not earlier:
            note = ("the first baselines measured for this problem on this machine: cached once a later job "
                    "measures figures that agree") if keep else None
            return (replace(figure, notes=(*figure.notes, note)) if note else figure), False
        if agreeing:  # a noisy figure that agrees is used, not cached
            return figure, confirmed
    used = fastest([*measured, *earlier])
    return replace(used, notes=(*used.notes, (
        f"eager measured {describe(measured)} here, disagreeing with this machine's earlier {describe(earlier)} "
        f"for this problem (more than {AGREEMENT_RATIO}x apart): re-taken {len(measured) - 1} times; the fastest "
        f"figure ({describe([used])}) is used and nothing is cached"))), False
