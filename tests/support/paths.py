"""Where the checkout is, for tests that read its files or start its commands (stdlib only: the
GPU tests import it on a host with torch and pytest alone)."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (this file is ``tests/support/paths.py``).
REPO = Path(__file__).resolve().parents[2]
