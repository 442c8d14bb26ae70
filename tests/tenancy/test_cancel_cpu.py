"""Issue 13, observation 3 (cancel): ``POST /jobs/{id}/cancel`` stops whatever runs for the job
within seconds — here a reference start that would hang for its whole time limit — killing the
sandbox's process tree and releasing the device's timing lock."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from tests.support.processes import sandbox_processes
from tests.support.tenancy import PROBLEM_TAIL, Service
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: What the issue asks: cancel to the job's sandboxes gone.
CANCEL_TARGET_S = 5.0


def _lock_free(path: os.PathLike[str]) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def test_cancel_kills_a_hanging_reference_start_and_frees_the_lock(service: Service) -> None:
    hang = "import torch\nfrom torch import nn\n" + PROBLEM_TAIL.replace(
        "def get_inputs():\n", "def get_inputs():\n    while True:\n        pass\n")
    job_id = service.post_evaluation(hang)
    worker = service.run_in_background()  # the reference's start limit is 90 s: it would hang that long
    lock = service.cache / "locks" / "cpu.lock"
    wait_for(lambda: bool(sandbox_processes(role="reference")), timeout=120, interval=0.05,
             what="the reference sandbox")
    time.sleep(1.0)  # inside get_inputs by now (or about to be)
    assert not _lock_free(lock), "the evaluation holds the cpu timing lock while it runs"

    cancelled_at = time.monotonic()
    response = service.client.post(f"/jobs/{job_id}/cancel", headers=service.headers)
    assert response.status_code in (200, 202), response.text
    wait_for(lambda: not sandbox_processes(), timeout=30, interval=0.05, what="the sandboxes to go")
    gone_s = time.monotonic() - cancelled_at
    wait_for(lambda: _lock_free(lock), timeout=10, interval=0.05, what="the lock")
    lock_s = time.monotonic() - cancelled_at
    print(f"TENANCY-FIGURE cancel -> sandboxes gone: {gone_s:.2f} s; lock free: {lock_s:.2f} s")
    assert gone_s < CANCEL_TARGET_S and lock_s < CANCEL_TARGET_S
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert service.state(job_id) == "cancelled"
    assert service.attempts(job_id) == []  # a cancelled evaluation is no attempt of the candidate
