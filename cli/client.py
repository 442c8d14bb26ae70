"""The service's command-line client: ``kernelloop submit``, ``watch``, ``replay`` and ``bench``.

Plain Typer command functions, registered by `cli.main`::

    app.command("submit")(client.submit)
    app.command("watch")(client.watch)
    app.command("replay")(client.replay)
    app.command("bench")(client.bench)

(`client_commands` is the same four as a Typer app: ``python -m cli.client watch 12``.)

Where the API is: ``--api``/``--key`` flags, else ``KERNELLOOP_API_URL``/``KERNELLOOP_API_KEY``,
else ``api_url``/``api_key`` in ``$XDG_CONFIG_HOME/kernelloop/config.toml`` (default
``~/.config/kernelloop/config.toml``), else ``http://127.0.0.1:8000`` and no key.

Exit codes (`ExitCode`): ``watch`` and a following ``submit`` exit by the job's final state
(succeeded 0, failed 1, cancelled 3); ``replay`` by the local verdict (pass 0, fail or suspicious
1, error 2); ``bench`` 0 once every job ended, 1 on ``--timeout``; misuse, an unreachable API or
an API error 2. httpx is imported when a command runs, so ``kernelloop eval`` needs none of this.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from harness import HarnessOptions, Status, Target, Verdict, evaluate
from problems import Problem, ProblemFormatError, bundled_ids, parse_problem, read_problem_file

if TYPE_CHECKING:
    import httpx

__all__ = [
    "BENCH_THRESHOLDS",
    "DEFAULT_API_URL",
    "ApiClient",
    "ApiError",
    "BenchResult",
    "BenchSummary",
    "ClientConfig",
    "ExitCode",
    "SseEvent",
    "bench",
    "client_commands",
    "export_standalone",
    "parse_sse",
    "read_suite",
    "replay",
    "resolve_config",
    "submit",
    "summarize",
    "watch",
]

DEFAULT_API_URL = "http://127.0.0.1:8000"
ENV_API_URL = "KERNELLOOP_API_URL"
ENV_API_KEY = "KERNELLOOP_API_KEY"
#: fast_p thresholds (KernelBench): correct and more than p times faster than eager PyTorch.
BENCH_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
#: Connect and write time limits of every request; reads wait longer on streams (below).
HTTP_TIMEOUT_S = 30.0
#: A stream sends a keep-alive comment every 15 s; a silence four times as long is a dead connection.
STREAM_READ_TIMEOUT_S = 60.0
#: Reconnections in a row without receiving anything before ``watch`` gives up.
MAX_RECONNECTS = 5
RECONNECT_DELAY_S = 1.0
#: ``bench`` polls its jobs this often by default.
BENCH_POLL_S = 2.0
#: The live view of a terminal redraws at most this often.
LIVE_REFRESH_PER_S = 4
_TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})

err = Console(stderr=True)
out = Console()


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    CANCELLED = 3


JOB_EXIT_CODES = {"succeeded": ExitCode.OK, "failed": ExitCode.FAILED, "cancelled": ExitCode.CANCELLED}
VERDICT_EXIT_CODES = {
    Status.PASS: ExitCode.OK,
    Status.FAIL: ExitCode.FAILED,
    Status.SUSPICIOUS: ExitCode.FAILED,
    Status.ERROR: ExitCode.USAGE,
}


# -- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientConfig:
    """Where the API is and which key to send; ``origin`` says where each came from."""

    api_url: str
    api_key: str | None
    origin: Mapping[str, str] = field(default_factory=dict)


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "kernelloop" / "config.toml"


def resolve_config(
    *,
    api_url: str | None,
    api_key: str | None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> ClientConfig:
    """Flags, then the environment, then the config file, then the defaults.

    Raises:
        ValueError: the config file exists but is not valid TOML.
    """
    env = os.environ if environ is None else environ
    path = config_path or default_config_path(env)
    file_values: dict[str, Any] = {}
    if path.is_file():
        try:
            file_values = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path} is not valid TOML: {exc}") from None
    origin: dict[str, str] = {}

    def pick(name: str, flag: str | None, env_name: str, default: str | None) -> str | None:
        for value, where in ((flag, "flag"), (env.get(env_name), env_name), (file_values.get(name), str(path))):
            if value:
                origin[name] = where
                return str(value)
        origin[name] = "default"
        return default

    url = pick("api_url", api_url, ENV_API_URL, DEFAULT_API_URL)
    assert url is not None
    key = pick("api_key", api_key, ENV_API_KEY, None)
    return ClientConfig(api_url=url.rstrip("/"), api_key=key, origin=origin)


# -- HTTP ----------------------------------------------------------------------------------------


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        err.print("[red]error:[/red] the client needs httpx: pip install 'kernelloop[service]'")
        raise typer.Exit(ExitCode.USAGE) from None
    return httpx


class ApiError(Exception):
    """The API answered with an error (``detail`` says what to fix), or could not be reached."""

    def __init__(self, detail: str, *, status: int | None = None, code: str | None = None) -> None:
        self.detail = detail
        self.status = status
        self.code = code
        super().__init__(f"{detail} (HTTP {status}, {code})" if status else detail)


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event: ``id`` (the job's event number), ``type`` and the decoded ``data``."""

    id: int | None
    type: str
    data: Any


