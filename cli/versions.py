"""The versions of this install, for ``kernelloop --version`` and the provenance of ``bench`` reports."""

from __future__ import annotations

import platform
from importlib import metadata

__all__ = ["local_versions", "version_line"]


def local_versions() -> dict[str, str | None]:
    """kernelloop's, torch's and the CUDA torch was built with (``None``: no CUDA), Python's."""
    try:
        own: str | None = metadata.version("kernelloop")
    except metadata.PackageNotFoundError:
        own = None
    try:
        import torch

        torch_version, cuda = str(torch.__version__), torch.version.cuda
    except ImportError:
        torch_version, cuda = None, None
    return {"kernelloop": own, "torch": torch_version, "cuda": cuda, "python": platform.python_version()}


def version_line(versions: dict[str, str | None]) -> str:
    cuda = f" (CUDA {versions['cuda']})" if versions.get("cuda") else " (no CUDA)"
    return (f"kernelloop {versions.get('kernelloop') or '(not installed)'} · torch {versions.get('torch') or '(none)'}"
            f"{cuda if versions.get('torch') else ''} · Python {versions.get('python')}")
