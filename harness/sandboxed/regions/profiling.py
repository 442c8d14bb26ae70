"""Profile a model: capture it, find its regions, write each as a problem, time them on the target.

The regions' times come from the profiler over the model *as the patch runs it*: every region of
the captured model is replaced (`harness.sandboxed.regions.runtime.install`) by its own extracted problem's
``Model``, bound to the model's weights and labelled, so one run checks three things at once: the
extracted problems compute what the model computes (``faithful``: the output matches the model's
own), the graph captured at a call matches the profiled one (the patch would find its regions),
and where the time goes. The model's own time is measured apart, without the profiler, eager and
under ``torch.compile``; each region alone likewise, at the target's sizes. Sandbox side (torch).
"""

from __future__ import annotations

import ast
import platform
import statistics
import time
import types
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx
from torch.profiler import ProfilerActivity, profile, record_function

from harness.options import TimingOptions, default_tolerance
from harness.patchsource import plan_of
from harness.protocol.model import ProfileModelRequest
from harness.sandboxed import contract
from harness.sandboxed.compare import compare_outputs, flatten_output
from harness.sandboxed.regions.capture import Unit, capture_units
from harness.sandboxed.regions.codegen import BoundaryTensor, RenderedRegion, TensorStats, render_region, tensor_stats
from harness.sandboxed.regions.grouping import Group, RegionKind, group_regions, short_op
from harness.sandboxed.regions.runtime import attribute, install, region_boundary, target_name
from harness.sandboxed.roles.loading import load_module, load_problem_module
from harness.seeds import TrialSpec
from problems.constants import DECLARATION_NAMES, module_constants
from problems.spec import Problem, parse_problem
from vocabulary.regionplan import Boundary, CaptureReport, ModelProfile, Region, RegionInstance

__all__ = ["profile_model"]

_LABEL = "kl_region:"
_WARMUP_CALLS = 2


def _meta_inputs(problem: Problem, target: str, seed: int) -> list[Any]:
    module = load_problem_module(problem, target)
    torch.manual_seed(seed)
    with torch.device("meta"):
        return list(module.get_inputs())


def _size_constants(problem: Problem) -> dict[str, tuple[int, int]]:
    tree = ast.parse(problem.source)
    full = module_constants(tree)
    cpu = module_constants(tree, problem.cpu_sizes)
    found: dict[str, tuple[int, int]] = {}
    for name, value in full.items():
        small = cpu.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(small, int) \
                and not isinstance(small, bool) and name not in DECLARATION_NAMES:
            found[name] = (value, small)
    return found


def _stats_of(graph_module: fx.GraphModule, args: Sequence[Any], kwargs: Mapping[str, Any],
              wanted: set[str]) -> dict[str, TensorStats]:
    """Statistics of the named nodes' values in one run of the captured unit."""
    found: dict[str, TensorStats] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, node: fx.Node) -> Any:
            value = super().run_node(node)
            if node.name in wanted and isinstance(value, torch.Tensor):
                found[node.name] = tensor_stats(value)
            return value

    flat = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs)))
    with torch.no_grad():
        Recorder(graph_module).run(*flat)
    return found


def _slug(group: Group) -> str:
    if group.kind is RegionKind.ATTENTION:
        return "attention"
    ops = list(dict.fromkeys(short_op(n).lstrip("_") for n in group.nodes))
    return "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")


def _modules(nodes: Sequence[fx.Node], unit: str) -> tuple[str, ...]:
    found: list[str] = []
    for node in nodes:
        stack = node.meta.get("nn_module_stack") or {}
        paths = [path for path, _ in stack.values() if path and not path.startswith("_")]
        if paths:
            path = paths[-1] if not unit else f"{unit}.{paths[-1]}"
            if path not in found:
                found.append(path)
        elif unit and unit not in found:
            found.append(unit)
    return tuple(found)


def _boundaries(items: Sequence[BoundaryTensor]) -> tuple[Boundary, ...]:
    return tuple(Boundary(b.shape, b.full, b.cpu, b.dtype) for b in items)


