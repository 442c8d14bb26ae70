"""Which compiler flags a precompiled header and a delegated (trusted) build accept."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

#: load_inline arguments a delegated (trusted) build accepts; any other argument builds in the sandbox.
_DELEGABLE_KWARGS = frozenset({
    "extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "with_cuda",
    "with_pytorch_error_handling", "no_implicit_headers", "is_python_module", "keep_intermediates", "use_pch",
})
#: Flags a delegated build accepts: one token at a time, with no path in it (no ``/``), no response
#: file (``@``) and no shell syntax. Paths (include and library directories, ``-include``), plugins,
#: wrappers, spec files, another host compiler, profile data: the compile sandbox builds those, as
#: before, without object reuse (a builder must not load code or read files a candidate chose).
_SAFE_FLAG = re.compile(r"^[\w=+.,:\[\]\-]*$")
#: ...except these, whatever their form: they load code into the compiler or linker, or read files.
_UNSAFE_FLAG = re.compile(r"plugin|wrapper|specs|ccbin|compiler-bindir|options-file|optf|profile|^-B|^-include"
                          r"|^-imacros|^-I|^-isystem|^-iquote|^-idirafter|^-L|^-keep|^--keep|^-save-temps|^-o$|^-MF|^-MD|^-MMD")


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def normalise_header_flags(flags: Sequence[str]) -> list[str]:
    """The flags a precompiled header is keyed and built with: what cannot change the header's
    meaning dropped (empty strings, ``-v``, ``-w``, warnings, debug info, ``-pipe``), the last
    ``-std`` kept, and the last ``-O`` level at the end (``-O`` is ``-O1``, ``-O0`` is no flag at
    all: torch's default). Levels are not merged: g++ 13 refuses a header built at another level.
    Repeated ``-f``/``-m``/``-D`` flags are kept once. g++ still validates every use."""
    kept: list[str] = []
    opt: str | None = None
    std: str | None = None
    seen: set[str] = set()
    skip_next = False
    for flag in (f.strip() for f in flags):
        if skip_next:
            skip_next = False
            continue
        if not flag or flag in ("-v", "-w", "-pipe") or flag.startswith("-g") or flag.startswith("-fdiagnostics"):
            continue
        if flag.startswith("-W") and not flag.startswith(("-Wp,", "-Wa,", "-Wl,")):
            continue
        if flag.startswith(("-Wa,", "-Wl,")):
            continue
        if re.fullmatch(r"-O[0-9sgz]?|-Ofast", flag):
            opt = flag
            continue
        if flag.startswith(("-std=", "--std=")):
            std = "-std=" + flag.split("=", 1)[1]
            continue
        if flag.startswith(("-f", "-m", "-D", "-U")):
            if flag in seen:
                continue
            seen.add(flag)
        kept.append(flag)
    if std is not None:
        kept.append(std)
    if opt is not None and opt != "-O0":
        kept.append("-O1" if opt == "-O" else opt)
    return kept


def _flags_text(normalised: Sequence[str]) -> str:
    """Normalised binding flags as the model reads them."""
    return " ".join(normalised) or "none (torch's default -O0)"


def builder_refusal(kwargs: Mapping[str, object]) -> str | None:
    """Why a ``load_inline`` with these keyword arguments cannot be built by the trusted builder
    (None: it can). Refused builds are compiled in the candidate's sandbox, as before."""
    unknown = sorted(set(kwargs) - _DELEGABLE_KWARGS)
    if unknown:
        return f"argument {unknown[0]!r}"
    if kwargs.get("extra_include_paths"):
        return "extra_include_paths"
    for key in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
        value = kwargs.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            return f"{key} is not a list of strings"
        for flag in value:
            for token in flag.split():
                if _UNSAFE_FLAG.search(token) or not _SAFE_FLAG.match(token):
                    return f"flag {token!r}"
    for key in ("with_cuda", "with_pytorch_error_handling", "no_implicit_headers", "is_python_module",
                "keep_intermediates", "use_pch"):
        if key in kwargs and not isinstance(kwargs[key], (bool, type(None))):
            return f"{key} is not a bool"
    return None


def _plain_data(value: object) -> bool:
    """Whether ``value`` is JSON-shaped (it can travel to the builder unchanged)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_data(v) for k, v in value.items())
    return False
