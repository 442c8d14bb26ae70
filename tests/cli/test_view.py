"""`cli.client.view.JobView`: what ``watch`` and ``optimize`` show, fed with events by hand (a fake
slow stage on a fake clock), rendered by Rich as a terminal of a given width would."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console

from cli.client.view import JobView, cut_at_word, verdict_sentence
from vocabulary.events import AttemptPayload, MessagePayload
from vocabulary.verdict import ErrorKind, Stage, Status
from vocabulary.wire import JsonObject

JOB = {"id": 7, "problem": {"bundled_id": "level1/softmax"}, "target": "cpu", "state": "running",
       "budgets": {"turns": 10, "tool_calls": 30}, "tokens_in": 1200, "tokens_out": 300, "cost_usd": 0.0,
       "started_at": "2026-12-02T01:00:00+00:00"}
T0 = 1_796_000_000.0
LONG = ("Restating the problem: softmax over the last dimension of [16384, 4096] (cpu: [16, 512]); probabilities "
        "are about 1/dim, so the problem sets atol 1e-6. Stable form: subtract the row max before exponentiating.")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def message(**fields: Any) -> JsonObject:
    """A ``message`` event's JSON as the worker writes it."""
    defaults: dict[str, Any] = dict(trajectory=0, trajectory_id=1, message_id=1, seq=1, tool_calls=[],
                                    tool_call_id=None, tokens_in=0, tokens_out=0, tokens_reasoning=None,
                                    tokens_cached=None, latency_ms=None, cost_usd=0.0)
    return MessagePayload(**{**defaults, **fields}).to_dict()


def attempt(**fields: Any) -> JsonObject:
    """An ``attempt`` event's JSON as the store writes it."""
    return AttemptPayload(**{"attempt_id": fields["n"], "trajectory_id": None, "best": False, **fields}).to_dict()


def screen(view: JobView, width: int = 100) -> str:
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(view)
    return console.export_text()


def test_cut_at_word_never_cuts_a_word() -> None:
    for limit in range(10, len(LONG) + 5, 7):
        cut = cut_at_word(LONG, limit)
        assert len(cut) <= limit
        if cut.endswith("…"):
            kept = cut[:-1]
            assert LONG.startswith(kept) and LONG[len(kept)] in " ,;:-", (limit, cut)
        else:
            assert cut == LONG
    assert cut_at_word("a\n\n  b", 10) == "a b"


def test_a_slow_stage_shows_with_its_elapsed_time_then_as_a_step() -> None:
    clock = Clock()
    view = JobView(job=dict(JOB), clock=clock)
    assert view.apply("stage", {"stage": "header_build", "phase": "started", "seconds": 0}) is None
    clock.now += 95.0
    text = screen(view)
    assert "now: building the torch headers (once per cache)  95.0 s …" in text
    line = view.apply("stage", {"stage": "header_build", "phase": "finished", "seconds": 95.04})
    assert line == "  building the torch headers (once per cache): 95.0 s"
    view.apply("stage", {"stage": "baselines", "phase": "started", "at": "2026-12-02T01:00:00+00:00"})
    clock.now = T0 + 12  # "at" is what counts, not when the view heard of it
    view.clock = lambda: 1_796_173_212.0  # 2026-12-02T01:00:12Z
    text = screen(view)
    assert "✓ building the torch headers (once per cache)  95.0 s" in text
    assert "now: timing eager PyTorch and torch.compile (once per problem)  12.0 s …" in text


def test_messages_and_progress_read_as_words_never_as_dicts() -> None:
    view = JobView(job=dict(JOB))
    lines = [
        view.apply("progress", {"phase": "started", "kind": "agent", "target": "cpu", "worker_id": "w"}),
        view.apply("trajectory", {"index": 0, "trajectory_id": 1, "state": "running", "temperature": 0.2}),
        view.apply("message", message(role="assistant", preview=LONG + " " + LONG, tool_calls=["get_gpu_specs"])),
        view.apply("message", message(role="tool", preview="compile: ERROR (stage compile) - "
                                      "compile failed\nthe extension did not build; first compiler errors:")),
        view.apply("trajectory", {"index": 0, "trajectory_id": 1, "state": "submitted", "reason": "submitted"}),
    ]
    assert lines[0] == "the worker started the job" and lines[1] == "trajectory 0 started"
    assert lines[2] is not None and lines[2].endswith("… → get_gpu_specs") and "Restating the problem" in lines[2]
    assert lines[3] is None  # a tool's result is its attempt's row
    assert lines[4] == "trajectory 0 submitted"
    text = screen(view, width=80)
    assert not re.search(r"\{'|': ", text), text
    assert "turns 1 / 10 · tool calls 1 / 30" in text
    agent_line = next(line for line in text.splitlines() if line.startswith("agent: "))
    kept = agent_line.removeprefix("agent: ").rstrip()
    assert len(agent_line.rstrip()) <= 80 and kept.endswith("…") and LONG.startswith(kept[:-1])


