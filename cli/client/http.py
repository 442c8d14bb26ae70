"""Where the API is (flags, environment, config file) and a small synchronous client of it.

``--api``/``--key`` flags, else ``KERNELLOOP_API_URL``/``KERNELLOOP_API_KEY``, else
``api_url``/``api_key`` in ``$XDG_CONFIG_HOME/kernelloop/config.toml`` (default
``~/.config/kernelloop/config.toml``), else ``http://127.0.0.1:8000`` and no key. httpx is
imported when a client is made, so ``kernelloop eval`` needs none of this.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.client.output import ExitCode, err

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


# -- the commands' shared options ---------------------------------------------------------------

ApiOpt = Annotated[str | None, typer.Option("--api", help=f"API base URL (or ${ENV_API_URL}, or the config file)")]
KeyOpt = Annotated[str | None, typer.Option("--key", help=f"API key (or ${ENV_API_KEY}, or the config file)")]


def open_client(api: str | None, key: str | None) -> ApiClient:
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


def api_failure(exc: ApiError) -> typer.Exit:
    err.print(f"[red]error:[/red] {exc.detail}" + (f" [dim](HTTP {exc.status}, {exc.code})[/]" if exc.status else ""))
    return typer.Exit(ExitCode.USAGE)
