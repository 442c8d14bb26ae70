"""The true cause of a failure the candidate hid: said first in every verdict that has one.

Most LLM-written kernels wrap ``load_inline`` in try/except and fall back to PyTorch when the
build fails, and many catch their kernel's run-time error the same way. What fails later ("no
custom kernel ran", a wrong output, "extension does no work"), or even a pass, then hides the
cause, and the model cannot fix what it is not told. So a verdict's message, its log and the
agent's feedback lead with each build the candidate caught (`vocabulary.builds.BuildFailure`, in
the compile section, lazy builds included) and each extension function that raised at run time
while forward went on (`KernelError`, seen by the candidate sandbox's wrapper of every extension
function). Pure functions over frozen values; standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vocabulary.builds import BuildFailure, BuildPhase, CompileResult
from vocabulary.wire import JsonObject, Reader

__all__ = ["KernelError", "cause_lines", "cause_log", "grouped_kernel_errors", "led_by_cause"]

#: Where a caught build happened, as the verdict says it.
_WHERE: dict[BuildPhase | None, str] = {
    None: "at import",
    BuildPhase.IMPORT: "at import in the candidate sandbox (not in the compile sandbox, which has no GPU)",
    BuildPhase.INIT: "in ModelNew.__init__",
    BuildPhase.FORWARD: "in forward",
}
#: Characters of one run-time error kept (a sandbox may report many; the first words say what it was).
MAX_KERNEL_ERROR_CHARS = 600


@dataclass(frozen=True, kw_only=True)
class KernelError:
    """An extension function that raised at run time while the forward around it went on (the
    candidate caught the error, typically to fall back to PyTorch): ``function`` as
    ``<extension>.<function>``, what it raised, and the trial it raised in (None as the candidate
    sandbox reports it; the referee fills it in), ``noop`` if that was the no-op substitution trial."""

    function: str
    error: str
    trial: int | None = None
    noop: bool = False

    def to_dict(self) -> JsonObject:
        data: JsonObject = {"function": self.function, "error": self.error, "noop": self.noop}
        if self.trial is not None:
            data["trial"] = self.trial
        return data

    @classmethod
    def from_dict(cls, data: object) -> KernelError:
        r = Reader(data, "an extension's run-time error")
        return cls(function=r.text("function")[:200], error=r.text("error", "")[:MAX_KERNEL_ERROR_CHARS],
                   trial=r.optional_integer("trial"), noop=r.flag("noop", False))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _build_line(failure: BuildFailure) -> str:
    first = _first_line(failure.errors)
    return (f"extension {failure.name!r} failed to build {_WHERE[failure.lazy]} and the candidate caught the "
            f"error (falling back without it){': ' + first if first else ''}")


def grouped_kernel_errors(errors: Sequence[KernelError]) -> list[tuple[KernelError, list[str]]]:
    """Each distinct (function, error's first line) once, with the trials it happened in."""
    groups: dict[tuple[str, str], tuple[KernelError, list[str]]] = {}
    for e in errors:
        where = "the no-op substitution trial" if e.noop else (f"trial {e.trial}" if e.trial is not None else "")
        # By the error's first line: the rest may name the arguments (pybind lists their values).
        entry = groups.setdefault((e.function, _first_line(e.error)), (e, []))
        if where and where not in entry[1]:
            entry[1].append(where)
    return list(groups.values())


def _kernel_line(error: KernelError, trials: Sequence[str]) -> str:
    where = f" in {', '.join(trials)}" if trials else ""
    return (f"extension function {error.function} raised at run time{where} and forward went on without it "
            f"(the candidate caught the error): {_first_line(error.error)}")


def cause_lines(compile_result: CompileResult | None, kernel_errors: Sequence[KernelError]) -> list[str]:
    """One line per hidden failure, builds first: what leads the verdict's message."""
    lines = [_build_line(f) for f in (compile_result.swallowed if compile_result is not None else ())]
    lines.extend(_kernel_line(e, trials) for e, trials in grouped_kernel_errors(kernel_errors))
    return lines


def cause_log(compile_result: CompileResult | None, kernel_errors: Sequence[KernelError]) -> str:
    """What leads the verdict's log: each caught build's trimmed compiler errors, each run-time error."""
    parts = []
    for f in compile_result.swallowed if compile_result is not None else ():
        parts.append(f"extension {f.name!r} ({_WHERE[f.lazy]}), first compiler errors:\n{f.errors.strip()}")
    for e, trials in grouped_kernel_errors(kernel_errors):
        parts.append(f"{e.function} raised{' in ' + ', '.join(trials) if trials else ''}:\n{e.error.strip()}")
    return "\n\n".join(parts)


def led_by_cause(message: str, compile_result: CompileResult | None, kernel_errors: Sequence[KernelError]) -> str:
    """``message`` after the lines of `cause_lines` (unchanged if there are none)."""
    lines = cause_lines(compile_result, kernel_errors)
    return "\n".join([*lines, *([message] if message else [])])