def parse_sse(lines: Iterable[str]) -> Iterator[SseEvent]:
    """Events from the lines of a ``text/event-stream`` (comments and ``retry:`` skipped)."""
    event_id: int | None = None
    event_type = "message"
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    payload: Any = json.loads(text)
                except ValueError:
                    payload = text
                yield SseEvent(id=event_id, type=event_type, data=payload)
            event_id, event_type, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
        elif name == "id" and value.isdigit():
            event_id = int(value)


class ApiClient:
    """A small synchronous client of the kernelloop API (httpx).

    Args:
        config: where the API is and the key to send.
        transport: an httpx transport for tests (``httpx.MockTransport``); default the network.
    """

    def __init__(self, config: ClientConfig, *, transport: httpx.BaseTransport | None = None) -> None:
        httpx = _httpx()
        self.config = config
        headers = {"Accept": "application/json", "User-Agent": "kernelloop-cli"}
        if config.api_key:
            headers["X-API-Key"] = config.api_key
        self._http = httpx.Client(
            base_url=config.api_url, headers=headers, timeout=httpx.Timeout(HTTP_TIMEOUT_S), transport=transport
        )
        self._httpx = httpx

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except self._httpx.TransportError as exc:
            raise ApiError(f"cannot reach the API at {self.config.api_url}: {exc}") from None
        return self._answer(response)

    def _answer(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                body = response.json()
                detail, code = str(body.get("detail")), body.get("code")
            except ValueError:
                detail, code = response.text[:300] or response.reason_phrase, None
            raise ApiError(detail, status=response.status_code, code=code)
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def submit_job(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._request("POST", "/jobs", json=dict(body)))

    def get_job(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("GET", f"/jobs/{job_id}"))

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        after: int | None = 0
        while after is not None:
            page = self._request("GET", f"/jobs/{job_id}/attempts", params={"after": after, "limit": 500})
            found.extend(page["items"])
            after = page["next_cursor"]
        return found

    def best(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("GET", f"/jobs/{job_id}/best"))

    def job_problem(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("GET", f"/jobs/{job_id}/problem"))

    def events(self, job_id: int, *, after: int = 0) -> Iterator[SseEvent]:
        """The job's events after ``after`` until the server closes the stream."""
        timeout = self._httpx.Timeout(HTTP_TIMEOUT_S, read=STREAM_READ_TIMEOUT_S)
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
        try:
            with self._http.stream("GET", f"/jobs/{job_id}/events", headers=headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    self._answer(response)
                yield from parse_sse(response.iter_lines())
        except self._httpx.TransportError as exc:
            raise ApiError(f"the event stream of job {job_id} broke: {exc}") from None


# -- shared options and output -------------------------------------------------------------------

ApiOpt = Annotated[str | None, typer.Option("--api", help=f"API base URL (or ${ENV_API_URL}, or the config file)")]
KeyOpt = Annotated[str | None, typer.Option("--key", help=f"API key (or ${ENV_API_KEY}, or the config file)")]


def _client(api: str | None, key: str | None) -> ApiClient:
    try:
        config = resolve_config(api_url=api, api_key=key)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    if not config.api_key:
        err.print(
            f"[yellow]warning:[/yellow] no API key: pass --key, set ${ENV_API_KEY}, or put api_key in "
            f"{default_config_path()}"
        )
    return ApiClient(config)


def _fail(exc: ApiError) -> typer.Exit:
    err.print(f"[red]error:[/red] {exc.detail}" + (f" [dim](HTTP {exc.status}, {exc.code})[/]" if exc.status else ""))
    return typer.Exit(ExitCode.USAGE)


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _ms(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"{v:.3f}" if v >= 1 else f"{v:.3g}"


def _x(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"{v:.2f}×"


def _pct(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"{v:.1f}%"


def _usd(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"${v:.4f}" if 0 < v < 0.01 else f"${v:.2f}"


def _status_text(status: str) -> Text:
    colour = {"pass": "green", "fail": "red", "error": "red", "suspicious": "yellow"}.get(status, "white")
    return Text(status, style=colour)


def _problem_name(job: Mapping[str, Any]) -> str:
    problem = job.get("problem") or {}
    return problem.get("bundled_id") or f"posted {str(problem.get('sha256', ''))[:10]}"


# -- watch -----------------------------------------------------------------------------------------


@dataclass
class JobView:
    """What ``watch`` shows: the job as last read, and its attempts as their events arrived."""

    job: dict[str, Any]
    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)

    def apply(self, event: SseEvent) -> str | None:
        """Take one event in; returns a one-line summary of it for a log, if it says anything."""
        if event.type == "attempt" and isinstance(event.data, dict) and "n" in event.data:
            a = event.data
            self.attempts[int(a["n"])] = {**self.attempts.get(int(a["n"]), {}), **a}
            best = "  [bold green]best[/]" if a.get("best") else ""
            return (
                f"attempt {a['n']:>3}  {a.get('tool', ''):<10} {a.get('status', ''):<10} "
                f"{_ms(a.get('median_ms')):>9} ms  {_x(a.get('speedup_vs_eager')):>8} vs eager  "
                f"{_x(a.get('speedup_vs_compile')):>8} vs compile  {_pct(a.get('pct_of_sol')):>7} of SOL{best}"
            )
        if event.type == "state" and isinstance(event.data, dict):
            self.job["state"] = event.data.get("state", self.job.get("state"))
            reason = event.data.get("error") or event.data.get("reason")
            return f"job {self.job['id']} is {self.job['state']}" + (f": {reason}" if reason else "")
        if event.type == "cancel_requested":
            return f"job {self.job['id']}: cancel requested"
        return None

    def budget_line(self) -> str:
        job = self.job
        budgets = job.get("budgets") or {}
        tokens = int(job.get("tokens_in") or 0) + int(job.get("tokens_out") or 0)
        parts = [f"tokens {tokens:,}" + (f" / {int(budgets['max_tokens']):,}" if budgets.get("max_tokens") else "")]
        parts.append(f"cost {_usd(job.get('cost_usd'))}" + (
            f" / {_usd(budgets['max_cost_usd'])}" if budgets.get("max_cost_usd") is not None else ""
        ))
        started = job.get("started_at")
        if started:
            end = job.get("finished_at")
            t1 = datetime.fromisoformat(end) if end else datetime.now(UTC)
            t0 = datetime.fromisoformat(started)
            t0, t1 = (t.replace(tzinfo=t.tzinfo or UTC) for t in (t0, t1))
            elapsed = max(0.0, (t1 - t0).total_seconds())
            wall = budgets.get("wall_clock_s")
            parts.append(f"wall {elapsed:.0f} s" + (f" / {float(wall):.0f} s" if wall else ""))
        parts.append(f"GPU {float(job.get('gpu_seconds') or 0):.1f} s")
        return " · ".join(parts)

    def table(self) -> Table:
        job = self.job
        best = job.get("best") or {}
        table = Table(
            title=f"job {job['id']} · {_problem_name(job)} · {job.get('target')} · {job.get('state')}",
            caption=self.budget_line(),
        )
        for name, justify in (
            ("#", "right"), ("traj", "right"), ("tool", "left"), ("status", "left"), ("stage", "left"),
            ("median ms", "right"), ("vs eager", "right"), ("vs compile", "right"), ("% SOL", "right"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for n in sorted(self.attempts):
            a = self.attempts[n]
            mark = " ★" if best.get("n") == n else ""
            table.add_row(
                f"{n}{mark}",
                "—" if a.get("trajectory_id") is None else str(a["trajectory_id"]),
                str(a.get("tool", "")),
                _status_text(str(a.get("status", ""))), str(a.get("stage", "")), _ms(a.get("median_ms")),
                _x(a.get("speedup_vs_eager")), _x(a.get("speedup_vs_compile")), _pct(a.get("pct_of_sol")),
            )
        return table


def follow_job(client: ApiClient, job_id: int, *, console: Console, live: bool | None = None) -> str:
    """Show a job's attempts as they arrive until it ends; returns its final state.

    On a terminal the table redraws in place; elsewhere (CI logs) one line per event, then the
    table. A stream that closes early (the server rebalances long streams) is resumed from the
    last event id.

    Raises:
        ApiError: the API refused, or the stream broke ``MAX_RECONNECTS`` times in a row.
    """
    view = JobView(job=client.get_job(job_id))
    live = console.is_terminal if live is None else live
    after, failures, last_refresh = 0, 0, 0.0
    final: str | None = None
    live_view = Live(view.table(), console=console, refresh_per_second=LIVE_REFRESH_PER_S) if live else None
    if live_view is not None:
        live_view.start()
    try:
        while final is None:
            try:
                for event in client.events(job_id, after=after):
                    failures = 0
                    if event.type == "end":
                        data = event.data if isinstance(event.data, dict) else {}
                        if data.get("deleted"):
                            raise ApiError(f"job {job_id} was deleted while watched", status=404, code="not_found")
                        final = str(data.get("state") or "")
                        break
                    if event.id is not None:
                        after = event.id
                    line = view.apply(event)
                    now = time.monotonic()
                    if event.type == "state" or now - last_refresh > 1.0:
                        view.job = client.get_job(job_id)
                        last_refresh = now
                    if live_view is not None:
                        live_view.update(view.table())
                    elif line:
                        console.print(line, highlight=False)
            except ApiError as exc:
                if exc.status is not None:
                    raise
                failures += 1
                if failures > MAX_RECONNECTS:
                    raise
                err.print(f"[yellow]{exc.detail}; reconnecting…[/]")
            if final is None:
                time.sleep(RECONNECT_DELAY_S)
        view.job = client.get_job(job_id)
        if live_view is not None:
            live_view.update(view.table())
    finally:
        if live_view is not None:
            live_view.stop()
    if live_view is None:
        console.print(view.table())
    job = view.job
    if job.get("error"):
        console.print(f"[red]error:[/red] {job['error']}", highlight=False)
    best = job.get("best")
    if best:
        console.print(
            f"best: attempt {best['n']}, {_ms(best.get('median_ms'))} ms, {_x(best.get('speedup_vs_eager'))} vs eager, "
            f"{_x(best.get('speedup_vs_compile'))} vs torch.compile — `kernelloop replay {job_id}`",
            highlight=False,
        )
    return final or str(job.get("state"))


def watch(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
) -> None:
    """Follow a job live (attempts, speedups, % of SOL, tokens, cost, budgets); exit by its final state."""
    with _client(api, key) as client:
        try:
            state = follow_job(client, job, console=out)
        except ApiError as exc:
            raise _fail(exc) from None
    raise typer.Exit(JOB_EXIT_CODES.get(state, ExitCode.FAILED))


# -- submit ----------------------------------------------------------------------------------------


def _problem_fields(problem: str) -> dict[str, str]:
    """``problem_id`` for a bundled id, else ``problem_source`` read from the file."""
    if problem in bundled_ids():
        return {"problem_id": problem}
    path = Path(problem)
    if path.is_file():
        return {"problem_source": path.read_text()}
    if "/" in problem and not path.suffix:
        return {"problem_id": problem}  # the server may know ids this install does not; it says if not
    err.print(f"[red]error:[/red] {problem!r} is neither a bundled problem id (`kernelloop problems list`) nor a file")
    raise typer.Exit(ExitCode.USAGE)


def submit(
    problem: Annotated[str, typer.Argument(help="a bundled problem id or a problem file")],
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[Target | None, typer.Option("--target", "-t", help="cuda or cpu (default: the server's)")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help="a server-side LLM profile (default: the server's)")] = None,
    trajectories: Annotated[int | None, typer.Option(min=1, help="independent chats; the best wins")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="token budget of the job")] = None,
    max_cost: Annotated[float | None, typer.Option(min=0, help="cost budget of the job, USD")] = None,
    turns: Annotated[int | None, typer.Option(min=1, help="assistant turns per trajectory")] = None,
    wall_clock: Annotated[float | None, typer.Option(min=1, help="wall-clock budget, seconds")] = None,
    target_speedup: Annotated[float | None, typer.Option(help="stop once a verified attempt is this fast")] = None,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", help="watch the job until it ends")] = True,
) -> None:
    """Queue an agent job; print its id (alone on stdout's first line), then watch it unless --no-follow."""
    budgets = {
        "max_tokens": max_tokens, "max_cost_usd": max_cost, "turns": turns, "wall_clock_s": wall_clock,
        "target_speedup": target_speedup,
    }
    body: dict[str, Any] = {**_problem_fields(problem), "budgets": {k: v for k, v in budgets.items() if v is not None}}
    if target is not None:
        body["target"] = target.value
    if llm is not None:
        body["llm_profile"] = llm
    if trajectories is not None:
        body["trajectories"] = trajectories
    with _client(api, key) as client:
        try:
            job = client.submit_job(body)
            out.print(str(job["id"]), highlight=False)
            err.print(
                f"job {job['id']} {job['state']}: {_problem_name(job)} on {job['target']} "
                f"(LLM {job.get('llm_profile')}); dashboard: {client.config.api_url}/dashboard/jobs/{job['id']}",
                highlight=False,
            )
            if not follow:
                return
            state = follow_job(client, int(job["id"]), console=out)
        except ApiError as exc:
            raise _fail(exc) from None
    raise typer.Exit(JOB_EXIT_CODES.get(state, ExitCode.FAILED))


# -- replay ----------------------------------------------------------------------------------------


def local_arch_list() -> str | None:
    """``TORCH_CUDA_ARCH_LIST`` for this machine's first GPU (``9.0a`` on Hopper), from nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        result = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    caps = result.stdout.split()
    if result.returncode != 0 or not caps:
        return None
    # The arch-specific "a" targets (wgmma, setmaxnreg …) exist from Hopper on; the harness's own
    # default is 9.0a for the H200.
    return f"{caps[0]}a" if caps[0] in ("9.0", "10.0", "10.3", "12.0") else caps[0]


def _has_local_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl")


@dataclass(frozen=True)
class _Figures:
    """One column of the replay table."""

    status: str
    compile: str
    correct: str
    candidate_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    vs_eager: float | None
    vs_compile: float | None
    pct_sol: float | None
    device: str

    @classmethod
    def of(cls, verdict: Verdict) -> _Figures:
        compile_text = "—"
        if verdict.compile is not None:
            cached = bool(verdict.compile.extensions) and all(e.get("cached") for e in verdict.compile.extensions)
            compile_text = ("ok" if verdict.compile.ok else "failed") + f" {verdict.compile.seconds:.1f} s" + (
                " (cached)" if cached else ""
            )
        passed = sum(t.passed for t in verdict.trials)
        baselines = verdict.baselines
        return cls(
            status=verdict.status.value,
            compile=compile_text,
            correct=f"{passed}/{len(verdict.trials)} trials" if verdict.trials else "—",
            candidate_ms=verdict.timing.median_ms if verdict.timing else None,
            eager_ms=baselines.eager.median_ms if baselines and baselines.eager else None,
            compile_ms=baselines.compiled.median_ms if baselines and baselines.compiled else None,
            vs_eager=verdict.speedup_vs_eager,
            vs_compile=verdict.speedup_vs_compile,
            pct_sol=verdict.pct_of_sol,
            device=str(verdict.provenance.get("device") or "?"),
        )


def _ratio(local: float | None, stored: float | None) -> str:
    if local is None or stored is None or stored == 0:
        return ""
    return f"{local / stored:.2f}"


def replay_table(stored: _Figures, local: _Figures, *, job_id: int, attempt_n: int) -> Table:
    table = Table(title=f"replay of job {job_id}, attempt {attempt_n}")
    table.add_column("")
    table.add_column(f"stored ({stored.device})", justify="right")
    table.add_column(f"local ({local.device})", justify="right")
    table.add_column("local / stored", justify="right")
    table.add_row("status", _status_text(stored.status), _status_text(local.status), "")
    table.add_row("compile", stored.compile, local.compile, "")
    table.add_row("correctness", stored.correct, local.correct, "")
    for label, s, v in (
        ("candidate ms", stored.candidate_ms, local.candidate_ms),
        ("eager ms", stored.eager_ms, local.eager_ms),
        ("torch.compile ms", stored.compile_ms, local.compile_ms),
    ):
        table.add_row(label, _ms(s), _ms(v), _ratio(v, s))
    table.add_row("speedup vs eager", _x(stored.vs_eager), _x(local.vs_eager), _ratio(local.vs_eager, stored.vs_eager))
    table.add_row(
        "speedup vs torch.compile", _x(stored.vs_compile), _x(local.vs_compile),
        _ratio(local.vs_compile, stored.vs_compile),
    )
    table.add_row("% of SOL", _pct(stored.pct_sol), _pct(local.pct_sol), _ratio(local.pct_sol, stored.pct_sol))
    return table


def _literal(source: str) -> str:
    """``source`` as a Python string literal: a readable raw triple-quoted one when it can be."""
    if "'''" not in source and not source.endswith("\\") and "\r" not in source:
        return "r'''" + source + "'''"
    return repr(source)


_STANDALONE = '''\
"""Standalone check of kernelloop job {job_id}'s best kernel (attempt {attempt_n}) on {problem_name}.

Exported by `kernelloop replay {job_id} --export`. Needs only torch (and a C++/CUDA compiler when
the kernel builds an extension). Runs the problem's reference `Model` and the kernel's `ModelNew`
with the same weights on the same inputs, compares the outputs, then times eager PyTorch,
torch.compile and the kernel (median of several runs).

    python {file_name} [--device cuda|cpu] [--trials 3] [--runs 30] [--no-compile]

The referee's own checks (fresh weights from a secret seed, input variants, integrity checks, a
sandbox) are not repeated here: this file is for reading and reproducing, `kernelloop replay`
for judging. Stored figures of the job ({stored_device}): {stored_summary}.
"""

import argparse
import statistics
import sys
import time
import types

import torch

PROBLEM_ID = {problem_id!r}
MODE = {mode!r}
ATOL = {atol!r}
RTOL = {rtol!r}
#: Sizes the referee uses on the cpu target (module constants of the problem).
CPU_SIZES = {cpu_sizes!r}
#: Tolerance by output dtype when the problem sets none (as the referee's).
TOLERANCE_BY_DTYPE = {{torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 1e-2}}

PROBLEM_SOURCE = {problem_literal}

CANDIDATE_SOURCE = {candidate_literal}


def load(name, source, sizes=None):
    module = types.ModuleType(name)
    module.__file__ = name + ".py"
    sys.modules[name] = module
    exec(compile(source, name + ".py", "exec"), module.__dict__)
    for key, value in (sizes or {{}}).items():
        setattr(module, key, tuple(value) if isinstance(value, list) else value)
    return module


def flat(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in flat(item)]
    return []


def close(expected, actual):
    for e, a in zip(flat(expected), flat(actual)):
        if e.shape != a.shape or e.dtype != a.dtype:
            return False, f"shape/dtype {{tuple(e.shape)}} {{e.dtype}} vs {{tuple(a.shape)}} {{a.dtype}}"
        tol = TOLERANCE_BY_DTYPE.get(e.dtype, 0.0)
        atol, rtol = (tol if ATOL is None else ATOL), (tol if RTOL is None else RTOL)
        if not torch.allclose(a.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True):
            return False, f"max abs error {{(a.double() - e.double()).abs().max().item():.3g}}"
    return len(flat(expected)) == len(flat(actual)), ""


def inputs(problem, seed, device):
    torch.manual_seed(seed)
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]


def median_ms(fn, args, device, runs):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        sync()
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            fn(*args)
            sync()
            samples.append(1000 * (time.perf_counter() - start))
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-compile", action="store_true", help="skip timing torch.compile")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problem = load("kl_problem", PROBLEM_SOURCE, CPU_SIZES if device.type == "cpu" else None)
    candidate = load("kl_candidate", CANDIDATE_SOURCE)
    torch.manual_seed(0)
    reference = problem.Model(*problem.get_init_inputs())
    torch.manual_seed(0)
    kernel = candidate.ModelNew(*problem.get_init_inputs())
    kernel.load_state_dict(reference.state_dict(), strict=False)
    for model in (reference, kernel):
        model.train(MODE == "train").to(device)
    ok = True
    for trial in range(args.trials):
        x = inputs(problem, 1000 + trial, device)
        with torch.no_grad():
            passed, why = close(reference(*x), kernel(*x))
        print(f"trial {{trial}}: {{'pass' if passed else 'FAIL ' + why}}")
        ok = ok and passed
    x = inputs(problem, 2000, device)
    eager = median_ms(reference, x, device, args.runs)
    rows = [("eager", eager)]
    if not args.no_compile:
        try:
            compiled = torch.compile(reference)
            rows.append(("torch.compile", median_ms(compiled, x, device, args.runs)))
        except Exception as exc:  # torch.compile needs a compiler toolchain; report, do not fail
            print(f"torch.compile unavailable: {{type(exc).__name__}}: {{exc}}")
    rows.append(("kernel", median_ms(kernel, x, device, args.runs)))
    kernel_ms = rows[-1][1]
    print(f"{{'':<14}} {{'median ms':>10}} {{'kernel speedup':>15}}")
    for name, ms in rows:
        print(f"{{name:<14}} {{ms:>10.4f}} {{ms / kernel_ms:>14.2f}}x")
    print("correct" if ok else "NOT correct", "on", device)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def export_standalone(
    *, problem: Problem, candidate_source: str, job_id: int, attempt_n: int, stored: Mapping[str, Any], path: Path
) -> None:
    """Write a single .py that checks and times the candidate against the problem with torch only."""
    summary = (
        f"{_ms((stored.get('timing') or {}).get('median_ms'))} ms, {_x(stored.get('speedup_vs_eager'))} vs eager, "
        f"{_x(stored.get('speedup_vs_compile'))} vs torch.compile"
    )
    text = _STANDALONE.format(
        job_id=job_id,
        attempt_n=attempt_n,
        problem_name=problem.id,
        file_name=path.name,
        stored_device=(stored.get("provenance") or {}).get("device", "?"),
        stored_summary=summary,
        problem_id=problem.id,
        mode=problem.mode.value,
        atol=problem.atol,
        rtol=problem.rtol,
        cpu_sizes=dict(problem.cpu_sizes),
        problem_literal=_literal(problem.source),
        candidate_literal=_literal(candidate_source),
    )
    path.write_text(text)


def replay(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[
        Target | None, typer.Option("--target", "-t", help="where to run it (default: the job's target)")
    ] = None,
    export: Annotated[
        Path | None, typer.Option("--export", help="also write a standalone .py (problem + kernel + a check)")
    ] = None,
    trials: Annotated[int, typer.Option(min=1, help="random-input correctness trials")] = 3,
    arch: Annotated[str | None, typer.Option(help="TORCH_CUDA_ARCH_LIST (default: the local GPU's)")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="builds, baselines and scratch (default ~/.cache/kernelloop)")
    ] = None,
    details: Annotated[bool, typer.Option("--details", help="also print the whole local verdict")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the local Verdict JSON as the last line")] = False,
) -> None:
    """Re-run the job's best kernel through the same harness here: compile, check, time; compare."""
    with _client(api, key) as client:
        try:
            job_row = client.get_job(job)
            best = client.best(job)["attempt"]
            stored_problem = client.job_problem(job)
        except ApiError as exc:
            raise _fail(exc) from None
    try:
        problem = parse_problem(
            stored_problem["source"], problem_id=stored_problem.get("bundled_id") or f"job{job}-problem"
        )
    except ProblemFormatError as exc:
        err.print(f"[red]error:[/red] the job's problem does not parse here: {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    job_target = Target(job_row["target"])
    run_target = target or job_target
    if run_target is Target.CUDA and not _has_local_gpu():
        err.print(
            f"[red]error:[/red] job {job} ran on cuda and this machine has no NVIDIA GPU; "
            "replay it on a GPU machine, or try --target cpu (a CUDA kernel will not build there)"
        )
        raise typer.Exit(ExitCode.USAGE)
    stored = Verdict.from_dict(best["verdict"])
    if export is not None:
        export_standalone(
            problem=problem, candidate_source=best["source"], job_id=job, attempt_n=best["n"], stored=best["verdict"],
            path=export,
        )
        err.print(f"wrote {export} (run it with `python {export}`)")
    options = HarnessOptions(trials=trials)
    if cache_dir is not None:
        options = options.replace(cache_dir=cache_dir)
    arch_list = arch or (local_arch_list() if run_target is Target.CUDA else None)
    if arch_list:
        options = options.replace(arch_list=arch_list)
    with err.status(f"replaying job {job} attempt {best['n']} on {problem.id} ({run_target.value}): compile, trials, "
                    "timing…"):
        local = evaluate(problem, best["source"], run_target, options)
    if details:
        from cli.main import render_verdict  # the main module registers this one: imported late, no cycle

        render_verdict(local, err if as_json else out)
    console = err if as_json else out
    console.print(replay_table(_Figures.of(stored), _Figures.of(local), job_id=job, attempt_n=best["n"]))
    _replay_warnings(stored, local, job_target=job_target, run_target=run_target, console=console)
    if as_json:
        sys.stdout.write(json.dumps(local.to_dict()) + "\n")
    raise typer.Exit(VERDICT_EXIT_CODES[local.status])


def _replay_warnings(
    stored: Verdict, local: Verdict, *, job_target: Target, run_target: Target, console: Console
) -> None:
    stored_device, local_device = stored.provenance.get("device"), local.provenance.get("device")
    if run_target is not job_target:
        console.print(f"[yellow]warning:[/yellow] the job ran on {job_target.value}, this replay on {run_target.value}")
    if stored_device != local_device:
        console.print(
            f"[yellow]warning:[/yellow] the job was measured on {stored_device!r}, this machine is {local_device!r}: "
            "timings and speedups are not comparable across devices",
            highlight=False,
        )
    for name in ("torch", "cuda", "harness"):
        if stored.provenance.get(name) != local.provenance.get(name):
            console.print(
                f"[dim]note: {name} {stored.provenance.get(name)} in the job, {local.provenance.get(name)} here[/]",
                highlight=False,
            )
    if local.timing is not None:
        for warning in local.timing.warnings:
            console.print(f"[yellow]timing:[/] {warning}", highlight=False)
    if local.status is not Status.PASS and local.message:
        console.print(f"[red]{local.status.value}:[/red] {local.message}", highlight=False)


# -- bench -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteEntry:
    """One problem of a suite: its display name and the job body fields naming it."""

    name: str
    fields: Mapping[str, str]


def read_suite(suite: Path) -> list[SuiteEntry]:
    """The problems of a suite: a directory of problem files, or a text file of ids and paths
    (one per line; ``#`` starts a comment; relative paths are relative to the file).

    Raises:
        ValueError: an entry names neither a bundled problem nor a file, or the suite is empty.
    """
    known = set(bundled_ids())
    entries: list[SuiteEntry] = []
    if suite.is_dir():
        for path in sorted(suite.glob("*.py")):
            if not path.name.startswith("_"):
                entries.append(SuiteEntry(path.stem, {"problem_source": read_problem_file(path).source}))
    else:
        for number, raw in enumerate(suite.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line in known:
                entries.append(SuiteEntry(line, {"problem_id": line}))
                continue
            path = Path(line) if Path(line).is_absolute() else suite.parent / line
            if not path.is_file():
                raise ValueError(f"{suite}:{number}: {line!r} is neither a bundled problem id nor a file")
            entries.append(SuiteEntry(path.stem, {"problem_source": read_problem_file(path).source}))
    if not entries:
        raise ValueError(f"{suite} names no problems")
    return entries


@dataclass(frozen=True)
class BenchResult:
    """One problem's outcome in a bench run."""

    problem: str
    job_id: int
    state: str
    correct: bool
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    median_ms: float | None
    tokens: int
    cost_usd: float

    @classmethod
    def from_job(cls, problem: str, job: Mapping[str, Any]) -> BenchResult:
        best = job.get("best") or {}
        return cls(
            problem=problem,
            job_id=int(job["id"]),
            state=str(job["state"]),
            # A job's best attempt is always a verified ("pass") one.
            correct=bool(best),
            speedup_vs_eager=_finite(best.get("speedup_vs_eager")),
            speedup_vs_compile=_finite(best.get("speedup_vs_compile")),
            median_ms=_finite(best.get("median_ms")),
            tokens=int(job.get("tokens_in") or 0) + int(job.get("tokens_out") or 0),
            cost_usd=float(job.get("cost_usd") or 0.0),
        )


def _geomean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v > 0]
    return statistics.geometric_mean(positive) if positive else None


@dataclass(frozen=True)
class BenchSummary:
    """KernelBench's figures over a suite: fast_p and geometric-mean speedups."""

    problems: int
    #: fast_p for each p of `BENCH_THRESHOLDS`: the fraction of ALL problems whose best kernel is
    #: correct and more than p times faster than eager (fast_0: the fraction correct).
    fast_p: Mapping[float, float]
    #: Over the correct problems that were timed.
    geomean_speedup_vs_eager: float | None
    geomean_speedup_vs_compile: float | None
    tokens: int
    cost_usd: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "problems": self.problems,
            "fast_p": {f"{p:g}": v for p, v in self.fast_p.items()},
            "geomean_speedup_vs_eager": self.geomean_speedup_vs_eager,
            "geomean_speedup_vs_compile": self.geomean_speedup_vs_compile,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
        }


def summarize(results: Sequence[BenchResult], thresholds: Sequence[float] = BENCH_THRESHOLDS) -> BenchSummary:
    """fast_p, geometric means, totals.

    Raises:
        ValueError: no results.
    """
    if not results:
        raise ValueError("no results to summarize")

    def fast(r: BenchResult, p: float) -> bool:
        if p == 0:
            return r.correct
        return r.correct and r.speedup_vs_eager is not None and r.speedup_vs_eager > p

    correct = [r for r in results if r.correct]
    return BenchSummary(
        problems=len(results),
        fast_p={p: sum(fast(r, p) for r in results) / len(results) for p in thresholds},
        geomean_speedup_vs_eager=_geomean([r.speedup_vs_eager for r in correct if r.speedup_vs_eager is not None]),
        geomean_speedup_vs_compile=_geomean(
            [r.speedup_vs_compile for r in correct if r.speedup_vs_compile is not None]
        ),
        tokens=sum(r.tokens for r in results),
        cost_usd=sum(r.cost_usd for r in results),
    )


def bench_markdown(results: Sequence[BenchResult], summary: BenchSummary, *, title: str) -> str:
    def num(v: float | None, suffix: str = "×") -> str:
        return "—" if v is None else f"{v:.2f}{suffix}"

    lines = [
        f"# {title}",
        "",
        "| " + " | ".join(f"fast_{p:g}" for p in summary.fast_p) + " | geomean vs eager | geomean vs torch.compile "
        "| problems | tokens | cost |",
        "|" + "---:|" * (len(summary.fast_p) + 5),
        "| " + " | ".join(f"{v:.2f}" for v in summary.fast_p.values())
        + f" | {num(summary.geomean_speedup_vs_eager)} | {num(summary.geomean_speedup_vs_compile)} "
        f"| {summary.problems} | {summary.tokens:,} | ${summary.cost_usd:.2f} |",
        "",
        "| problem | job | state | correct | median ms | vs eager | vs torch.compile | tokens | cost |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.problem} | {r.job_id} | {r.state} | {'yes' if r.correct else 'no'} | "
            f"{num(r.median_ms, '')} | {num(r.speedup_vs_eager)} | {num(r.speedup_vs_compile)} | {r.tokens:,} | "
            f"${r.cost_usd:.2f} |"
        )
    lines += [
        "",
        "fast_p: the fraction of all problems whose best kernel is correct and more than p times faster than eager "
        "PyTorch (fast_0: correct). Geometric means over the correct problems.",
        "",
    ]
    return "\n".join(lines)


def _wait_for_jobs(
    client: ApiClient, job_ids: Sequence[int], *, poll_s: float, timeout_s: float | None,
    on_update: Callable[[dict[int, dict[str, Any]]], None],
) -> tuple[dict[int, dict[str, Any]], bool]:
    """Poll until every job ended (or the timeout); returns the jobs and whether all ended."""
    jobs: dict[int, dict[str, Any]] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        for job_id in job_ids:
            if jobs.get(job_id, {}).get("state") not in _TERMINAL_STATES:
                jobs[job_id] = client.get_job(job_id)
        on_update(jobs)
        if all(j["state"] in _TERMINAL_STATES for j in jobs.values()):
            return jobs, True
        if deadline is not None and time.monotonic() >= deadline:
            return jobs, False
        time.sleep(poll_s)


def bench(
    suite: Annotated[Path, typer.Argument(help="a file of problem ids or paths (one a line), or a directory")],
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[Target | None, typer.Option("--target", "-t", help="cuda or cpu (default: the server's)")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help="a server-side LLM profile")] = None,
    trajectories: Annotated[int | None, typer.Option(min=1, help="chats per problem")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="where bench.md and bench.json go")] = Path("."),
    poll: Annotated[float, typer.Option(min=0.05, help="seconds between polls of the jobs")] = BENCH_POLL_S,
    timeout: Annotated[float | None, typer.Option(min=1, help="give up waiting after this many seconds")] = None,
) -> None:
    """One job per problem of a suite, then a KernelBench-style table (fast_p, geomean speedups) as Markdown + JSON."""
    try:
        entries = read_suite(suite)
    except (OSError, ValueError, ProblemFormatError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    extra: dict[str, Any] = {}
    if target is not None:
        extra["target"] = target.value
    if llm is not None:
        extra["llm_profile"] = llm
    if trajectories is not None:
        extra["trajectories"] = trajectories
    with _client(api, key) as client:
        try:
            submitted: list[tuple[SuiteEntry, int]] = []
            for entry in entries:
                job = client.submit_job({**entry.fields, **extra})
                submitted.append((entry, int(job["id"])))
                err.print(f"job {job['id']} {job['state']}: {entry.name}", highlight=False)
            with err.status("waiting for the jobs…") as status:

                def show(jobs: dict[int, dict[str, Any]]) -> None:
                    done = sum(j["state"] in _TERMINAL_STATES for j in jobs.values())
                    status.update(f"{done}/{len(jobs)} jobs finished…")

                jobs, finished = _wait_for_jobs(
                    client, [j for _, j in submitted], poll_s=poll, timeout_s=timeout, on_update=show
                )
        except ApiError as exc:
            raise _fail(exc) from None
    results = [BenchResult.from_job(entry.name, jobs[job_id]) for entry, job_id in submitted]
    summary = summarize(results)
    title = f"kernelloop bench: {suite.name} ({extra.get('target', 'server default target')})"
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = bench_markdown(results, summary, title=title)
    (out_dir / "bench.md").write_text(markdown)
    report = {
        "suite": str(suite),
        "api_url": client.config.api_url,
        "target": extra.get("target"),
        "llm_profile": extra.get("llm_profile"),
        "finished": finished,
        "created_at": datetime.now(UTC).isoformat(),
        "summary": summary.to_dict(),
        "problems": [asdict(r) for r in results],
    }
    (out_dir / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    table = Table(title=title)
    for col in ("problem", "job", "state", "correct", "vs eager", "vs compile", "tokens", "cost"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.problem, str(r.job_id), r.state, "yes" if r.correct else "no", _x(r.speedup_vs_eager),
            _x(r.speedup_vs_compile), f"{r.tokens:,}", _usd(r.cost_usd),
        )
    out.print(table)
    out.print(
        "  ".join(f"fast_{p:g} = {v:.2f}" for p, v in summary.fast_p.items())
        + f"  geomean {_x(summary.geomean_speedup_vs_eager)} vs eager, "
        f"{_x(summary.geomean_speedup_vs_compile)} vs torch.compile",
        highlight=False,
    )
    err.print(f"wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")
    if not finished:
        err.print("[yellow]warning:[/yellow] timed out before every job ended; unfinished jobs count as not correct")
        raise typer.Exit(ExitCode.FAILED)


client_commands = typer.Typer(help="The kernelloop service's client commands.", no_args_is_help=True,
                              add_completion=False)
for _name, _command in (("submit", submit), ("watch", watch), ("replay", replay), ("bench", bench)):
    client_commands.command(_name)(_command)


if __name__ == "__main__":
    client_commands()