def _regions(problem: Problem, units: Sequence[Unit]) -> list[Region]:
    """Every region of every unit, one `Region` per distinct problem, in order of appearance."""
    declarations = {k: v for k, v in (("ATOL", problem.atol), ("RTOL", problem.rtol)) if v is not None}
    found: dict[str, tuple[RenderedRegion, list[RegionInstance], Group, Unit, list[TensorStats]]] = {}
    for unit in units:
        groups = group_regions(unit.graph_module.graph)
        bounds = [region_boundary(unit.graph_module.graph, [n.name for n in g.nodes]) for g in groups]
        wanted = {n.name for _, inputs, _, _ in bounds for n in inputs}
        stats = _stats_of(unit.graph_module, unit.args, unit.kwargs, wanted)
        for group, (_, inputs, _, _) in zip(groups, bounds, strict=True):
            names = [n.name for n in group.nodes]
            try:
                rendered = render_region(unit.graph_module, names, sizes=unit.sizes, mode=problem.mode.value,
                                         declarations=declarations, docstring="")
            except TypeError:
                continue  # not expressible as a problem (an argument Python cannot write): left to eager
            instance = RegionInstance(unit.path, tuple(names), tuple(target_name(n) for n in group.nodes),
                                      rendered.param_names, rendered.param_paths, _modules(group.nodes, unit.path))
            input_stats = [stats.get(n.name, TensorStats("float32")) for n in inputs]
            entry = found.setdefault(rendered.structure_key, (rendered, [], group, unit, input_stats))
            entry[1].append(instance)
    regions = []
    for k, (rendered, instances, group, unit, input_stats) in enumerate(found.values(), start=1):
        name = f"r{k}_{_slug(group)}"
        param_stats = [tensor_stats(attribute(unit.graph_module, p)) for p in rendered.param_paths]
        modules = [m for i in instances for m in i.modules]
        docstring = (f"Region {name} of {problem.id}: {' -> '.join(short_op(n) for n in group.nodes)}.\n\n"
                     f"In the model: {', '.join(dict.fromkeys(modules)) or 'its top-level forward'} "
                     f"({len(instances)} instance{'s' if len(instances) > 1 else ''}; one kernel replaces each).\n"
                     "Extracted by `kernelloop model extract`: the model's own ATen operations, its parameters' "
                     "shapes and dtypes,\ninputs drawn at the region's boundary shapes.\n")
        final = render_region(unit.graph_module, [n.name for n in group.nodes], sizes=unit.sizes,
                              mode=problem.mode.value, declarations=declarations, docstring=docstring,
                              input_stats=input_stats,
                              param_stats=param_stats)
        regions.append(Region(
            name=name, kind=group.kind.value, ops=tuple(short_op(n) for n in group.nodes),
            lone_vendor_call=group.lone_vendor_call, instances=tuple(instances), inputs=_boundaries(final.inputs),
            outputs=_boundaries(final.outputs), params=_boundaries(final.params), source=final.source,
            sizes=dict(final.sizes), random=final.random))
    return regions


def _load_region(region: Region, target: str) -> types.ModuleType:
    problem = parse_problem(region.source, problem_id=region.name)
    module = load_module(f"kl_region_{region.name}", region.source, f"region:{region.name}")
    for key, value in problem.size_overrides(target).items():
        setattr(module, key, tuple(value) if isinstance(value, list) else value)
    return module


def _labelled(module: types.ModuleType, name: str) -> type[torch.nn.Module]:
    base: type[torch.nn.Module] = module.Model

    class Labelled(base):  # type: ignore[misc, valid-type]
        def forward(self, *args: Any) -> Any:
            with record_function(_LABEL + name):
                return super().forward(*args)

    return Labelled


