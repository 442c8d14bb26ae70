"""The referee: sandboxed compile, correctness, timing, baselines, roofline and integrity.

Importing this package needs only the standard library; the stage processes it starts import
torch. Public surface::

    from harness import evaluate, Referee, HarnessOptions, Target, Verdict, warm_headers
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
