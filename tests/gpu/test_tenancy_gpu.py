"""On an H200 (`pytest -m gpu tests/gpu/test_tenancy_gpu.py -s`): issue 13 on cuda.

A hostile problem's module code, run by a cuda reference sandbox, reads and writes nothing of other
tenants (cache, service directory, home) and leaves no process behind; a cancel kills a reference
start that would hang (after the problem touched the GPU) within seconds and frees the device's
timing lock. Needs only torch, pytest and the harness; figures go to stdout (-s) and, when
KERNELLOOP_GPU_REPORT is set, to that JSON-lines file.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import threading
import time
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, ReferenceFailed, Timeouts
from problems.spec import parse_problem
from tests.support.gpu import report
from tests.support.paths import REPO
from vocabulary.verdict import ErrorKind

pytestmark = pytest.mark.gpu

CANCEL_TARGET_S = 5.0
CANDIDATE = """
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
"""
TAIL = """
class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(1024, device="cuda")]


def get_init_inputs():
    return []
"""
PROBE = '''
import os
import subprocess
import time
import torch
from torch import nn

torch.zeros(1, device="cuda")  # the problem touches the GPU before it probes
SLEEPERS = [subprocess.Popen(["sh", "-c", "sleep 600; :", {token!r}], start_new_session=True) for _ in range(5)]
leaks = []
for path in {reads!r}:
    try:
        with open(path, "rb") as fh:
            leaks.append(f"read {{path}}: {{fh.read(40)!r}}")
    except OSError:
        pass
for path in {lists!r}:
    try:
        names = os.listdir(path)
    except OSError:
        continue
    if any(n.startswith(("referee-other", "kl_ext_other")) for n in names):
        leaks.append(f"listed {{path}}: {{names}}")
for path in {writes!r}:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("poisoned")
    except OSError:
        pass
time.sleep(0.5)
alive = sum(p.poll() is None for p in SLEEPERS)
raise RuntimeError(f"PROBED ({{alive}} sleepers alive): " + (f"LEAK {{leaks}}" if leaks else "nothing"))
'''


def _device_lock_module():  # type: ignore[no-untyped-def]
    """`worker.devicelock` by path: the GPU machine has no service dependencies for `worker`."""
    spec = importlib.util.spec_from_file_location("kl_devicelock", REPO / "worker" / "devicelock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(cache: Path, data_dir: Path, **changes: object) -> HarnessOptions:
    return HarnessOptions(cache_dir=cache, hidden_paths=(data_dir, cache / "locks"), compile_baseline=False,
                          pch=False, trusted_builds=False, prestart=False, trials=2,
                          timeouts=Timeouts(reference_start_s=120.0, compile_s=300.0)).replace(**changes)


def _processes(marker: str, within: Path | None = None) -> list[int]:
    """Live processes whose command line holds ``marker``; with ``within``, only those of sandboxes
    under that cache (the warden names its sandbox's directory, a role runs in it): other tests'
    sandboxes may run beside this one (pytest-xdist)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                zombie = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker not in cmd or zombie or int(entry) == os.getpid():
            continue
        if within is not None:
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                cwd = ""
            if str(within) not in cmd and not cwd.startswith(str(within)):
                continue
        found.append(int(entry))
    return found


def test_a_hostile_cuda_problem_reads_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, data_dir, service_dir = tmp_path / "cache", tmp_path / "data", tmp_path / "service"
    for path in (data_dir, service_dir):
        path.mkdir()
    other_run = cache / "runs" / "referee-other-tenant" / "attempt-1"
    other_run.mkdir(parents=True)
    (other_run / "candidate.py").write_text("OTHER_TENANT_CANDIDATE")
    other_build = cache / "builds" / "kl_ext_other_abc"
    other_build.mkdir(parents=True)
    (other_build / "main.cu").write_text("OTHER_TENANT_KERNEL")
    (data_dir / "kernelloop.db").write_text("api_keys")
    (service_dir / "api-key.txt").write_text("kl_live_SECRET")
    home_canary = Path.home() / f".kl-tenancy-gpu-{os.getpid()}"
    home_canary.write_text("HOME_SECRET")
    monkeypatch.chdir(service_dir)
    token = f"kl-t13-gpu-stray-{os.getpid()}"
    writes = [cache / "inductor" / "poison.py", cache / "builds" / "poison", cache / "baselines" / "poison.json",
              cache / "problem-caches" / ("0" * 32) / "poison", service_dir / "poison", data_dir / "poison"]
    source = PROBE.format(
        token=token,
        reads=[str(other_run / "candidate.py"), str(other_build / "main.cu"), str(service_dir / "api-key.txt"),
               str(data_dir / "kernelloop.db"), str(home_canary), str(REPO / "pyproject.toml")],
        lists=[str(cache / "runs"), str(cache / "builds"), str(cache)],
        writes=[str(p) for p in writes]) + TAIL
    problem = parse_problem(source, problem_id="hostile-gpu")
    try:
        with Referee(problem, "cuda", _options(cache, data_dir)) as referee, \
                pytest.raises(ReferenceFailed) as failed:
            referee.start_reference()
    finally:
        home_canary.unlink()
    assert failed.value.kind is ErrorKind.PROBLEM
    message = str(failed.value)
    report({"test": "tenancy_hostile_problem_cuda", "message": message[:300]}, tag="TENANCY-GPU")
    assert "(5 sleepers alive): nothing" in message, message
    assert not [p for p in writes if p.exists()]
    time.sleep(1.0)
    assert _processes(token) == [], "the problem's processes outlived its reference sandbox"


def test_cancel_kills_a_cuda_reference_start_and_frees_the_lock(tmp_path: Path) -> None:
    devicelock = _device_lock_module()
    cache, data_dir = tmp_path / "cache", tmp_path / "data"
    data_dir.mkdir()
    source = ("import torch\nfrom torch import nn\n\ntorch.zeros(1, device='cuda')\n"
              + TAIL.replace("def get_inputs():\n", "def get_inputs():\n    while True:\n        pass\n"))
    referee = Referee(parse_problem(source, problem_id="hang-gpu"), "cuda", _options(cache, data_dir))
    key = devicelock.current_device_key("cuda")
    verdicts = []

    def timed_evaluation() -> None:  # what the worker does for a benchmark: the lock, then evaluate
        with devicelock.device_lock(cache, key):
            verdicts.append(referee.evaluate(CANDIDATE))

    worker = threading.Thread(target=timed_evaluation, daemon=True)
    worker.start()
    deadline = time.monotonic() + 300
    while not _processes("harness.sandboxed.roles reference ", cache):
        assert time.monotonic() < deadline and worker.is_alive(), "the reference sandbox never started"
        time.sleep(0.1)
    time.sleep(3.0)  # CUDA initialised, spinning in get_inputs
    lock_path = cache / "locks" / f"{key}.lock"

    def lock_free() -> bool:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    assert not lock_free()
    cancelled_at = time.monotonic()
    referee.cancel()
    while _processes("harness.sandboxed.roles reference ", cache) or _processes("warden.py", cache):
        assert time.monotonic() - cancelled_at < 30, "the reference sandbox survived the cancel"
        time.sleep(0.05)
    gone_s = time.monotonic() - cancelled_at
    worker.join(timeout=30)
    while not lock_free():
        assert time.monotonic() - cancelled_at < 30, "the lock was not released"
        time.sleep(0.05)
    lock_s = time.monotonic() - cancelled_at
    referee.close()
    report({"test": "tenancy_cancel_cuda", "stages_gone_s": round(gone_s, 3), "lock_free_s": round(lock_s, 3)},
           tag="TENANCY-GPU")
    assert verdicts and verdicts[0].message.startswith("cancelled"), verdicts
    assert gone_s < CANCEL_TARGET_S and lock_s < CANCEL_TARGET_S
