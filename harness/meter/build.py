"""Building the metered loop's extension: `kl_meter.c` with the host's C compiler, once per source.

The trusted side builds it (no candidate input reaches the compiler: the source is ours) into the
cache, keyed by the source, the interpreter and the compiler, and copies it into each sandbox's run
directory (a candidate sandbox sees no build directory). Python's C API only: about a second.
Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = ["METER_SOURCE", "MeterBuildError", "install_meter", "meter_library"]

METER_SOURCE = Path(__file__).with_name("kl_meter.c")
#: The compiler may take this long (a loaded 2-core host: a few seconds).
_BUILD_TIMEOUT_S = 120.0


class MeterBuildError(RuntimeError):
    """The metered loop could not be built (ours: an infrastructure error)."""


def _compiler() -> str:
    for name in (os.environ.get("CC", ""), "cc", "gcc"):
        if name and shutil.which(name.split()[0]):
            return name.split()[0]
    raise MeterBuildError("no C compiler (cc or gcc) on PATH: the timing loop cannot be built")


def _key(compiler: str) -> str:
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    material = b"\0".join([METER_SOURCE.read_bytes(), sys.version.encode(), sys.executable.encode(),
                           version.encode()])
    return hashlib.sha256(material).hexdigest()[:20]


def meter_library(builds_dir: Path) -> Path:
    """The built extension (``builds/meter/<key>/kl_meter<suffix>``), built first if missing.

    Raises:
        MeterBuildError: no compiler, or the build failed (its output says why).
    """
    compiler = _compiler()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    directory = builds_dir / "meter" / _key(compiler)
    library = directory / f"kl_meter{suffix}"
    if library.is_file():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies
        if library.is_file():
            return library
        partial = directory / f".kl_meter.{os.getpid()}{suffix}"
        command = [compiler, "-O2", "-shared", "-fPIC", "-Wall", f"-I{sysconfig.get_paths()['include']}",
                   str(METER_SOURCE), "-o", str(partial)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise MeterBuildError(f"building the timing loop failed: {exc}") from None
        if done.returncode != 0:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise MeterBuildError(f"building the timing loop failed:\n{(done.stdout + done.stderr)[-4000:]}")
        partial.replace(library)
    return library


def install_meter(builds_dir: Path, run_dir: Path) -> Path:
    """The extension, built if needed, copied into a sandbox's run directory (read-only to it); the
    copy's path, for the sandbox's load request."""
    library = meter_library(builds_dir)
    copy = run_dir / library.name
    shutil.copyfile(library, copy)
    copy.chmod(0o555)
    return copy