def _uninstall(model: torch.nn.Module) -> None:
    for module in model.modules():
        module.__dict__.pop("forward", None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _region_times(model: torch.nn.Module, inputs: Sequence[Any], device: torch.device, calls: int) -> dict[str, float]:
    """Milliseconds per model call the profiler attributes to each region's label."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.no_grad():
        for _ in range(_WARMUP_CALLS):
            model(*inputs)
        _sync(device)
        with profile(activities=activities) as prof:
            for _ in range(calls):
                model(*inputs)
            _sync(device)
    times: dict[str, float] = {}
    for event in prof.key_averages():
        if not event.key.startswith(_LABEL):
            continue
        name = event.key[len(_LABEL):]
        total = event.device_time_total if device.type == "cuda" else event.cpu_time_total
        times[name] = max(times.get(name, 0.0), total / 1000.0 / calls)
    return times


def _timed(fn: Any, inputs: Sequence[Any], device: torch.device, options: TimingOptions) -> float:
    """The median of ``fn(*inputs)``'s warm calls, in ms: the time shares of a profile (which
    regions to optimise), not a verdict's figure (those come from the referee's metered loop)."""
    cuda = device.type == "cuda"

    def once() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        fn(*inputs)
        if cuda:
            torch.cuda.synchronize(device)
        return (time.perf_counter() - started) * 1e3

    with torch.no_grad():
        for _ in range(max(1, options.min_warmup_calls)):
            once()
        samples: list[float] = []
        deadline = time.perf_counter() + options.max_time_s
        while len(samples) < options.min_repeats or (time.perf_counter() < deadline
                                                      and len(samples) < options.max_repeats):
            samples.append(once())
    return float(statistics.median(samples))


def _isolated(region: Region, target: str, device: torch.device, mode: str, options: TimingOptions,
              compile_gains: bool) -> Region:
    module = _load_region(region, target)
    torch.manual_seed(0)
    model = module.Model().train(mode == "train").to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    eager = _timed(model, inputs, device, options)
    if not compile_gains:
        return replace(region, eager_ms=eager, compile_note="torch.compile not timed (--no-compile-gains)")
    try:
        compiled = _timed(torch.compile(model), inputs, device, options)
    except Exception as exc:  # noqa: BLE001 - a region torch.compile fails on is a note
        return replace(region, eager_ms=eager, compile_note=f"torch.compile failed: {type(exc).__name__}: "
                       f"{str(exc)[:200]}")
    return replace(region, eager_ms=eager, compile_ms=compiled)


def profile_model(request: ProfileModelRequest) -> ModelProfile:
    """The model's `ModelProfile` on the request's target.

    Raises:
        Exception: whatever the model's own code raised while it was built (the sandbox reports it
            with the model's file and line).
    """
    problem, target = request.problem, request.target.value
    device = torch.device("cuda" if target == "cuda" else "cpu")
    contract.tf32_off()
    full = _meta_inputs(problem, "cuda", request.input_seed)
    cpu = _meta_inputs(problem, "cpu", request.input_seed)
    module = load_problem_module(problem, target)
    torch.manual_seed(request.init_seed)
    model: torch.nn.Module = module.Model(*module.get_init_inputs())
    model.train(problem.mode.value == "train").to(device)
    inputs = contract.make_inputs(module, TrialSpec(0, request.input_seed), device)
    units, failures, notes = capture_units(model, inputs, full=full, cpu=cpu, constants=_size_constants(problem),
                                           model_file=f"problem:{problem.id}", model_source=problem.source)
    capture = CaptureReport("torch.export", any(u.sizes for u in units), tuple(u.path for u in units),
                            tuple((f.path, f.reason) for f in failures), tuple(notes))
    regions = _regions(problem, units)
    with torch.no_grad():
        contract.seed_forward(0)
        expected = flatten_output(model(*inputs)) or []
    model_notes: list[str] = []
    faithful, error, attributed = True, None, {}
    if regions:
        modules = {r.name: _load_region(r, target) for r in regions}
        install(model, plan_of(regions), {name: _labelled(m, name) for name, m in modules.items()})
        try:
            with torch.no_grad():
                contract.seed_forward(0)
                patched = flatten_output(model(*inputs)) or []
            comparison = compare_outputs(expected, patched, atol=problem.atol, rtol=problem.rtol,
                                         tolerance_for=default_tolerance)
            faithful, error = comparison.passed, comparison.max_abs_err
            if not faithful:
                model_notes.append(f"the regions run as their extracted problems did not reproduce the model's "
                                   f"output: {comparison.message}")
            attributed = _region_times(model, inputs, device, request.profile_calls)
        finally:
            _uninstall(model)
    model_ms = _timed(model, inputs, device, request.timing)
    compile_ms = None
    if request.compile_gains:
        try:
            compile_ms = _timed(torch.compile(model), inputs, device, request.timing)
        except Exception as exc:  # noqa: BLE001 - a note, not a failure
            model_notes.append(f"torch.compile of the whole model failed: {type(exc).__name__}: {str(exc)[:200]}")
    total = sum(attributed.values())
    timed = []
    for region in regions:
        region = replace(region, time_ms=attributed.get(region.name, 0.0),
                         share=attributed.get(region.name, 0.0) / total if total > 0 else 0.0)
        timed.append(_isolated(region, target, device, problem.mode.value, request.timing, request.compile_gains))
    return ModelProfile(
        model=problem.id, target=target, mode=problem.mode.value, device=_device_name(device), model_ms=model_ms,
        compile_ms=compile_ms, attributed_ms=total, regions=tuple(timed), capture=capture, faithful=faithful,
        faithful_error=error, notes=tuple(model_notes))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"

