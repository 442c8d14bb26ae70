"""What the GPU tests share: their figures, printed (run with -s) and appended to a JSON-lines file
(stdlib only: a GPU host has torch and pytest, not the service's packages)."""

from __future__ import annotations

import json
import os


def report(entry: dict, *, tag: str = "GPU-FIGURES") -> None:
    """Print ``entry`` as a ``TAG {json}`` line, and append it to ``$KERNELLOOP_GPU_REPORT`` if set."""
    print(tag, json.dumps(entry))
    path = os.environ.get("KERNELLOOP_GPU_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")
