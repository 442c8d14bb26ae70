"""The service's command-line client: ``kernelloop submit``, ``watch``, ``replay`` and ``bench``.

One module per job: `cli.client.http` (where the API is: flags, environment, config file; the
HTTP client and its event stream), `cli.client.watch` (following a job; its live view, shared with
``kernelloop optimize``, is `cli.client.view`), `cli.client.submit`,
`cli.client.replay` (with `cli.client.export`, the standalone file) and `cli.client.bench`;
`cli.client.output` holds the exit codes, consoles and number formats they share.

Plain Typer command functions, registered by `cli.main`::

    app.command("submit")(client.submit)
    app.command("watch")(client.watch)
    app.command("replay")(client.replay)
    app.command("bench")(client.bench)

(`client_commands` is the same four as a Typer app: ``python -m cli.client watch 12``.)

Exit codes (`ExitCode`): ``watch`` and a following ``submit`` exit by the job's final state
(succeeded 0, failed 1, cancelled 3); ``replay`` by the local verdict (pass 0, fail or suspicious
1, error 2); ``bench`` 0 once every job ended, 1 on ``--timeout``; misuse, an unreachable API or
an API error 2. httpx is imported when a command runs, so ``kernelloop eval`` needs none of this.
"""

from __future__ import annotations

import typer

from cli.client.bench import BENCH_THRESHOLDS, BenchResult, BenchSummary, bench, read_suite, summarize
from cli.client.export import export_standalone
from cli.client.http import DEFAULT_API_URL, ApiClient, ApiError, ClientConfig, SseEvent, parse_sse, resolve_config
from cli.client.output import ExitCode
from cli.client.replay import replay
from cli.client.submit import submit
from cli.client.watch import watch

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

client_commands = typer.Typer(help="The kernelloop service's client commands.", no_args_is_help=True,
                              add_completion=False)
for _name, _command in (("submit", submit), ("watch", watch), ("replay", replay), ("bench", bench)):
    client_commands.command(_name)(_command)
