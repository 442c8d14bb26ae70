"""The referee: sandboxed compile, correctness, timing, baselines, roofline and integrity.

Importing this package needs only the standard library; the stage processes it starts import
torch. Public surface::

    from harness import evaluate, Referee, HarnessOptions, Target, Verdict, warm_headers

Owns: the evaluation (`Referee`, `evaluate`), its options (`HarnessOptions`, `Target`, `Depth`)
and the typed contract every other package shares: `Verdict` and its parts (`harness.verdict`,
with `Verdict.is_verified`, the one rule for "a verified kernel", and `source_sha256`), the
integrity `Flag`s (`harness.integrity`).
May import: `problems` (the problem format), the standard library and torch (torch only inside
stage processes); nothing above it (agent, store, worker, api, cli, config).
In and out: a problem, a candidate source, a target and options come in; a `Verdict` value goes
out. JSON only at its edges: the private pipe to its stage processes (`harness.sandbox`).
"""

from harness.evaluate import HARNESS_VERSION, Referee, ReferenceFailed, cancel_all, evaluate, warm_headers
from harness.options import Depth, HarnessOptions, Target, Timeouts, TimingOptions
from harness.progress import StageEvent, StageListener, StageName, StagePhase
from harness.verdict import Baselines, CompileResult, ErrorKind, Stage, Status, Timing, Trial, Verdict

__version__ = HARNESS_VERSION

__all__ = [
    "HARNESS_VERSION",
    "Baselines",
    "CompileResult",
    "Depth",
    "ErrorKind",
    "HarnessOptions",
    "Referee",
    "ReferenceFailed",
    "Stage",
    "StageEvent",
    "StageListener",
    "StageName",
    "StagePhase",
    "Status",
    "Target",
    "Timeouts",
    "Timing",
    "TimingOptions",
    "Trial",
    "Verdict",
    "cancel_all",
    "evaluate",
    "warm_headers",
]
