"""`benchmarks/context_window.py` holds its promises (never over the window, best and latest
sources present, at least 80 % of turns append-only) on every run."""

from __future__ import annotations

from benchmarks import context_window


def test_the_context_window_benchmark_holds_its_promises() -> None:
    report = context_window.run()
    summary = report["summary"]
    assert summary["turns"] == context_window.TURNS and summary["never_over_window"]
    assert summary["best_and_latest_always_present"]
    assert summary["append_only_share"] >= context_window.APPEND_ONLY_TARGET
    assert 1 <= summary["compactions"] <= 6  # it did have to compact, rarely
