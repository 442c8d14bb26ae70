"""The service's command-line client: ``kernelloop submit``, ``watch``, ``jobs``, ``cancel``,
``messages``, ``logs``, ``replay`` and ``bench``.

One module per job: `cli.client.http` (where the API is: flags, environment, config file; the
HTTP client and its event stream, API errors in the CLI's words), `cli.client.watch` (following a
job; its live view, shared with ``kernelloop optimize``, is `cli.client.view`), `cli.client.jobs`
(``jobs``, ``cancel``, ``messages``, ``logs``), `cli.client.submit`,
`cli.client.replay` (with `cli.client.export`, the standalone file) and `cli.client.bench`;
`cli.client.output` holds the exit codes, consoles and number formats they share,
`cli.client.columns` rows as a terminal's table or as plain columns for a pipe, `cli.client.ending`
the closing sentence of a job.

Plain Typer command functions, registered by `cli.main`::

    app.command("submit")(client.submit)
    app.command("watch")(client.watch)
    app.command("jobs")(client.jobs)
    app.command("cancel")(client.cancel)
    app.command("messages")(client.messages)
    app.command("logs")(client.logs)
    app.command("replay")(client.replay)
    app.command("bench")(client.bench)

(`client_commands` is the same commands as a Typer app: ``python -m cli.client watch 12``.)

Exit codes (`CliExit`): ``watch`` and a following ``submit`` exit by the job's final state
(succeeded 0, failed 1, cancelled 3); ``replay`` by the local verdict
(`cli.common.verdict_exit_code`: pass 0; fail, suspicious or the kernel's own error 1; an error
not the kernel's 2); ``bench`` 0 once every job ended, 1 on ``--timeout`` or a spent daily quota
or cost cap, 130 when interrupted (Ctrl-C, SIGTERM: it says how to ``--resume``); ``jobs``,
``messages`` and ``logs`` 0; ``cancel`` 0, 1 for a job already ended; misuse, an unreachable API
or an API error 2. httpx is imported when a command runs, so ``kernelloop eval`` needs none of this.
"""

from __future__ import annotations

import typer

from cli.client.bench import BENCH_THRESHOLDS, BenchResult, BenchSummary, bench, read_suite, summarize
from cli.client.export import export_standalone
from cli.client.http import (
    DEFAULT_API_URL,
    ApiClient,
    ApiRequestError,
    ClientConfig,
    SseEvent,
    parse_sse,
    resolve_config,
)
from cli.client.jobs import cancel, jobs, logs, messages
from cli.client.output import CliExit
from cli.client.replay import replay
from cli.client.submit import submit
from cli.client.watch import watch
from cli.common import HELP_STYLE

__all__ = [
    "BENCH_THRESHOLDS",
    "DEFAULT_API_URL",
    "ApiClient",
    "ApiRequestError",
    "BenchResult",
    "BenchSummary",
    "CliExit",
    "ClientConfig",
    "SseEvent",
    "bench",
    "cancel",
    "client_commands",
    "export_standalone",
    "jobs",
    "logs",
    "messages",
    "parse_sse",
    "read_suite",
    "replay",
    "resolve_config",
    "submit",
    "summarize",
    "watch",
]

client_commands = typer.Typer(help="The kernelloop service's client commands.", no_args_is_help=True,
                              **HELP_STYLE)
for _name, _command in (("submit", submit), ("watch", watch), ("jobs", jobs), ("cancel", cancel),
                        ("messages", messages), ("logs", logs), ("replay", replay), ("bench", bench)):
    client_commands.command(_name)(_command)
