"""The harness's dependency rules: stdlib-only for the driver side, torch + stdlib for the sandboxes."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO

SERVICE_PACKAGES = {"fastapi", "starlette", "sqlalchemy", "alembic", "celery", "kombu", "redis", "openai",
                    "pydantic", "pydantic_settings", "typer", "rich", "httpx", "store", "api", "worker", "agent",
                    "config", "cli"}


def imported_after(code: str) -> set[str]:
    probe = f"import sys\nbefore = set(sys.modules)\n{code}\nimport json\n" \
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_driver_side_needs_only_the_standard_library() -> None:
    """A worker or the CLI drives evaluations without importing torch (no CUDA in that process)."""
    found = imported_after("import harness, harness.admission, harness.evaluate, harness.sandbox, harness.meter.drive,"
                           " harness.meter.clock, harness.meter.build, harness.meter.noise")
    third_party = {m for m in found if m not in sys.stdlib_module_names} - {"harness", "problems", "vocabulary"}
    assert third_party == set(), third_party


def test_sandbox_modules_need_only_torch_and_the_standard_library() -> None:
    """Every module of `harness.sandboxed` (the roles, the loop's sandbox side, the regions ...)."""
    sandboxed = REPO / "harness" / "sandboxed"
    modules = sorted(".".join(p.relative_to(REPO).with_suffix("").parts) for p in sandboxed.rglob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    assert "harness.sandboxed.roles.candidate" in modules and "harness.sandboxed.meter" in modules
    found = imported_after("\n".join(f"import {m}" for m in modules))
    assert "torch" in found
    assert found & SERVICE_PACKAGES == set(), found & SERVICE_PACKAGES
