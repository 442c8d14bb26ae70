"""``kernelloop up`` and ``kernelloop worker``, the Celery app's configuration, and what the worker imports."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from cli.processes import check_port_free, reuse_port_socket
from cli.service import WorkerPlan, detect_gpus, plan_workers
from config import Settings
from store import create_api_key, make_engine, make_session_factory, session_scope
from tests.support.network import free_port, wait_healthy
from tests.support.paths import REPO
from tests.support.worker import PROBLEM_ID, SEED1_CPU
from worker.celery_app import make_celery, queues_for
from worker.tasks import RUN_JOB
from worker.wiring import create_worker_app, target_for_queue


def test_the_celery_app_takes_one_job_at_a_time_and_acks_late() -> None:
    settings = Settings(broker_url="redis://127.0.0.1:6379/14", gpu_type="h200")
    app = make_celery(settings)
    conf = app.conf
    assert conf.task_acks_late is True and conf.worker_prefetch_multiplier == 1
    assert conf.worker_concurrency == 1 and conf.worker_pool == "solo"
    assert conf.task_serializer == "json" and list(conf.accept_content) == ["json"]
    assert [q.name for q in conf.task_queues] == ["cpu", "gpu-h200"] == list(queues_for(settings))
    assert conf.broker_transport_options["visibility_timeout"] >= 3600
    assert RUN_JOB not in app.tasks  # building the app registers nothing
    with pytest.raises(ValueError, match="embedded"):
        make_celery(Settings(broker_url=None))


def test_the_worker_app_registers_the_task_by_name(tmp_path: Path) -> None:
    settings = Settings(broker_url="redis://127.0.0.1:6379/14", data_dir=tmp_path)
    app = create_worker_app(settings)
    assert app.tasks[RUN_JOB].name == "kernelloop.run_job" and app.tasks[RUN_JOB].acks_late
    assert any(step.label == "lease reaper" for step in app.steps["worker"])
    assert target_for_queue("cpu").value == "cpu" and target_for_queue("gpu-a100").value == "cuda"
    with pytest.raises(ValueError):
        target_for_queue("celery")


def test_the_worker_process_never_imports_torch() -> None:
    code = ("import sys; import worker.main, worker.embedded, worker.runner, worker.recorder, cli.service\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))")
    env = {**os.environ, "KERNELLOOP_BROKER_URL": "redis://127.0.0.1:6379/14"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_gpus_are_found_without_torch(tmp_path: Path) -> None:
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    for bus in ("0000:19:00.0", "0000:3b:00.0"):
        (tmp_path / bus).mkdir()
    assert detect_gpus({}, proc_dir=tmp_path) == ["0", "1"]


def test_up_plans_one_worker_per_gpu_or_one_cpu_worker() -> None:
    assert plan_workers(gpus=["0", "1"]) == [WorkerPlan("cuda", "0"), WorkerPlan("cuda", "1")]
    assert plan_workers(gpus=[]) == [WorkerPlan("cpu")]
    assert plan_workers(gpus=[], workers=2) == [WorkerPlan("cpu"), WorkerPlan("cpu")]
    assert plan_workers(gpus=["0", "1"], workers=3)[2] == WorkerPlan("cuda", "0")
    assert plan_workers(gpus=["0"], target="cpu") == [WorkerPlan("cpu")]
    with pytest.raises(ValueError, match="no GPU"):
        plan_workers(gpus=[], target="cuda")


def _http(method: str, url: str, body: dict[str, Any] | None = None, key: str | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("X-API-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(p) for p in text)
    return found


#: A candidate that fails at import (after building the cached extension): its evaluation ends at
#: the compile stage in seconds, with no baselines to time.
BROKEN = SEED1_CPU + "\nraise RuntimeError('not today')\n"


@pytest.mark.slow
def test_up_runs_the_api_and_an_embedded_worker_and_stops_them_all(tmp_path: Path, harness_cache: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
    env.update({"KERNELLOOP_DATA_DIR": str(tmp_path), "KERNELLOOP_CACHE_DIR": str(harness_cache),
                "KERNELLOOP_POLL_INTERVAL_S": "0.1", "CUDA_VISIBLE_DEVICES": ""})
    argv = [sys.executable, "-c", "import typer, cli.service as s; typer.run(s.up)", "--port", str(port)]
    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, up, tmp_path / "up.log")
        (worker_pid,) = _children(up.pid)

        engine = make_engine(f"sqlite:///{tmp_path / 'kernelloop.db'}")
        factory: sessionmaker[Session] = make_session_factory(engine)
        with session_scope(factory) as session:
            key = create_api_key(session=session, name="test", owner="tester").plaintext
        engine.dispose()
        status, job = _http("POST", f"{base}/evaluations",
                            {"problem_id": PROBLEM_ID, "target": "cpu", "candidate_source": BROKEN}, key)
        assert status == 202, job
        deadline = time.monotonic() + 90
        while job["state"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, (tmp_path / "up.log").read_text()[-3000:]
            time.sleep(0.3)
            job = _http("GET", f"{base}/jobs/{job['id']}", key=key)[1]
        assert job["state"] == "succeeded", job
        status, attempts = _http("GET", f"{base}/jobs/{job['id']}/attempts", key=key)
        (attempt,) = attempts["items"]
        assert attempt["status"] == "error" and attempt["stage"] == "compile"

        up.send_signal(signal.SIGINT)  # Ctrl-C
        assert up.wait(timeout=30) is not None
        _assert_gone_soon([worker_pid], "the embedded worker outlived `up`")
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        log.close()


def _assert_gone_soon(pids: list[int], message: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in pids):
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


def test_an_embedded_worker_whose_parent_is_already_gone_exits(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELLOOP_DATA_DIR": str(tmp_path)}
    # Its parent is this test, not pid 1: as if `up` had died before the worker asked to die with it.
    argv = [sys.executable, "-m", "cli.service", "embedded-worker", "--target", "cpu", "--parent-pid", "1"]
    out = subprocess.run(argv, cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and "RuntimeWarning" not in out.stderr, out.stderr


def test_api_processes_listening_on_one_port_each_get_a_share_of_the_connections() -> None:
    port = free_port()
    listeners = [reuse_port_socket("127.0.0.1", port) for _ in range(2)]
    clients: list[socket.socket] = []
    try:
        for listener in listeners:
            listener.listen(128)
        for _ in range(64):  # the kernel hashes each connection (its client port) to one listener
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        accepted = []
        for listener in listeners:
            listener.setblocking(False)
            count = 0
            while True:
                try:
                    listener.accept()[0].close()
                except BlockingIOError:
                    break
                count += 1
            accepted.append(count)
        # One shared socket would give every connection to whichever process woke first.
        assert sum(accepted) == 64 and min(accepted) > 0, accepted
    finally:
        for sock in [*clients, *listeners]:
            sock.close()


def test_serve_refuses_a_port_that_anything_listens_on_even_with_reuse_port(tmp_path: Path) -> None:
    port = free_port()
    with reuse_port_socket("127.0.0.1", port) as other:
        other.listen(1)
        # Joining it would hand that listener a share of our connections.
        with pytest.raises(OSError):
            check_port_free("127.0.0.1", port)
        env = {**os.environ, "KERNELLOOP_DATA_DIR": str(tmp_path)}
        out = subprocess.run([sys.executable, "-m", "cli.service", "serve", "--workers", "2", "--port", str(port)],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and "cannot listen on 127.0.0.1" in out.stderr, out.stderr
    check_port_free("127.0.0.1", port)


def test_serve_with_workers_restarts_a_killed_api_process_and_stops_them_all(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    env["KERNELLOOP_DATA_DIR"] = str(tmp_path)
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        serve = subprocess.Popen([sys.executable, "-m", "cli.service", "serve", "--workers", "2", "--port", str(port)],
                                 cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(base, serve, log_path)
        # One process answering is not both started: a child killed before it said it was ready is
        # a failed start (fatal), not a crash to restart. `serve` says when all are up.
        deadline = time.monotonic() + 60
        while "API on http://" not in log_path.read_text():
            assert time.monotonic() < deadline and serve.poll() is None, log_path.read_text()
            time.sleep(0.1)
        first = sorted(_children(serve.pid))
        assert len(first) == 2, first
        os.kill(first[0], signal.SIGKILL)  # as the OOM killer would
        deadline = time.monotonic() + 60
        while len(set(_children(serve.pid)) - set(first)) != 1:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        replacement = (set(_children(serve.pid)) - set(first)).pop()
        # The replacement serves: with the survivor killed too, the port still answers.
        os.kill(first[1], signal.SIGKILL)
        wait_healthy(base, serve, log_path)
        assert re.search(r"API process [12]/2 exited with -9; restarting", log_path.read_text())

        last = _children(serve.pid)
        assert replacement in last
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0, log_path.read_text()
        _assert_gone_soon(last, "an API process outlived `serve`")
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def test_worker_refuses_the_embedded_mode() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    out = subprocess.run([sys.executable, "-c", "import typer, cli.service as s; typer.run(s.worker)"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "KERNELLOOP_BROKER_URL" in out.stderr


COMPOSE = REPO / "docker-compose.yml"


def test_the_compose_file_describes_the_production_topology() -> None:
    yaml = pytest.importorskip("yaml")
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {"postgres", "redis", "migrate", "api", "worker-gpu0"} <= set(services)
    assert services["migrate"]["command"] == ["alembic", "upgrade", "head"]
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    gpu = services["worker-gpu0"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and device["device_ids"] == ["0"]
    assert {"seccomp=unconfined", "apparmor=unconfined"} <= set(gpu["security_opt"])
    assert "privileged" not in gpu and "cap_add" not in gpu
    assert gpu["command"][-2:] == ["--queue", "gpu-${KERNELLOOP_GPU_TYPE:-h200}"]
    env = gpu["environment"]
    assert env["KERNELLOOP_BROKER_URL"].startswith("redis://") and env["KERNELLOOP_WORKER_TARGET"] == "cuda"
    assert env["KERNELLOOP_DATABASE_URL"].startswith("postgresql+psycopg://")
    for name in ("migrate", "api", "worker-gpu0"):
        assert services[name]["build"] == "." and services[name]["image"] == "kernelloop:latest"
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "util-linux" in dockerfile and "python3-dev" in dockerfile and "-devel-" in dockerfile


def _compose_command() -> list[str] | None:
    """A Compose implementation that validates files offline: the docker CLI's plugin
    (``docker compose``), else the standalone ``docker-compose`` (Debian's package, which
    scripts/ensure-compose installs). ``config`` needs no Docker engine with either."""
    docker = shutil.which("docker")
    if docker is not None and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone is not None else None


def _compose_config(compose: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    # No engine is asked: point DOCKER_HOST at nothing, so a check that tried would fail here.
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run([*compose, "-f", str(path), "--project-directory", str(REPO), "config", "--quiet"],
                          capture_output=True, text=True, cwd=REPO, env=env, check=False)


def test_docker_compose_config_validates_the_file(tmp_path: Path) -> None:
    compose = _compose_command()
    if compose is None:
        pytest.skip("no `docker compose` nor `docker-compose` here (scripts/ensure-compose installs one)")
    out = _compose_config(compose, COMPOSE)
    assert out.returncode == 0, out.stderr
    # The validator is real: a misspelt key of the GPU worker is refused.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace('shm_size: "8gb"', 'shm_sise: "8gb"', 1))
    out = _compose_config(compose, broken)
    assert out.returncode != 0 and "shm_sise" in out.stdout + out.stderr
