"""`Settings`: every knob of the service, from ``KERNELLOOP_*`` environment variables or a .env file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, JsonValue, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from harness.options import HarnessOptions, TimingOptions, default_cache_dir
from vocabulary.budgets import Budgets

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "LLMProfile",
    "ReasoningHistory",
    "Settings",
    "TextToolMode",
    "default_data_dir",
    "load_settings",
]

def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/kernelloop``, else ``~/.local/share/kernelloop`` (``KERNELLOOP_DATA_DIR`` wins)."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or os.path.expanduser("~")) / ".local" / "share"
    return base / "kernelloop"


class TextToolMode(StrEnum):
    """How tool calls travel: the server's function calling, or fenced blocks in the text."""

    #: Function calling; a trajectory switches to text when the server refuses ``tools`` or the
    #: model answers with code but no call (a server without a tool parser).
    AUTO = "auto"
    #: Always text (servers without any tool support).
    ALWAYS = "always"
    #: Never text: a reply without a call is only nudged.
    NEVER = "never"


class ReasoningHistory(StrEnum):
    """What happens to a reasoning model's ``reasoning_content`` in the history sent back."""

    #: Dropped (what most servers expect: their templates drop it anyway, and it costs tokens).
    DROP = "drop"
    #: Sent back on the assistant message (servers whose templates interleave reasoning).
    PASS_BACK = "pass_back"


#: A context window small enough to be safe on the servers people run locally (vLLM's and
#: SGLang's defaults are the model's own, often 32k-128k; llama.cpp's and Ollama's are set by
#: the operator). Profiles of larger models say so.
DEFAULT_CONTEXT_WINDOW = 32_768
#: Output tokens asked for per reply: a whole candidate file plus some reasoning fits.
DEFAULT_MAX_OUTPUT_TOKENS = 8192


class LLMProfile(BaseModel):
    """A server-side LLM endpoint; jobs name a profile, never carry keys.

    ``api_key_env`` names the environment variable holding the key, so the key itself never
    sits in a settings dump or a job row. docs/deploy.md has a worked profile per server kind.
    """

    provider: str = "openai"
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str | None = "OPENAI_API_KEY"
    #: USD per million tokens (input, output), for the cost recorded per message.
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    #: USD per million cached input tokens (``prompt_tokens_details.cached_tokens``); ``None``:
    #: the input price. Reasoning tokens are output tokens and cost the output price unless
    #: ``price_reasoning_per_mtok`` says otherwise.
    price_cached_in_per_mtok: float | None = None
    price_reasoning_per_mtok: float | None = None
    #: The model's context window in tokens (prompt + reply): the history is kept inside it.
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, ge=1024)
    #: Output tokens asked for per reply (``None``: no limit is sent, the server's default applies).
    max_output_tokens: int | None = Field(default=DEFAULT_MAX_OUTPUT_TOKENS, ge=1)
    #: The request field that carries it: OpenAI's reasoning models take only ``max_completion_tokens``.
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    #: Added to every request body, e.g. ``{"reasoning_effort": "low"}`` or vLLM's
    #: ``{"chat_template_kwargs": {"enable_thinking": false}}``.
    extra_body: dict[str, JsonValue] = Field(default_factory=dict)
    #: Request parameters never sent (e.g. ``["temperature"]`` for reasoning models). A 400 that
    #: names an unsupported parameter also drops it, for the rest of the job.
    omit_params: tuple[str, ...] = ()
    #: Stream replies (with an idle timeout between chunks, so long generations finish).
    stream: bool = True
    #: Seconds without a chunk before a streamed reply is abandoned (and retried).
    idle_timeout_s: float = Field(default=60.0, gt=0)
    #: Seconds for a whole non-streamed reply (and for connecting).
    timeout_s: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    #: Strip ``<think>...</think>`` blocks from the content kept in the history.
    strip_think: bool = True
    reasoning_history: ReasoningHistory = ReasoningHistory.DROP
    #: Tool calls as fenced JSON in the text: ``auto`` (switch when needed), ``always``, ``never``.
    text_tool_calls: TextToolMode = TextToolMode.AUTO

    @field_validator("text_tool_calls", mode="before")
    @classmethod
    def _text_mode_from_bool(cls, value: object) -> object:
        # ``true``/``false`` were the values before the auto mode existed.
        if isinstance(value, bool):
            return TextToolMode.ALWAYS if value else TextToolMode.AUTO
        return value

    def api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key in ``api_key_env`` (``None``: the profile needs none, or it is unset or empty)."""
        if self.api_key_env is None:
            return None
        return (os.environ if environ is None else environ).get(self.api_key_env) or None

    def missing_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable this profile's key should be in, when it needs one and the variable is
        unset or empty here (checked before a job starts: without it every request is a 401)."""
        if self.provider != "openai" or self.api_key_env is None or self.api_key(environ) is not None:
            return None
        return self.api_key_env

    def missing_key_message(self, name: str, where: str) -> str | None:
        """What to tell the user about `missing_key` (``where``: "in this shell" …), or None."""
        variable = self.missing_key()
        if variable is None:
            return None
        return (f"the LLM profile {name!r} needs an API key in ${variable}, which is not set {where}: "
                f"`export {variable}=…` (for an endpoint that takes no key, give the profile "
                "\"api_key_env\": null)")

    @model_validator(mode="after")
    def _output_fits_the_window(self) -> LLMProfile:
        if self.max_output_tokens is not None and self.max_output_tokens >= self.context_window // 2:
            raise ValueError(f"max_output_tokens ({self.max_output_tokens}) must be under half the context_window "
                             f"({self.context_window}): the rest holds the conversation")
        return self


