"""The command line (`kernelloop …`, Typer): the top of the dependency graph.

Owns: the commands (`cli.main`), running the service's processes (`cli.service`,
`cli.processes`), the local ``optimize`` run (`cli.optimize`) and the HTTP client commands
(`cli.client`: submit, watch, export, replay, bench).
May import: every other package; the client commands (`cli.client`) only `harness` (``replay``),
`vocabulary` (the API's JSON read as values), `problems`, `display` (number formats shared with the
dashboard), `config` (inside a function: where ``kernelloop up`` keeps the local key) and HTTP:
they run on a user's machine against the API, so never `api`, `store`, `worker` or `agent`
(tests/test_architecture.py pins it).
In and out: arguments and the environment come in; the API's answers come in as JSON
(`vocabulary.wire.JsonObject`, pages as `cli.client.http.JsonPage`); tables, JSON (``--json``) and
exit codes (`cli.client.output.CliExit`) go out.
"""
