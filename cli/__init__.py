"""The command line (`kernelloop …`, Typer): the top of the dependency graph.

Owns: the commands (`cli.main`), running the service's processes (`cli.service`,
`cli.processes`), the local ``optimize`` run (`cli.optimize`) and the HTTP client commands
(`cli.client`: submit, watch, export, replay, bench).
May import: every other package; the client commands only `harness` (``replay``), `problems` and
HTTP (they run on a user's machine against the API).
In and out: arguments and the environment come in; tables, JSON (``--json``) and exit codes go out.
"""
