"""Whether this machine can run the cuda target at all, asked before anything is compiled.

Without an NVIDIA device or a CUDA toolkit, building a candidate fails with torch's "CUDA_HOME
environment variable is not set", which reads as the candidate's fault; the referee says instead
that the machine lacks them (an ``infra`` error). Stdlib only: the trusted process need not import
torch for this. The toolkit is found where ``torch.utils.cpp_extension`` looks for it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["cuda_toolkit_home", "cuda_unavailable"]

#: Device nodes the NVIDIA driver creates; a GPU made visible to a container brings them.
_NVIDIA_DEVICE = Path("/dev/nvidiactl")
_DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


def cuda_toolkit_home() -> Path | None:
    """CUDA_HOME, CUDA_PATH, the folder above ``nvcc`` on PATH, or /usr/local/cuda: the first that
    holds ``bin/nvcc``."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append(str(_DEFAULT_CUDA_HOME))
    for home in candidates:
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home)
    return None


def cuda_unavailable(*, gpu: bool = True) -> str | None:
    """Why the cuda target cannot run here, or None; ``gpu=False``: only compiles will run (they
    need the toolkit, never a GPU: compile sandboxes see none)."""
    device_node = _NVIDIA_DEVICE
    missing = []
    if gpu and not device_node.exists():
        missing.append(f"no NVIDIA GPU ({device_node} is absent)")
    if cuda_toolkit_home() is None:
        missing.append("no CUDA toolkit (nvcc not found under CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda)")
    if not missing:
        return None
    return ("the cuda target cannot run on this machine: " + " and ".join(missing)
            + "; run on a GPU machine with the CUDA toolkit, or use --target cpu")
