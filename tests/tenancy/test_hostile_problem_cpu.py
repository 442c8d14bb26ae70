"""Issue 13, observations 1-4: a problem posted through the real API is as untrusted as a candidate.

Each hostile problem is POSTed to ``/evaluations`` and run by an embedded worker; its module code
(or ``get_inputs``) tries a read, a write or an exhaustion, and the test asserts the outcome:
nothing leaks, no marker file appears, the error names the limit, and the failure is the
problem's (``error_kind: problem``), reported once with its file and line, never retried.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import processes_with
from tests.support.tenancy import PROBLEM_TAIL, Service

pytestmark = pytest.mark.slow

PROBE = '''
import os
import torch
from torch import nn

READ = {reads!r}
LIST = {lists!r}
WRITE = {writes!r}
leaks = []
for path in READ:
    try:
        with open(path, "rb") as fh:
            leaks.append(f"read {{path}}: {{fh.read(40)!r}}")
    except OSError:
        pass
for path in LIST:
    try:
        names = os.listdir(path)
    except OSError:
        continue
    if any(n.startswith(("referee-other", "kl_ext_other", "baseline-other")) for n in names):
        leaks.append(f"listed {{path}}: {{names}}")
for path in WRITE:  # the test looks for these on the host (a private /tmp may take them)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("poisoned")
    except OSError:
        pass
raise RuntimeError("PROBED: " + (f"LEAK {{leaks}}" if leaks else "nothing"))
'''


def _failed_once_as_problem(service: Service, job_id: int) -> dict:
    """The job failed for its problem, with exactly one attempt and no retry; its verdict."""
    assert service.state(job_id) == "failed"
    job = service.job(job_id)
    assert job["error"].startswith("the problem's own code failed (not retried)"), job["error"]
    (verdict,) = service.attempts(job_id)
    assert verdict["error_kind"] == "problem" and verdict["stage"] == "problem", verdict
    assert not [e for e in service.events(job_id) if e[1].get("phase") == "infra_retry"]
    return verdict


def test_problem_code_sees_and_touches_nothing_of_others(service: Service) -> None:
    cache = service.cache
    # Another tenant's leftovers in the shared cache, the store, the operator's key and home.
    other_run = cache / "runs" / "referee-other-tenant" / "attempt-1"
    other_run.mkdir(parents=True)
    (other_run / "candidate.py").write_text("OTHER_TENANT_CANDIDATE")
    other_build = cache / "builds" / "kl_ext_other_abc"
    other_build.mkdir(parents=True)
    (other_build / "main.cpp").write_text("OTHER_TENANT_KERNEL")
    (cache / "baselines").mkdir(parents=True, exist_ok=True)
    (cache / "baselines" / "baseline-other.json").write_text("{}")
    home_canary = Path.home() / f".kl-tenancy-canary-{os.getpid()}"
    home_canary.write_text("HOME_SECRET")
    checkout_file = REPO / "pyproject.toml"
    database = service.settings.data_dir / "kernelloop.db"
    writes = [cache / "inductor" / "poison.py", cache / "builds" / "poison", cache / "baselines" / "poison.json",
              cache / "problem-caches" / ("0" * 32) / "poison", service.workdir / "poison",
              service.settings.data_dir / "poison"]
    source = PROBE.format(
        reads=[str(other_run / "candidate.py"), str(other_build / "main.cpp"), str(service.api_key_file),
               str(database), str(home_canary), str(checkout_file)],
        lists=[str(cache / "runs"), str(cache / "builds"), str(cache / "baselines"), str(cache)],
        writes=[str(p) for p in writes]) + PROBLEM_TAIL
    try:
        job_id = service.post_evaluation(source)
        service.run_next()
    finally:
        home_canary.unlink()
    verdict = _failed_once_as_problem(service, job_id)
    assert "PROBED: nothing" in verdict["message"], verdict["message"]
    raise_line = next(i for i, line in enumerate(source.splitlines(), 1) if "PROBED" in line)
    assert f"line {raise_line}" in verdict["message"] and "RuntimeError" in verdict["message"]
    assert not [p for p in writes if p.exists()]


def test_busy_looping_get_inputs_fails_once_within_its_timeout(service: Service) -> None:
    source = PROBLEM_TAIL.replace("def get_inputs():\n", "def get_inputs():\n    while True:\n        pass\n")
    source = "import torch\nfrom torch import nn\n" + source
    job_id = service.post_evaluation(source)
    limit_s = 8.0  # the loop burns a core for all of it; an honest start (torch's import) takes 1-4 s here
    timeouts = service.options.timeouts
    seconds = service.run_next(timeouts=type(timeouts)(**{**timeouts.__dict__, "reference_start_s": limit_s}))
    verdict = _failed_once_as_problem(service, job_id)
    assert f"within its time limit of {limit_s:.0f} s" in verdict["message"], verdict["message"]
    print(f"TENANCY-FIGURE busy-looping get_inputs: job ended after {seconds:.1f} s "
          f"(reference start limit {limit_s:.0f} s, one try)")
    # The compile sandbox and the worker's bookkeeping come on top of the problem's own limit.
    assert seconds < limit_s + 45


def test_memory_hog_is_named_by_its_limit(service: Service) -> None:
    source = "import torch\nfrom torch import nn\n\nHOG = torch.ones(8 * 1024 ** 3, dtype=torch.uint8)\n" + PROBLEM_TAIL
    job_id = service.post_evaluation(source)
    service.run_next()
    verdict = _failed_once_as_problem(service, job_id)
    assert "the problem's code exceeded its memory limit of 3.0 GB" in verdict["message"], verdict["message"]


FORKER = '''
import os
import subprocess
import time
import torch
from torch import nn

# `sh` stays alive as the sleep's parent (the `:` after it), its command line holding the token.
sleepers = [subprocess.Popen(["sh", "-c", "sleep 600; :", "{token}"], start_new_session=True)
            for _ in range({count})]
time.sleep(0.5)
assert all(p.poll() is None for p in sleepers), "the sleepers died early"
{after}
'''


def test_a_problems_processes_do_not_outlive_its_evaluation(service: Service) -> None:
    token = f"kl-t13-stray-{os.getpid()}-{time.monotonic_ns()}"
    source = FORKER.format(count=10, token=token, after="raise RuntimeError('forked and failed')") + PROBLEM_TAIL
    job_id = service.post_evaluation(source)
    service.run_next()
    verdict = _failed_once_as_problem(service, job_id)
    assert "forked and failed" in verdict["message"], verdict["message"]  # they ran until then
    assert processes_with(token) == []


def test_a_fork_happy_problem_is_stopped_at_its_process_limit(service: Service) -> None:
    token = f"kl-t13-forks-{os.getpid()}-{time.monotonic_ns()}"
    source = FORKER.format(count=60, token=token, after="time.sleep(120)") + PROBLEM_TAIL
    job_id = service.post_evaluation(source)
    service.run_next(process_limit=24)
    verdict = _failed_once_as_problem(service, job_id)
    assert "the problem's code exceeded its process limit of 24 processes" in verdict["message"], verdict["message"]
    assert processes_with(token) == []


def test_deleted_job_ids_are_never_handed_out_again(service: Service) -> None:
    first = service.post_evaluation(textwrap.dedent("import torch\nfrom torch import nn\n") + PROBLEM_TAIL)
    assert service.client.post(f"/jobs/{first}/cancel", headers=service.headers).status_code in (200, 202)
    response = service.client.delete(f"/jobs/{first}", headers=service.headers)
    assert response.status_code in (200, 204), response.text
    second = service.post_evaluation(textwrap.dedent("import torch\nfrom torch import nn\n") + PROBLEM_TAIL)
    assert second != first
    assert service.client.get(f"/jobs/{first}", headers=service.headers).status_code == 404
