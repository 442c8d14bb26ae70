"""A worker process that judges a scripted set of verdicts and keeps their metrics:
``python -m tests.support.metrics_entry [--serve PORT]``.

The verdicts go through the worker's own evaluator (`worker.evaluator.RefereeEvaluator`, a
`ScriptedReferee` in place of the harness), so its metrics are written as a real worker writes
them: into ``PROMETHEUS_MULTIPROC_DIR`` when it is set (`kernelloop up`), or served on ``--serve
PORT`` (a distributed worker's exporter; the process then waits for its stdin to close).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from agent.retry import NO_RETRY
from tests.support.worker import ScriptedReferee
from vocabulary.builds import CompileResult
from vocabulary.evaluation import Depth, Target
from vocabulary.stages import StageSeconds
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ErrorKind, Stage, Status, Trial, Verdict
from worker.evaluator import RefereeEvaluator
from worker.metrics import serve_worker_metrics


def _timed(median_ms: float, seconds: StageSeconds) -> Verdict:
    timing = Timing.from_samples([median_ms] * 5, clock="monotonic")
    eager = Timing.from_samples([4.0] * 5, clock="monotonic")
    return Verdict(status=Status.PASS, stage=Stage.DONE, compile=CompileResult(ok=True, seconds=0.0),
                   trials=(Trial(seed_index=0, passed=True, max_abs_err=0.0, mean_abs_err=0.0, mismatch_frac=0.0),),
                   timing=timing, baselines=Baselines(eager=eager, torch_compile=None), stage_seconds=seconds)


#: Four verdicts on cpu: one of each candidate kind, 10 s of lane time together (compiles beside it).
VERDICTS = (
    _timed(2.0, StageSeconds(compile=30.0, load=0.5, correctness=1.5, timing=1.0)),  # fast: lane 3 s
    Verdict(status=Status.FAIL, stage=Stage.CORRECTNESS, message="1 of 5 trials failed",
            compile=CompileResult(ok=True, seconds=25.0), stage_seconds=StageSeconds(compile=25.0, load=0.5,
                                                                                     correctness=1.5)),  # wrong: 2 s
    Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE, message="compile failed",
            compile=CompileResult(ok=False, seconds=20.0), stage_seconds=StageSeconds(compile=20.0)),  # 0 s
    _timed(5.0, StageSeconds(reference_start=1.0, baselines=1.0, load=0.5, correctness=1.5, timing=1.0)),  # 5 s
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", type=int, help="serve this process's metrics on 127.0.0.1:PORT until stdin closes")
    args = parser.parse_args()
    if args.serve:
        serve_worker_metrics(args.serve, "127.0.0.1")
    with tempfile.TemporaryDirectory() as locks:
        evaluator = RefereeEvaluator(ScriptedReferee(list(VERDICTS), target=Target.CPU), cache_dir=Path(locks),
                                     device_key="cpu-metrics-test", retry=NO_RETRY)
        try:
            for _ in VERDICTS:
                evaluator.evaluate("class ModelNew: ...", Depth.BENCHMARK)
        finally:
            evaluator.close()
    print("judged", flush=True)
    if args.serve:
        sys.stdin.read()


if __name__ == "__main__":
    main()