class Settings(BaseSettings):
    """The service configuration. Environment: ``KERNELLOOP_<FIELD>`` (nested with ``__``)."""

    model_config = SettingsConfigDict(env_prefix="KERNELLOOP_", env_nested_delimiter="__", env_file=".env",
                                      extra="ignore")

    #: The database (embedded mode), the dashboard's secret and the local key (`cli.keys`).
    data_dir: Path = Field(default_factory=default_data_dir)
    #: Defaults to SQLite in ``data_dir`` (the embedded mode).
    database_url: str | None = None
    #: ``None`` runs the embedded mode: the database is the queue, no Redis needed.
    broker_url: str | None = None
    #: Where the harness keeps builds, baselines and scratch (``harness.HarnessOptions.cache_dir``);
    #: ``None``: the machine's one cache, shared with the CLI (`harness.options.default_cache_dir`).
    cache_dir: Path | None = None

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    #: Signs dashboard session cookies and short-lived URLs; generated into data_dir if unset.
    session_secret: SecretStr | None = None
    #: Requests larger than this are refused with 413 before they are parsed.
    max_body_bytes: int = 512 * 1024
    #: Database connections the API keeps open: one per thread of its threadpool (anyio's 40),
    #: where every database call runs, so a burst of requests neither waits for a connection nor
    #: opens and closes one per request. PostgreSQL's ``max_connections`` (100 by default) must
    #: cover this per API process, plus a few per worker.
    api_db_pool_size: int = Field(default=40, ge=1)
    #: Seconds a verified API key is remembered by an API process (0: ask the database on every
    #: request). A revoked key can still *read* for this long; it can never create a job, since
    #: every submission re-reads the key under its quota lock.
    api_key_cache_s: float = Field(default=2.0, ge=0)
    #: The most submissions the API stores in one transaction (`api.submissions`).
    api_submit_batch_max: int = Field(default=100, ge=1)

    #: The target of jobs and evaluations that name none (``kernelloop up`` sets its workers').
    default_target: Literal["cuda", "cpu"] = "cuda"

    #: The GPU type this worker serves (its queue is ``gpu-<type>``); ``cpu`` workers use ``cpu``.
    gpu_type: str = "h200"
    worker_target: str = "cpu"
    #: A job's lease: a worker that misses heartbeats this long loses the job to the reaper.
    lease_seconds: float = 120.0
    heartbeat_seconds: float = 15.0
    max_requeues: int = 2
    reaper_interval_s: float = 30.0
    #: Distributed mode: a job still queued this long after its message (or its creation) gets
    #: its message again from a reaper, in case it was never sent (the API died between commit
    #: and send) or was lost. Long against a normal wait for a free worker, since such a wait
    #: costs a duplicate message (skipped by the worker) per period; short against a job's
    #: minutes. ``None``: never.
    redispatch_after_s: float | None = Field(default=300.0, gt=0)
    #: Embedded mode: how often an idle worker looks for queued jobs.
    poll_interval_s: float = 0.5
    #: Distributed mode: a Celery worker serves its metrics (`worker.metrics`) on this port, one
    #: scrape target per worker (``None``: not served). ``kernelloop up``'s workers need none: the
    #: API's /metrics carries them.
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    #: All interfaces by default: the scraper is another container or host.
    worker_metrics_host: str = "0.0.0.0"
    #: A starting worker precompiles the torch headers of the binding flags models commonly use,
    #: in the background (trusted code only), so no attempt pays for one (`harness.warm_headers`).
    warm_headers: bool = True
    #: Seconds each timed run of a job's referee may spend on timed calls (a candidate's timing, each
    #: baseline): fewer give noisier figures sooner, on a small or busy CPU host or for a quick try.
    #: ``None``: the harness's own (`harness.TimingOptions.max_time_s`).
    timing_max_s: float | None = Field(default=None, gt=0)

    #: Budgets per trajectory and per job, as in the seeds.
    default_turns: int = 10
    default_tool_calls: int = 30
    default_trajectories: int = 1
    default_max_tokens: int = 400_000
    default_max_cost_usd: float = 5.0
    default_wall_clock_s: float = 3600.0

    #: JSON in the environment: KERNELLOOP_LLM_PROFILES='{"local": {"base_url": "http://…/v1", …}}'.
    llm_profiles: dict[str, LLMProfile] = Field(default_factory=lambda: {
        # A script has no context window: its history is never compacted.
        "scripted": LLMProfile(provider="scripted", model="scripted", api_key_env=None, context_window=1 << 20),
        "openai": LLMProfile(context_window=128_000),
    })
    default_llm_profile: str = "scripted"

    def default_budgets(self) -> Budgets:
        """The service's one set of default budgets (``KERNELLOOP_DEFAULT_*``): what the API gives a
        job for every budget its request leaves out."""
        return Budgets(turns=self.default_turns, tool_calls=self.default_tool_calls, max_tokens=self.default_max_tokens,
                       max_cost_usd=self.default_max_cost_usd, wall_clock_s=self.default_wall_clock_s)

    def harness_options(self) -> HarnessOptions:
        """The options of this machine's referees: the service's jobs and the CLI's local judging
        (``eval``, ``replay``, ``problems``, ``model``, ``bench --candidates``): its cache, its
        ``timing_max_s``."""
        timing = TimingOptions() if self.timing_max_s is None else TimingOptions(max_time_s=self.timing_max_s)
        return HarnessOptions(cache_dir=self.resolved_cache_dir, timing=timing)

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'kernelloop.db'}"

    @property
    def database_is_local(self) -> bool:
        """The database is a file on this machine (SQLite, as ``kernelloop up`` keeps it), not a
        server that other machines and their users share."""
        return self.resolved_database_url.startswith("sqlite")

    @property
    def local_key_path(self) -> Path:
        """The local user's API key (`cli.keys.ensure_local_key`): the owner of ``optimize``'s jobs,
        sent by the CLI to a local API when it is given no key."""
        return self.data_dir / "local-api-key"

    @property
    def resolved_cache_dir(self) -> Path:
        return self.cache_dir or default_cache_dir()

    @property
    def embedded(self) -> bool:
        return self.broker_url is None

    def queue_for(self, target: str) -> str:
        """The queue a job of this target goes to: one per GPU type, plus ``cpu``."""
        return "cpu" if target == "cpu" else f"gpu-{self.gpu_type}"


def load_settings(**overrides: object) -> Settings:
    """Read the settings once at start-up (explicit overrides win over the environment)."""
    return Settings(**overrides)  # type: ignore[arg-type]
