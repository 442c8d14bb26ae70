"""How a job ended, in words: whether its best kernel beats eager PyTorch and torch.compile, said
plainly, with the milliseconds the ratios come from (what ``watch``, ``submit`` and ``optimize``
end with). The figures are the API's JSON (a job's ``best``, an attempt's event)."""

from __future__ import annotations

from collections.abc import Mapping

from display import finite, fmt_ms
from vocabulary.wire import JsonValue

__all__ = ["baseline_ms", "verdict_sentence"]


def baseline_ms(figures: Mapping[str, JsonValue], name: str) -> float | None:
    """``eager_ms`` or ``compile_ms`` of an attempt or a best (``name``: ``eager`` or ``compile``):
    as sent, else the candidate's time times its speedup (a speedup is the baseline's median over
    the candidate's), else ``None``."""
    sent = finite(figures.get(f"{name}_ms"))
    if sent is not None:
        return sent
    median, speedup = finite(figures.get("median_ms")), finite(figures.get(f"speedup_vs_{name}"))
    return median * speedup if median is not None and speedup is not None else None


def verdict_sentence(best: Mapping[str, JsonValue] | None) -> tuple[str, str]:
    """(style, sentence): whether the best kernel beats eager PyTorch and torch.compile, plainly,
    with the milliseconds the ratios come from."""
    if not best:
        return "yellow", "No verified kernel: no attempt was both correct and timed."
    eager, compiled = finite(best.get("speedup_vs_eager")), finite(best.get("speedup_vs_compile"))
    if eager is None:
        return "yellow", "It is correct; eager PyTorch was not timed, so there is no speedup to state."
    kernel = f"attempt {best.get('n')} takes {fmt_ms(best.get('median_ms'))} ms"
    figures = [f"eager PyTorch {fmt_ms(baseline_ms(best, 'eager'))} ms ({eager:.2f}×)"]
    figures.append("torch.compile was not timed" if compiled is None
                   else f"torch.compile {fmt_ms(baseline_ms(best, 'compile'))} ms ({compiled:.2f}×)")
    measured = f"{kernel}; {', '.join(figures)}."
    if eager < 1 and (compiled is None or compiled < 1):
        nothing = "eager PyTorch" if compiled is None else "eager PyTorch or torch.compile"
        return "bold yellow", (f"Nothing beat {nothing}: the job found a correct kernel, not a faster one. "
                               f"The best, {measured}")
    if eager >= 1 and compiled is not None and compiled < 1:
        return "yellow", f"It beats eager PyTorch but not torch.compile: {measured}"
    if eager < 1:
        return "yellow", f"It beats torch.compile but not eager PyTorch: {measured}"
    beaten = "eager PyTorch" if compiled is None else "eager PyTorch and torch.compile"
    return "green", f"It beats {beaten}: {measured}"
