"""The dashboard's pages as HTML (no browser): job page data, the attempt page, the problem pages,
the jobs list and its filters, the offline API docs, and the read-only ``GET /jobs/{id}/problem``
route."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from problems import load_problem, parse_problem
from store import JobKind, Target, create_job, session_scope, source_sha256
from tests.support.dashboard import (
    Service,
    add_attempt,
    create_key,
    create_running_job,
    login,
    seed_attempts,
    stage_event,
    store_problem,
    verdict,
    worker_recorder,
)
from vocabulary.verdict import Status, Verdict

pytestmark = pytest.mark.timeout(120)

POSTED = '''"""A posted problem."""
import torch
from torch import nn

rows = 64
cols = rows * 2


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(rows, cols, dtype=torch.float16)]


def get_init_inputs():
    return []
'''


def _page_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', html, re.S)
    assert match
    return json.loads(match.group(1))


def test_job_page_embeds_what_the_script_needs(service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    seed_attempts(service.factory, job_id, (1.2, None, 2.0))
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        page = client.get(f"/dashboard/jobs/{job_id}")
    data = _page_data(page.text)
    assert [a["n"] for a in data["attempts"]] == [1, 2, 3]
    assert data["best_n"] == 3 and data["state"] == "running"
    assert data["compile_line"] == pytest.approx(4.0 / 2.5)
    # Events up to the page's last one are in it: the stream resumes after it.
    assert data["last_event_id"] == 2 + 3  # queued, running, three attempts
    assert '<script src="/dashboard/static/dashboard.js" defer>' in page.text
    assert "tokens" in page.text and "of 400k" in page.text


def test_problem_page_shows_shapes_sizes_and_measured_work(service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, job_id, verdict(median_ms=1.0))
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        page = client.get("/dashboard/problems/level2/conv_tanh_scale_bias_maxpool").text
        empty = client.get("/dashboard/problems/level1/softmax").text
        missing = client.get("/dashboard/problems/level9/nothing")
    assert "[128, 8, 256, 256]" in page and "[8, 8, 64, 64]" in page  # cuda and cpu sizes
    assert "4.83G" in page and "310MB" in page and "NVIDIA H200" in page
    assert f'href="/dashboard/jobs/{job_id}"' in page
    assert "No measurements yet" in empty and "[16384, 4096]" in empty
    assert missing.status_code == 404


def test_posted_problem_page_and_api_route(service: Service) -> None:
    with session_scope(service.factory) as session:
        problem_row = store_problem(session, parse_problem(POSTED, problem_id="posted"), bundled=False)
        job = create_job(session=session, problem_id=problem_row, target=Target.CPU, owner_id=service.key_id,
                         kind=JobKind.AGENT)
        job_id = job.id
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        page = client.get(f"/dashboard/jobs/{job_id}/problem").text
    assert "[64, 128]" in page and "float16" in page
    api = httpx.get(f"{service.base_url}/jobs/{job_id}/problem", headers=service.headers())
    assert api.status_code == 200
    assert api.json()["source"] == POSTED and api.json()["bundled_id"] is None
    assert api.json()["declarations"]["mode"] == "train"
    assert httpx.get(f"{service.base_url}/jobs/{job_id}/problem").status_code == 401
    _, other = create_key(service.factory, "mallory")
    assert httpx.get(f"{service.base_url}/jobs/{job_id}/problem", headers={"X-API-Key": other}).status_code == 404


def test_jobs_list_filters_by_state_and_admin_sees_all(service: Service) -> None:
    mine = create_running_job(service.factory, service.key_id)
    bob_id, _ = create_key(service.factory, "bob")
    bobs = create_running_job(service.factory, bob_id)
    _, admin_key = create_key(service.factory, "root", is_admin=True)
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        page = client.get("/dashboard").text
        assert f'data-job-id="{mine}"' in page and f'data-job-id="{bobs}"' not in page
        assert f'data-job-id="{mine}"' not in client.get("/dashboard", params={"state": "succeeded"}).text
    with httpx.Client(base_url=service.base_url) as admin:
        login(admin, admin_key)
        page = admin.get("/dashboard").text
        assert f'data-job-id="{mine}"' in page and f'data-job-id="{bobs}"' in page


def test_static_files_are_a_fixed_set(service: Service) -> None:
    js = httpx.get(f"{service.base_url}/dashboard/static/dashboard.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{service.base_url}/dashboard/static/dashboard.css").status_code == 200
    pygments = httpx.get(f"{service.base_url}/dashboard/static/pygments.css")
    assert pygments.status_code == 200 and ".code .kn {" in pygments.text and "\npre {" not in pygments.text
    for name in ("..%2Fsession.py", "session.py", "%2Fetc%2Fpasswd"):
        assert httpx.get(f"{service.base_url}/dashboard/static/{name}").status_code == 404
    # Not part of the API's schema.
    paths = httpx.get(f"{service.base_url}/openapi.json").json()["paths"]
    assert "/jobs/{job_id}/problem" in paths and not any(p.startswith(("/dashboard", "/login")) for p in paths)


def test_job_page_embeds_trajectories_and_the_recent_events_the_now_panel_replays(service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0, temperature=0.3, strategy="tile first")
        recorder.message(trajectory_index=0, role="user", content="go")
    stage_event(service.factory, job_id, "compile", "started", attempt=1)
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        data = _page_data(client.get(f"/dashboard/jobs/{job_id}").text)
    [trajectory] = data["trajectories"]
    assert trajectory["index"] == 0 and trajectory["label"] == "trajectory 0 · T=0.3 · tile first"
    assert [e["type"] for e in data["recent_events"]] == ["state", "state", "trajectory", "message", "stage"]
    assert data["recent_events"][-1]["data"] == {**data["recent_events"][-1]["data"], "stage": "compile",
                                                 "phase": "started", "attempt": 1}
    assert data["last_event_id"] == data["recent_events"][-1]["id"] == 5 and data["server_now"]


def test_the_attempt_page_is_its_owners_and_escapes_what_it_shows(service: Service) -> None:
    job_id = create_running_job(service.factory, service.key_id)
    first = add_attempt(service.factory, job_id, verdict(Status.FAIL, message="<b>wrong</b>"),
                        source='x = "</pre><script>alert(1)</script>"\n')
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.attempt(trajectory_index=None, tool="benchmark", source='x = "fixed"\n', parent_sha256=source_sha256(
            'x = "</pre><script>alert(1)</script>"\n'), verdict=Verdict.from_dict(verdict(median_ms=2.0)))
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        page = client.get(f"/dashboard/jobs/{job_id}/attempts/{first}")
        second = client.get(f"/dashboard/jobs/{job_id}/attempts/{first + 1}").text
        missing = client.get(f"/dashboard/jobs/{job_id}/attempts/{first + 2}")
    assert page.status_code == 200
    assert "<script>alert(1)" not in page.text and "&lt;script&gt;alert" in page.text
    assert "<b>wrong</b>" not in page.text and "&lt;b&gt;wrong&lt;/b&gt;" in page.text
    assert 'id="diff-parent"' not in page.text  # attempt 1 has no parent …
    assert 'id="diff-best"' in page.text  # … but the job has a best, attempt 2
    # Attempt 2 was edited from attempt 1: its diff says so, line by line.
    assert 'id="parent-link"' in second and 'id="diff-parent"' in second and 'id="diff-best"' not in second
    assert '<tr class="del">' in second and '<tr class="add">' in second and "&lt;/pre&gt;" in second
    assert missing.status_code == 404 and "Attempt 3 of job" in missing.text
    _, other = create_key(service.factory, "mallory")
    with httpx.Client(base_url=service.base_url) as client:
        login(client, other)
        assert client.get(f"/dashboard/jobs/{job_id}/attempts/{first}").status_code == 404


def test_jobs_list_filters_by_target_and_problem_and_refuses_unknown_values(service: Service) -> None:
    cuda = create_running_job(service.factory, service.key_id)
    cpu = create_running_job(service.factory, service.key_id, target=Target.CPU, problem="level1/softmax")
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)

        def ids(**params: str) -> list[int]:
            page = client.get("/dashboard", params=params)
            assert page.status_code == 200, page.text
            return [int(i) for i in re.findall(r'data-job-id="(\d+)"', page.text)]

        assert ids() == ids(state="", target="", problem="") == [cpu, cuda]
        assert ids(target="cpu") == [cpu] and ids(target="cuda") == [cuda]
        assert ids(problem="level1/softmax") == [cpu]
        sha = load_problem("level1/softmax").sha256
        assert ids(problem=sha) == [cpu] and ids(problem="level9/none") == []
        assert ids(state="running", target="cuda", problem="level2/conv_tanh_scale_bias_maxpool") == [cuda]
        refused = client.get("/dashboard", params={"state": "lost"})
        assert refused.status_code == 400 and "lost" in refused.text


def test_docs_pages_load_everything_from_the_app(service: Service) -> None:
    for path, assets in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")), ("/redoc", ("redoc.standalone.js",))):
        page = httpx.get(f"{service.base_url}{path}")
        assert page.status_code == 200 and page.headers["content-security-policy"] == "img-src 'self' data:"
        urls = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
        assert urls and all(u.startswith("/") for u in urls), urls
        for name in assets:
            assert f"/docs/static/{name}" in page.text
            asset = httpx.get(f"{service.base_url}/docs/static/{name}")
            assert asset.status_code == 200 and len(asset.content) > 100_000
            assert asset.headers["content-type"].startswith(("text/javascript", "text/css"))
    assert httpx.get(f"{service.base_url}/docs/static/favicon.png").headers["content-type"] == "image/png"
    assert httpx.get(f"{service.base_url}/docs/static/..%2F__init__.py").status_code == 404
    assert httpx.get(f"{service.base_url}/docs/static/core.py").status_code == 404
    paths = httpx.get(f"{service.base_url}/openapi.json").json()["paths"]
    assert not any(p.startswith(("/docs", "/redoc")) for p in paths)


def test_an_attempts_profile_shows_ms_per_forward_and_the_candidates_own_code(service: Service) -> None:
    """The profile as the harness writes it (``ms_per_forward``): every time shown, each row's share,
    and the candidate's own code marked, its kernel on CUDA and its extension's function on the CPU."""
    job_id = create_running_job(service.factory, service.key_id)
    on_gpu = verdict(Status.PASS, median_ms=None, depth="profile")
    on_gpu["profile"] = [{"name": "void pool_tanh_scale_bias_kernel<4, 4, int>(float const*, float*, int)",
                          "calls": 1, "ms_per_forward": 0.75},
                         {"name": "sm90_xmma_fprop_implicit_gemm_f32f32", "calls": 1, "ms_per_forward": 2.25}]
    on_cpu = verdict(Status.PASS, median_ms=None, depth="profile", target="cpu", device="cpu")
    on_cpu["compile"]["extensions"] = [{"name": "kl_seed1_cpu", "key": "edc107b7", "cached": True}]
    on_cpu["profile"] = [{"name": "aten::mkldnn_convolution", "calls": 1, "ms_per_forward": 3.0},
                         {"name": "kl_seed1_cpu.pool_tanh_scale_bias", "calls": 1, "ms_per_forward": 1.0}]
    gpu_n = add_attempt(service.factory, job_id, on_gpu, tool="profile")
    cpu_n = add_attempt(service.factory, job_id, on_cpu, tool="profile")
    with httpx.Client(base_url=service.base_url) as client:
        login(client, service.key)
        gpu_page = client.get(f"/dashboard/jobs/{job_id}/attempts/{gpu_n}").text
        cpu_page = client.get(f"/dashboard/jobs/{job_id}/attempts/{cpu_n}").text

    def rows(page: str) -> list[list[str]]:
        table = re.search(r'<table class="grid" id="profile">(.*?)</table>', page, re.S)
        assert table, page
        return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
                for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]]

    assert rows(gpu_page) == [
        ["sm90_xmma_fprop_implicit_gemm_f32f32", "1", "2.250", "75.0%"],
        ["void pool_tanh_scale_bias_kernel&lt;4, 4, int&gt;(float const*, float*, int) yours", "1", "0.75", "25.0%"],
    ]
    assert "device time of each kernel" in gpu_page
    assert rows(cpu_page) == [["aten::mkldnn_convolution", "1", "3.000", "75.0%"],
                              ["kl_seed1_cpu.pool_tanh_scale_bias yours", "1", "1.000", "25.0%"]]
    assert "self CPU time of each op" in cpu_page and "—</td>" not in re.search(
        r'id="profile">(.*?)</table>', cpu_page, re.S).group(1)  # type: ignore[union-attr]
