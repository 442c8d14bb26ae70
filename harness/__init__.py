"""The referee: sandboxed compile, correctness, timing, baselines, roofline and integrity.

Importing this package needs only the standard library; the sandboxes it starts import torch.
Public surface::

    from harness import evaluate, Referee, HarnessOptions, warm_headers

Owns: the evaluation (`Referee`, `evaluate`) and its options (`HarnessOptions`). What it takes and
returns is the shared vocabulary's (`vocabulary`: `Target`, `Depth`, the `Verdict` and its parts,
the integrity `Flag`s, stage events), which every other package reads without importing the referee.
May import: `vocabulary`, `problems` (the problem format), the standard library and torch (torch
only inside sandboxes: `harness.sandboxed`, and `buildcache`'s functions); nothing above it (agent,
store, worker, api, cli, config).
In and out: a problem, a candidate source, a target and options come in; a `Verdict` value goes
out. JSON only at its edges, read through `vocabulary.wire.Reader`: the private pipe to its
sandboxes (`harness.channel`, messages typed in `harness.protocol`), the baselines cache, and
`Verdict.to_dict()`/`from_dict()` for whoever stores it.

Words: a *stage* is a step of an evaluation (compile, load, correctness, integrity, timing: the
verdict's `Stage`, the live view's stage events); a *sandbox* is one confined child process the
referee starts (compile, builder, candidate, reference, admission, model), under a warden.

The map, one module one job, one folder per side. Driver side (stdlib only; `harness/` outside
`harness/sandboxed/`, which it never imports): `evaluate` (the `Referee` façade),
`sandboxpool` (a Referee's sandboxes: their specs, prestart, cancel), `reference` (the trusted
reference: start, baselines and their cache, the timing loop's calibration, comparer),
`baselinerecord` (what the machine measured before: when a baseline is re-taken and when cached),
`devicerecord` (the device's rates, measured once per machine), `forkserver` (forks a CPU
Referee's candidate-side sandboxes from one process that imported torch once), `compiler` (compile sandboxes, the
trusted builder, header warm-ups), `lazybuilds` (builds a candidate sandbox asks for while it runs),
`candidaterun` (the candidate's steps over a frozen draft), `draft` (those steps' judgements, pure),
`assembly` (verdict, provenance, quarantine), `meter` (the metered timing loop: `frames`, `build`,
`drive`, `clock`, `noise`), `admission` and `sizing` (problems), `sandbox`, `sandboxspec`, `warden`
and `namespaces` (how a sandbox is started and confined), `problemsandbox` (the limits of sandboxes
running problem code). Shared by both sides: `channel` and `protocol` (the pipe and its
messages), `options`, `seeds`, and `buildcache` (the sandboxes build into it, the driver side
publishes and copies builds; torch only inside its functions). Sandbox side (torch),
`harness.sandboxed`: `roles` (one module per sandbox role, ``python -m harness.sandboxed.roles``),
`meter` (the loop's sandbox side) and `localmeter` (the loop in this process, for benchmarks),
`contract`, `compare`, `transfer`, `roofline`, `footprint`, `regions` (own models: capture,
regions, the patch runtime). Own models, driver side: `modelsandbox` (the profile),
`modelextract`, `patchsource`, `modelapply`; their values `regionplan` and `modelreport`.
"""

from harness.evaluate import HARNESS_VERSION, Referee, ReferenceFailed, cancel_all, evaluate, warm_headers
from harness.options import HarnessOptions, Timeouts, TimingOptions
from harness.progress import StageListener

__version__ = HARNESS_VERSION

__all__ = [
    "HARNESS_VERSION",
    "HarnessOptions",
    "Referee",
    "ReferenceFailed",
    "StageListener",
    "Timeouts",
    "TimingOptions",
    "cancel_all",
    "evaluate",
    "warm_headers",
]
