"""The service's shared vocabulary: value types every layer names the same way, from the worker
through the store and the API to the command line's client.

Owns, one module each: JSON at the edges (`wire`: `JsonObject`, `Reader`, `WireError`), what an
evaluation is asked for (`evaluation`: `Target`, `Depth`), the referee's answer (`verdict`: the
`Verdict` tree and `source_sha256`; its build in `builds`, its first cause in `causes`, its
integrity `flags`, its `provenance`, its samples and baselines in `timing`), the referee's stages
(`stages`: a live view's events, an evaluation's seconds by stage), a device's rates
(`devices`), an own model's profile and regions (`regionplan`) and its report (`modelreport`), an
attempt's figures (`figures`: `AttemptFigures`, the one shape of the store's columns, the events,
the API's schemas, the dashboard and the CLI), and a job's events (`events`: `EventType`, one enum
for what the store, the worker and the API's stream append or send, and each type's payload).
May import: the standard library only (a leaf: the harness imports it without the service, and the
client commands on a user's machine; tests/test_architecture.py pins it).
Import each name from its module (``from vocabulary.verdict import Verdict``): one path per name.
"""