def test_the_summary_says_plainly_whether_the_kernel_beats_eager_and_compile() -> None:
    # Issue 24: the demo ended "succeeded, ★ best 0.28× vs eager" and nothing more.
    style, sentence = verdict_sentence({"n": 4, "median_ms": 0.0214, "speedup_vs_eager": 0.28,
                                        "speedup_vs_compile": 0.6, "eager_ms": 0.006, "compile_ms": 0.0128})
    assert style == "bold yellow"
    assert sentence == ("Nothing beat eager PyTorch or torch.compile: the job found a correct kernel, not a faster "
                        "one. The best, attempt 4 takes 0.0214 ms; eager PyTorch 0.006 ms (0.28×), torch.compile "
                        "0.0128 ms (0.60×).")
    # From a server that sends no baselines, they are the ratios' bases: time × speedup.
    style, sentence = verdict_sentence({"n": 4, "median_ms": 1.3, "speedup_vs_eager": 1.6, "speedup_vs_compile": 0.8})
    assert style == "yellow"
    assert sentence == ("It beats eager PyTorch but not torch.compile: attempt 4 takes 1.300 ms; eager PyTorch "
                        "2.080 ms (1.60×), torch.compile 1.040 ms (0.80×).")
    style, sentence = verdict_sentence({"n": 4, "median_ms": 1.3, "speedup_vs_eager": 1.6,
                                        "speedup_vs_compile": 1.2})
    assert style == "green" and sentence.startswith("It beats eager PyTorch and torch.compile: attempt 4 takes")
    style, sentence = verdict_sentence({"n": 2, "median_ms": 1.3, "speedup_vs_eager": 0.9, "speedup_vs_compile": None})
    assert sentence.startswith("Nothing beat eager PyTorch: ") and "torch.compile was not timed" in sentence
    assert verdict_sentence(None)[1].startswith("No verified kernel")
    view = JobView(job={**JOB, "state": "succeeded", "best": {"n": 4, "median_ms": 1.3, "speedup_vs_eager": 0.75,
                                                              "speedup_vs_compile": 0.17, "eager_ms": 0.975,
                                                              "compile_ms": 0.221}})
    lines = view.summary(replay_hint="kernelloop replay 7", dashboard_url="http://127.0.0.1:8000/dashboard/jobs/7")
    assert lines[0] == ("best: attempt 4, 1.300 ms, 0.75× vs eager (0.975 ms), 0.17× vs torch.compile "
                        "(0.221 ms)")
    assert "[bold yellow]Nothing beat eager PyTorch or torch.compile" in lines[1]
    assert "`kernelloop replay 7`" in lines[2] and "/dashboard/jobs/7" in lines[3]


def test_the_table_numbers_trajectories_as_the_dashboard_and_shows_the_baselines() -> None:
    view = JobView(job=dict(JOB))
    view.apply("trajectory", {"index": 0, "trajectory_id": 1, "state": "running"})
    view.apply("trajectory", {"index": 1, "trajectory_id": 6, "state": "running"})
    first = view.apply("attempt", attempt(n=1, trajectory_id=6, tool="compile", status=Status.ERROR,
                                          stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE))
    line = view.apply("attempt", attempt(n=2, trajectory_id=6, tool="benchmark", status=Status.PASS,
                                         stage=Stage.DONE, correct=True, median_ms=0.0214, speedup_vs_eager=0.28,
                                         speedup_vs_compile=0.6, eager_ms=0.006, compile_ms=0.0128))
    cut = view.apply("attempt", attempt(n=3, trajectory_id=1, tool="benchmark", status=Status.ERROR,
                                        stage=Stage.COMPILE, error_kind=ErrorKind.CANCELLED))
    assert first is not None and "baselines" not in first
    assert line is not None and line.splitlines()[1] == "  baselines: eager PyTorch 0.006 ms, torch.compile 0.0128 ms"
    assert cut is not None and " cancelled " in cut and "baselines" not in cut
    for width in (120, 80):  # 80: what a narrow terminal drops first (% SOL, the stage), never these
        text = screen(view, width=width)
        # The trajectory's index (1), never its store id (6); the baselines over the ratios.
        assert re.search(r"^\s+2\s+1\s+benchmark\s+pass\s+(done\s+)?0\.0214\s+0\.28×\s+0\.60×", text, re.M), text
        assert re.search(r"vs eager\s+vs compile", text) and re.search(r"0\.006 ms\s+0\.0128 ms", text), text
        assert re.search(r"^\s+3\s+0\s+benchmark\s+cancelled\s", text, re.M), text
        assert all(len(line) <= width for line in text.splitlines())


def test_an_event_the_view_cannot_read_says_nothing_and_changes_nothing() -> None:
    view = JobView(job=dict(JOB))
    before = screen(view)
    for event_type, data in [("attempt", {"n": 1, "status": "pass"}), ("attempt", {**attempt(n=1, tool="x",
                             status=Status.PASS, stage=Stage.DONE), "median_ms": "fast"}),
                             ("a newer type", {"x": 1}), ("state", "not an object"), ("stage", {"stage": "compile"})]:
        assert view.apply(event_type, data) is None
    assert view.attempts == {} and screen(view) == before
