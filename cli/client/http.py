"""Where the API is (flags, environment, config file) and a small synchronous client of it.

The client's answers are the API's JSON (`vocabulary.wire.JsonObject`: a job, an attempt, a
message as ``GET`` returns it); a page of them is a `JsonPage`, and a body that is not the
object it should be is a `WireError`. The commands read the fields they show.

``--api``/``--key`` flags, else ``KERNELLOOP_API_URL``/``KERNELLOOP_API_KEY``, else
``api_url``/``api_key`` in ``$XDG_CONFIG_HOME/kernelloop/config.toml`` (default
``~/.config/kernelloop/config.toml``), else ``http://127.0.0.1:8000`` and no key. httpx is
imported when a client is made, so ``kernelloop eval`` needs none of this.
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import typer
from rich.markup import escape

from cli.client.output import CliExit, err
from display import finite
from vocabulary.wire import JsonObject, JsonValue, Reader, WireError

if TYPE_CHECKING:
    import httpx

DEFAULT_API_URL = "http://127.0.0.1:8000"
ENV_API_URL = "KERNELLOOP_API_URL"
ENV_API_KEY = "KERNELLOOP_API_KEY"
#: Connect and write time limits of every request; reads wait longer on streams (below).
HTTP_TIMEOUT_S = 30.0
#: A stream sends a keep-alive comment every 15 s; a silence four times as long is a dead connection.
STREAM_READ_TIMEOUT_S = 60.0


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
    local_key_path: Path | None = None,
) -> ClientConfig:
    """Flags, then the environment, then the config file, then the defaults; with no key from
    those and an API on this machine (loopback address), the local key ``kernelloop up`` keeps in
    ``local_key_path`` (when this user can read it).

    Raises:
        ValueError: the config file exists but is not valid TOML.
    """
    env = os.environ if environ is None else environ
    path = config_path or default_config_path(env)
    file_values: dict[str, object] = {}
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
    if key is None and local_key_path is not None and _is_loopback(url):
        with contextlib.suppress(OSError):
            key = local_key_path.read_text().strip() or None
            if key:
                origin["api_key"] = str(local_key_path)
    return ClientConfig(api_url=url.rstrip("/"), api_key=key, origin=origin)


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


# -- HTTP ----------------------------------------------------------------------------------------


def _httpx() -> ModuleType:
    try:
        import httpx
    except ImportError:
        err.print("[red]error:[/red] the client needs httpx: pip install 'kernelloop[service]'")
        raise typer.Exit(CliExit.USAGE) from None
    return httpx


class ApiRequestError(Exception):
    """The API answered with an error (``detail`` says what to fix), or could not be reached."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str | None = None,
        quota: Mapping[str, JsonValue] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.detail = detail
        self.status = status
        self.code = code
        #: A 429's spent quota: ``{"name": "max_concurrent_jobs", "limit": 2, "used": 2}``.
        self.quota = dict(quota) if quota else None
        #: A ``Retry-After`` header's seconds.
        self.retry_after_s = retry_after_s
        super().__init__(f"{detail} (HTTP {status}, {code})" if status else detail)

    @property
    def quota_name(self) -> str | None:
        """Which quota a 429 hit (servers before the ``quota`` field: read from the words)."""
        if self.status != 429:
            return None
        if self.quota and self.quota.get("name"):
            return str(self.quota["name"])
        if "queued or running" in self.detail:
            return "max_concurrent_jobs"
        if "in the last 24 hours" in self.detail:
            return "max_jobs_per_day"
        return "cost_cap_usd" if "cap" in self.detail else None


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event: ``id`` (the job's event number), ``type`` and the decoded ``data``."""

    id: int | None
    type: str
    #: The decoded JSON (the text itself when it is not JSON).
    data: JsonValue


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
                    payload: JsonValue = json.loads(text)
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


@dataclass(frozen=True)
class JsonPage:
    """One page of a listing: its items (JSON objects) and where the next page starts."""

    items: list[JsonObject]
    #: The ``after``/``offset`` of the next page; None on the last.
    next_cursor: int | None
    #: Every match of the listing's filters, when the API counts them.
    total: int | None = None

    @classmethod
    def from_json(cls, value: JsonValue, what: str) -> JsonPage:
        page = Reader(value, what)
        return cls(items=page.items_of("items", lambda item: _object(item, f"an item of {what}")),
                   next_cursor=page.optional_integer("next_cursor"), total=page.optional_integer("total"))


def _object(value: object, what: str) -> JsonObject:
    """``value`` if it is a JSON object (the API's answer to a ``GET`` of one thing)."""
    if not isinstance(value, dict):
        raise WireError(f"{what} is not a JSON object")
    return value


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

    def _request(self, method: str, path: str, *, json: JsonObject | None = None,
                 params: Mapping[str, str | int] | None = None) -> JsonValue:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except self._httpx.TransportError as exc:
            raise ApiRequestError(f"cannot reach the API at {self.config.api_url}: {exc}") from None
        return self._answer(response)

    def _get_object(self, path: str, what: str) -> JsonObject:
        return _object(self._request("GET", path), what)

    def _answer(self, response: httpx.Response) -> JsonValue:
        if response.status_code >= 400:
            quota = None
            try:
                body = response.json()
                detail, code = str(body.get("detail")), body.get("code")
                quota = body.get("quota") if isinstance(body.get("quota"), dict) else None
            except (ValueError, AttributeError):
                detail, code = response.text[:300] or response.reason_phrase, None
            retry_after = response.headers.get("Retry-After", "")
            raise ApiRequestError(detail, status=response.status_code, code=code, quota=quota,
                           retry_after_s=float(retry_after) if retry_after.isdigit() else None)
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def submit_job(self, body: JsonObject) -> JsonObject:
        """``POST /jobs``: the job as queued."""
        return _object(self._request("POST", "/jobs", json=dict(body)), "the queued job")

    def get_job(self, job_id: int) -> JsonObject:
        return self._get_object(f"/jobs/{job_id}", f"job {job_id}")

    def submit_model_run(self, body: JsonObject) -> JsonObject:
        """``POST /models``: the model run as created, with its region jobs."""
        return _object(self._request("POST", "/models", json=dict(body)), "the model run")

    def get_model_run(self, run_id: int) -> JsonObject:
        return self._get_object(f"/models/{run_id}", f"model run {run_id}")

    def attempts(self, job_id: int) -> list[JsonObject]:
        found: list[JsonObject] = []
        after: int | None = 0
        while after is not None:
            page = JsonPage.from_json(self._request("GET", f"/jobs/{job_id}/attempts",
                                                    params={"after": after, "limit": 500}),
                                      f"job {job_id}'s attempts")
            found.extend(page.items)
            after = page.next_cursor
        return found

    def best_attempt(self, job_id: int) -> JsonObject:
        """The job's best attempt, with its source and whole verdict (``GET /jobs/{id}/best``'s ``attempt``)."""
        best = Reader(self._request("GET", f"/jobs/{job_id}/best"), f"job {job_id}'s best")
        return _object(best.data.get("attempt"), f"job {job_id}'s best attempt")

    def job_problem(self, job_id: int) -> JsonObject:
        return self._get_object(f"/jobs/{job_id}/problem", f"job {job_id}'s problem")

    def job_timings(self, job_id: int) -> JsonObject:
        """``GET /jobs/{id}/timings``: each attempt's seconds per stage and kind, and the job's queue wait."""
        return self._get_object(f"/jobs/{job_id}/timings", f"job {job_id}'s timings")

    def list_jobs(
        self, *, state: str | None = None, target: str | None = None, problem: str | None = None,
        limit: int = 50, offset: int = 0,
    ) -> JsonPage:
        """One page of the key's jobs, newest first (``next_cursor``: the next page's offset)."""
        params: dict[str, str | int] = {"limit": limit, "offset": offset}
        params.update({k: v for k, v in (("state", state), ("target", target), ("problem", problem)) if v})
        return JsonPage.from_json(self._request("GET", "/jobs", params=params), "the jobs page")

    def cancel_job(self, job_id: int) -> JsonObject:
        """``{"outcome": "cancelled"|"requested"|"already_finished", "job": {...}}``."""
        return _object(self._request("POST", f"/jobs/{job_id}/cancel"), f"the cancel of job {job_id}")

    def attempt(self, job_id: int, n: int) -> JsonObject:
        """One attempt with its source and whole verdict."""
        return self._get_object(f"/jobs/{job_id}/attempts/{n}", f"attempt {n} of job {job_id}")

    def messages(
        self, job_id: int, *, after: int = 0, trajectory: int | None = None, limit: int = 200
    ) -> JsonPage:
        """One page of the job's LLM messages after message id ``after``."""
        params: dict[str, str | int] = {"after": after, "limit": limit}
        if trajectory is not None:
            params["trajectory"] = trajectory
        return JsonPage.from_json(self._request("GET", f"/jobs/{job_id}/messages", params=params),
                                  f"job {job_id}'s messages")

    def events(self, job_id: int, *, after: int = 0, idle_s: float | None = None) -> Iterator[SseEvent]:
        """The job's events after ``after`` until the server closes the stream (with ``idle_s``:
        or until nothing arrives for that long, i.e. the stored events have all been read)."""
        timeout = self._httpx.Timeout(HTTP_TIMEOUT_S, read=idle_s or STREAM_READ_TIMEOUT_S)
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
        try:
            with self._http.stream("GET", f"/jobs/{job_id}/events", headers=headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    self._answer(response)
                yield from parse_sse(response.iter_lines())
        except self._httpx.ReadTimeout:
            if idle_s is None:
                raise ApiRequestError(f"the event stream of job {job_id} went silent") from None
        except self._httpx.TransportError as exc:
            raise ApiRequestError(f"the event stream of job {job_id} broke: {exc}") from None


# -- the commands' shared options ---------------------------------------------------------------

ApiOpt = Annotated[str | None, typer.Option("--api", help=f"API base URL (or ${ENV_API_URL}, or the config file)")]
KeyOpt = Annotated[str | None, typer.Option("--key", help=f"API key (or ${ENV_API_KEY}, or the config file)")]


def open_client(api: str | None, key: str | None) -> ApiClient:
    try:
        from config import load_settings

        config = resolve_config(api_url=api, api_key=key, local_key_path=load_settings().local_key_path)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(CliExit.USAGE) from None
    if not config.api_key:
        err.print(
            f"[yellow]warning:[/yellow] no API key: pass --key, set ${ENV_API_KEY}, or put api_key in "
            f"{default_config_path()} (a local `kernelloop up` keeps one for you)"
        )
    return ApiClient(config)


#: The API's words for its request fields, and what a user of the CLI types instead.
_FIELD_WORDS = (
    ("listed by GET /problems", "listed by `kernelloop problems list`"),
    ("(or send the file's text as problem_source)", "(or give the path of a problem file)"),
    ("problem_id (a bundled id, see GET /problems)", "a bundled problem id (`kernelloop problems list`)"),
    ("problem_source:", "the problem file:"),
    ("problem_source", "the problem file"),
    ("candidate_source:", "the candidate file:"),
    ("candidate_source", "the candidate file"),
    ("budgets.turns", "--turns"),
    ("budgets.tool_calls", "--tool-calls"),
    ("budgets.max_tokens", "--max-tokens"),
    ("budgets.max_cost_usd", "--max-cost"),
    ("budgets.wall_clock_s", "--wall-clock"),
    ("budgets.target_speedup", "--target-speedup"),
    ("trajectories:", "--trajectories:"),
    ("X-API-Key header", "API key"),
    ("X-API-Key", "API key"),
)


def in_user_terms(exc: ApiRequestError) -> str:
    """What an API error means for someone at the command line, and what to type about it."""
    detail = exc.detail
    quota = exc.quota or {}
    used, limit = int(finite(quota.get("used")) or 0), int(finite(quota.get("limit")) or 0)
    if exc.quota_name == "max_concurrent_jobs":
        counts = f"{used} jobs queued or running, and may have {limit} at once" if quota else (
            "as many jobs queued or running as it may have")
        return (f"this key has {counts}: wait for one to end, or cancel one with `kernelloop cancel JOB_ID` "
                "(list them: `kernelloop jobs --state running`)")
    if exc.quota_name == "max_jobs_per_day":
        counts = (f"{used} jobs in the last 24 hours, its limit is {limit}" if quota
                  else "its jobs for the day")
        return (f"this key created {counts}: try again later, or ask the service's admin for a higher limit "
                "(`kernelloop keys create --max-per-day N` makes a key with one)")
    if exc.code == "missing_api_key":
        return (f"the API needs a key: pass --key, set ${ENV_API_KEY}, or put api_key in {default_config_path()}; "
                "the service's admin makes one with `kernelloop keys create --name NAME` "
                "(`kernelloop up` keeps one for you: see its banner)")
    if exc.code == "invalid_api_key":
        return ("the API key is unknown or revoked: ask the service's admin for a new one "
                "(`kernelloop keys create --name NAME` on the service's machine)")
    if exc.code == "unknown_llm_profile":
        detail = detail.replace("llm_profile ", "--llm ", 1)
    for api_words, cli_words in _FIELD_WORDS:
        detail = detail.replace(api_words, cli_words)
    if exc.status == 404 and detail.startswith("job ") and detail.endswith(" not found"):
        detail += " (or it is another key's): `kernelloop jobs` lists yours"
    return detail


def api_failure(exc: ApiRequestError) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(in_user_terms(exc))}", highlight=False)
    return typer.Exit(CliExit.USAGE)
