"""A verdict timed on a loaded host says so in a flag of its own, which the CLI prints where the
figures are (issue 24, item 4: the same kernel replayed twice, once pass, once "suspicious", with
the load shown only in small grey text)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import harness.meter.noise
from cli.common import render_verdict
from harness.assembly import VerdictFacts, assemble
from harness.draft import Draft, Outcome
from harness.meter.noise import timing_of
from vocabulary.evaluation import Depth, Target
from vocabulary.flags import DECISIVE_FLAGS, Flag
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import Stage, Status

FACTS = VerdictFacts(target=Target.CPU, problem_sha256="ab" * 32, mode="train", policy="mixed", atol=None, rtol=None,
                     trials=1, seeds="s", rejudge=False, transport="file", reference=None,
                     python="3.11", host="h", pid=1, output_limit=1000)


def timed(monkeypatch: pytest.MonkeyPatch, load: float) -> Timing:
    """A CPU timing of a metered run's samples with the load average the host reports set to
    ``load`` (2 usable cores)."""
    monkeypatch.setattr(harness.meter.noise, "_getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(harness.meter.noise, "_usable_cores", lambda: 2)
    return timing_of([0.05, 0.051, 0.049, 0.05, 0.052], cuda=False)


def verdict_for(candidate: Timing, eager: Timing) -> tuple[str, ...]:
    draft = Draft(depth=Depth.BENCHMARK, timing=candidate, baselines=Baselines(eager=eager, torch_compile=None))
    return assemble(FACTS, draft, Outcome(Status.PASS, Stage.TIMING, "timed")).flags


def test_a_verdict_timed_on_a_loaded_host_carries_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet, loaded = timed(monkeypatch, 0.5), timed(monkeypatch, 8.3)
    assert quiet.host_loaded is False and loaded.host_loaded is True
    assert Flag.HOST_LOADED not in verdict_for(quiet, quiet)
    assert verdict_for(loaded, quiet).count(Flag.HOST_LOADED) == 1  # the candidate's timing
    assert Flag.HOST_LOADED in verdict_for(quiet, loaded)  # or the eager baseline it is compared with
    assert Flag.HOST_LOADED not in DECISIVE_FLAGS  # a notice: the status stays what the figures say


def test_the_cli_prints_the_flag_beside_the_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = timed(monkeypatch, 8.3)
    draft = Draft(depth=Depth.BENCHMARK, timing=loaded, baselines=Baselines(eager=loaded, torch_compile=None))
    verdict = assemble(FACTS, draft, Outcome(Status.PASS, Stage.TIMING, "timed"))
    out = io.StringIO()
    render_verdict(verdict, Console(file=out, width=120, color_system=None))
    assert "flag: host_loaded" in out.getvalue()
