"""``kernelloop model apply``: kernels in place of a model's regions, verified and timed whole.

`apply_kernels` builds the patched model (`harness.patchsource`) and lets the referee judge it as
a candidate of the user's model: trials on fresh seeds with the model's weights re-drawn, the
contract's tolerance, timing against eager and ``torch.compile`` of the whole model. A region
whose kernel breaks the whole model is found (each region alone, then the rest added one by one,
largest first) and left out with the referee's reason; the report gives each region's own speedup,
what the shares predict for the model (`vocabulary.regionplan.amdahl`) and what the model measured.

Hand-written kernels (``--kernels DIR``) are first judged on their own region's problem, which
gives their speedups; a model run's kernels bring the verdicts of their jobs. Driver side,
standard library only: every kernel and the model run in the referee's sandboxes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from harness.evaluate import Referee, evaluate
from harness.modelextract import region_problem
from harness.options import HarnessOptions
from harness.patchsource import patched_source
from harness.retime import evaluate_with_retime, retime_options
from problems.spec import Problem
from vocabulary.evaluation import Depth, Target
from vocabulary.modelreport import ApplyReport, KernelChoice, RegionOutcome
from vocabulary.regionplan import ModelProfile, Region, amdahl
from vocabulary.verdict import Status, Verdict

__all__ = ["ApplyReport", "KernelChoice", "RegionOutcome", "apply_kernels"]  # the values: vocabulary.modelreport


Progress = Callable[[str], None]


def _first_line(verdict: Verdict) -> str:
    text = verdict.message or verdict.status.value
    failed = [t for t in verdict.trials if not t.passed]
    if failed and failed[0].message:
        text = f"{text}: {failed[0].message}"
    return text.strip().splitlines()[0][:300] if text.strip() else verdict.status.value


def _retiming(say: Progress, name: str) -> Callable[[Verdict], None]:
    def tell(_: Verdict) -> None:
        say(f"{name}: re-timing a quarantined speedup (a fresh process, fresh seeds)")

    return tell


def _judge_alone(regions: Sequence[Region], kernels: Mapping[str, KernelChoice], profile: ModelProfile,
                 target: Target, options: HarnessOptions, say: Progress) -> dict[str, KernelChoice]:
    """Kernels without a verdict, judged on their own region's problem (their speedups)."""
    judged = dict(kernels)
    for region in regions:
        choice = kernels[region.name]
        if choice.verdict is None:
            say(f"{region.name}: judging its kernel on the region's own problem")
            verdict, _ = evaluate_with_retime(region_problem(region, profile.model), choice.source, target, options,
                                              on_retime=_retiming(say, region.name))
            judged[region.name] = KernelChoice(choice.source, verdict)
    return judged


def apply_kernels(model: Problem, profile: ModelProfile, kernels: Mapping[str, KernelChoice], *,
                  target: Target | str | None = None, options: HarnessOptions | None = None,
                  model_name: str | None = None, on_progress: Progress | None = None) -> ApplyReport:
    """Patch ``model`` with ``kernels`` (region name → kernel), verify it whole and time it.

    Args:
        model: the user's model file, parsed as a problem (its ``MODE``, sizes and tolerance).
        profile: its profile (the regions and their instances).
        kernels: a kernel for each region to replace; a region's kernel without a verdict is first
            judged on the region's problem.
        target: where the referee runs (default: the profile's).
        options: the harness options.
        model_name: the model file's name as the patched source imports it.
        on_progress: told of each step, in words.

    Returns:
        The `ApplyReport`; a kernel that fails its region or breaks the model is left out in it.
    """
    options = options or HarnessOptions()
    target = Target(target or profile.target)
    say = on_progress or (lambda _: None)
    name = model_name or model.id
    regions = [profile.region(n) for n in kernels]
    regions.sort(key=lambda r: r.share, reverse=True)
    judged = _judge_alone(regions, kernels, profile, target, options, say)
    outcomes: dict[str, RegionOutcome] = {}
    candidates: list[Region] = []
    for region in regions:
        verdict = judged[region.name].verdict
        speedups = (verdict.speedup_vs_eager, verdict.speedup_vs_compile) if verdict else (None, None)
        if verdict is not None and verdict.status is not Status.PASS:
            outcomes[region.name] = RegionOutcome(region.name, region.share, False,
                                                  f"its kernel fails its own region: {_first_line(verdict)}", *speedups)
            continue
        outcomes[region.name] = RegionOutcome(region.name, region.share, True, "", *speedups)
        candidates.append(region)

    def source(chosen: Sequence[Region]) -> str:
        return patched_source(model_name=name, regions=chosen, model_source=model.source,
                              kernels={r.name: judged[r.name].source for r in chosen})

    final: Verdict | None = None
    notes: list[str] = []

    def benchmark(referee: Referee, chosen: Sequence[Region]) -> Verdict:
        say(f"the whole model with {len(chosen)} regions patched: compile, check, time")
        verdict = referee.evaluate(source(chosen), Depth.BENCHMARK)
        if verdict.status is Status.SUSPICIOUS:
            say("re-timing the patched model's quarantined speedup (a fresh process, fresh seeds)")
            verdict = evaluate(model, source(chosen), target, retime_options(options))
        return verdict

    with Referee(model, target, options.replace(prestart=False)) as referee:
        if candidates:
            final = benchmark(referee, candidates)
        if final is not None and final.status is not Status.PASS:
            notes.append(f"with every kernel in place the model failed ({_first_line(final)}); each region was "
                         "then tried alone")
            kept: list[Region] = []
            for region in candidates:
                say(f"{region.name} alone in the whole model: compile, check")
                alone = referee.evaluate(source([region]), Depth.CORRECTNESS)
                if alone.status is Status.PASS:
                    kept.append(region)
                else:
                    outcomes[region.name] = _left_out(outcomes[region.name], f"breaks the whole model: "
                                                      f"{_first_line(alone)}")
            together: list[Region] = []
            for region in kept:
                trial = [*together, region]
                if len(trial) > 1:
                    say(f"{', '.join(r.name for r in trial)} together in the whole model: compile, check")
                    verdict = referee.evaluate(source(trial), Depth.CORRECTNESS)
                    if verdict.status is not Status.PASS:
                        outcomes[region.name] = _left_out(outcomes[region.name], "breaks the whole model together "
                                                          f"with {', '.join(r.name for r in together)}: "
                                                          f"{_first_line(verdict)}")
                        continue
                together.append(region)
            final = None
            if together:
                final = benchmark(referee, together)
    kept_names = [r for r in outcomes.values() if r.included]
    if not kept_names:
        notes.append("no kernel was kept: the model is unchanged")
    predicted = amdahl(profile, {r.name: r.speedup_vs_eager for r in kept_names if r.speedup_vs_eager}) \
        if kept_names else None
    order = [r.name for r in profile.regions]
    return ApplyReport(model=name, target=target.value,
                       regions=tuple(sorted(outcomes.values(), key=lambda r: order.index(r.name))),
                       verdict=final, predicted_speedup=predicted, notes=tuple(notes))


def _left_out(outcome: RegionOutcome, reason: str) -> RegionOutcome:
    return RegionOutcome(outcome.name, outcome.share, False, reason, outcome.speedup_vs_eager,
                         outcome.speedup_vs_compile)
