"""The compiler's output and identity: errors trimmed for the feedback, ptxas counts, ninja's log."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.buildcache.layout import _CONTEXT_LINES, _MAX_ERRORS
from vocabulary.builds import BuildFailure, BuildPhase, KernelInfo


class BuildError(RuntimeError):
    """An extension failed to build; ``log`` holds the compiler output, ``lazy`` where a candidate
    sandbox built it (None: in the compile sandbox)."""

    def __init__(self, name: str, log: str, *, lazy: BuildPhase | None = None, key: str | None = None) -> None:
        self.name = name
        self.log = log
        self.lazy = lazy
        #: The build's key, where the cache knew it.
        self.key = key
        first = next((line.strip() for line in trim_compiler_errors(log).splitlines() if line.strip()), "")
        # The first error in the exception's own text: a candidate that prints what it caught shows it.
        super().__init__(f"error building extension {name!r}" + (f": {first}" if first else ""))

    def failure(self) -> BuildFailure:
        """What the verdict records of it, should the candidate catch it."""
        return BuildFailure(name=self.name, errors=trim_compiler_errors(self.log), lazy=self.lazy)


_ERROR_LINE = re.compile(
    r"^(?P<file>[^\s:()]+?)(?::(?P<line>\d+)(?::\d+)?:|\((?P<nvline>\d+)\):)\s*(?:fatal\s+)?error\b",
    re.IGNORECASE,
)


#: What a log shows when the compiler was stopped rather than refusing the source (memory or
#: process limits, a full disk, a signal): such a failure may not recur, so it is never remembered.
_INTERRUPTED = re.compile(r"internal compiler error|killed|signal|memory exhausted|out of memory|cannot allocate"
                          r"|no space left|resource temporarily unavailable|timed out", re.IGNORECASE)


def is_source_error(log: str) -> bool:
    """Whether a failed build's ``log`` is the compiler refusing the source (an ``error`` line, and
    no sign that the compiler was interrupted): the same bytes fail the same way again."""
    return any(_ERROR_LINE.match(line.strip()) for line in log.splitlines()) and not _INTERRUPTED.search(log)


_PATH = re.compile(r"(?:/[^\s:()'\"]+)+/([^/\s:()'\"]+\.(?:cpp|cc|cu|cuh|h|hpp|o|so))")


def trim_compiler_errors(log: str, *, max_errors: int = _MAX_ERRORS) -> str:
    """The first compiler errors, each as ``file:line: message`` plus a few lines of context."""
    lines = [_PATH.sub(r"\1", line) for line in log.splitlines()]
    is_error = [bool(_ERROR_LINE.match(line.strip())) for line in lines]
    total = sum(is_error)
    if not total:  # a linker or ninja failure: keep the tail, which says what went wrong
        return "\n".join([ln for ln in lines if ln.strip()][-15:])
    picked: list[str] = []
    count = 0
    for i, line in enumerate(lines):
        if not is_error[i]:
            continue
        picked.append(line.strip())
        for j in range(i + 1, min(i + 1 + _CONTEXT_LINES, len(lines))):
            if is_error[j]:
                break
            if lines[j].strip():
                picked.append("    " + lines[j].rstrip())
        count += 1
        if count >= max_errors:
            break
    if total > count:
        picked.append(f"[... {total - count} more errors]")
    return "\n".join(picked)


_PTXAS_ENTRY = re.compile(r"ptxas info\s*:\s*Compiling entry function '(?P<fn>[^']+)' for '(?P<arch>[^']+)'")
_PTXAS_PROPS = re.compile(r"ptxas info\s*:\s*Function properties for (?P<fn>\S+)")
_PTXAS_SPILL = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"ptxas info\s*:\s*Used (?P<regs>\d+) registers(?:.*?(?P<smem>\d+) bytes smem)?")


def parse_ptxas(log: str) -> list[KernelInfo]:
    """Per-kernel registers, shared memory, stack and spills from ``ptxas -v`` output."""
    arch: dict[str, str | None] = {}
    figures: dict[str, dict[str, int]] = {}
    current: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = m.group("fn")
            figures.setdefault(current, {})
            arch.setdefault(current, m.group("arch"))
        elif m := _PTXAS_PROPS.search(line):
            props_for = m.group("fn")
            figures.setdefault(props_for, {})
            arch.setdefault(props_for, None)
        elif (m := _PTXAS_SPILL.search(line)) and props_for:
            figures[props_for].update(
                stack_bytes=int(m.group("stack")),
                spill_stores=int(m.group("stores")),
                spill_loads=int(m.group("loads")),
            )
        elif (m := _PTXAS_USED.search(line)) and current:
            figures[current]["registers"] = int(m.group("regs"))
            if m.group("smem"):
                figures[current]["smem_bytes"] = int(m.group("smem"))
    return [KernelInfo(kernel=name, arch=arch[name], registers=f.get("registers"), smem_bytes=f.get("smem_bytes"),
                       stack_bytes=f.get("stack_bytes"), spill_stores=f.get("spill_stores"),
                       spill_loads=f.get("spill_loads"))
            for name, f in figures.items()]


_GCC_IDENTITIES: dict[tuple[str, ...], str | None] = {}


def _gcc_identity(compiler: tuple[str, ...]) -> str | None:
    """The compiler's resolved path and ``-v`` banner if it is g++ (PCHs are g++'s), else None."""
    if compiler not in _GCC_IDENTITIES:
        identity = None
        path = shutil.which(compiler[0]) if compiler else None
        if path is not None:
            try:
                out = subprocess.run([*compiler, "-v"], capture_output=True, text=True, timeout=60,
                                     env={**os.environ, "LC_ALL": "C"}, check=False).stderr
            except (OSError, subprocess.SubprocessError):
                out = ""
            version = [ln for ln in out.splitlines() if ln.startswith(("gcc version", "Target:"))]
            if any(ln.startswith("gcc version") for ln in version) and "clang" not in out:
                identity = json.dumps([os.path.realpath(path), *compiler[1:], *version])
        _GCC_IDENTITIES[compiler] = identity
    return _GCC_IDENTITIES[compiler]


@contextlib.contextmanager
def _capture_fd_output() -> Iterator[list[str]]:
    """Capture what the compiler writes to fds 1 and 2 (ninja runs as a subprocess)."""
    box: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(1), os.dup(2)
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            box.append(tmp.read().decode(errors="replace"))


_IDENTITIES: dict[tuple[str, ...], str] = {}


def _compiler_identity(command: Sequence[str]) -> str:
    """A compiler's resolved path and version banner (part of an object's key)."""
    key = tuple(command)
    if key not in _IDENTITIES:
        path = shutil.which(command[0]) if command else None
        banner = ""
        if path is not None:
            try:
                banner = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60,
                                        env={**os.environ, "LC_ALL": "C"}, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                banner = ""
        _IDENTITIES[key] = json.dumps([os.path.realpath(path) if path else command[0], *command[1:],
                                       banner.strip()[-400:]])
    return _IDENTITIES[key]


def _ninja_steps(build_dir: Path) -> dict[str, float]:
    """Seconds per output of the last build, from ninja's log."""
    steps: dict[str, float] = {}
    log = build_dir / ".ninja_log"
    if log.is_file():
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
                steps[parts[3]] = round((int(parts[1]) - int(parts[0])) / 1e3, 3)
    return steps


def _ninja_deps(build_dir: Path, output: str) -> list[str] | None:
    """The files ninja recorded ``output`` as depending on (its compiler's depfile), or None."""
    try:
        done = subprocess.run(["ninja", "-t", "deps", output], cwd=build_dir, capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines or "(VALID)" not in lines[0]:
        return None
    return [ln.strip() for ln in lines[1:] if ln.strip()]
