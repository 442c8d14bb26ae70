"""The evaluation contract (docs/architecture.md), as code both sides of an evaluation run identically.

Seeds derive from the job's secret; the trusted reference process knows the secret, a candidate
process receives only the derived seeds it needs (weights and per-trial inputs), never expected
outputs. Everything here runs inside sandboxes (it imports torch and touches problem code).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from harness.seeds import TrialSpec

__all__ = [
    "TrialSpec",
    "WeightsLoad",
    "WeightsMismatch",
    "apply_overrides",
    "forward_seed",
    "in_registration_order",
    "make_inputs",
    "redraw_weights",
    "reference_weights_for",
    "registrations",
    "seed_forward",
    "tf32_is_off",
    "tf32_off",
    "tf32_probes",
    "tf32_state",
]


def apply_overrides(module: types.ModuleType, overrides: Mapping[str, object]) -> dict[str, object]:
    """Set module constants; returns the previous values so they can be restored."""
    previous = {name: getattr(module, name) for name in overrides}
    for name, value in overrides.items():
        setattr(module, name, tuple(value) if isinstance(value, list) else value)
    return previous


@contextmanager
def overridden(module: types.ModuleType, overrides: Mapping[str, object]) -> Iterator[None]:
    previous = apply_overrides(module, overrides)
    try:
        yield
    finally:
        apply_overrides(module, previous)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)  # also seeds every CUDA device


def _variant(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Another value distribution: uniform on a wider range, shifted off zero."""
    if not tensor.is_floating_point():
        return tensor
    fresh = torch.rand(tensor.shape, generator=generator, dtype=torch.float32, device=generator.device) * 6.0 - 2.5
    return fresh.to(dtype=tensor.dtype)


def make_inputs(problem_module: types.ModuleType, trial: TrialSpec, device: torch.device) -> list[Any]:
    """The inputs of one trial, identical in every process that calls this with the same trial.

    On CUDA the problem's ``get_inputs`` draws on the device (its factories default to it): the
    same seed gives the same values in every process on the same kind of GPU, and seed problem 1's
    268 MB input takes a millisecond there instead of about half a second on the CPU, for every
    trial, timed input set and re-checked call.
    """
    on_device = torch.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with overridden(problem_module, trial.overrides):
        _seed_everything(trial.seed)
        with on_device:
            inputs = list(problem_module.get_inputs())
    if trial.kind == "variant":
        generator = torch.Generator(device=device).manual_seed(trial.seed ^ 0x5EED)
        inputs = [_variant(x.to(device), generator) if isinstance(x, torch.Tensor) else x for x in inputs]
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


#: Mixed into a seed before a forward, so its stream differs from the one that drew the inputs.
_FORWARD_SALT = 0x5EED_F0_7A2D


def forward_seed(trial_seed: int, call: int | None = None) -> int:
    """The RNG seed set before a forward of a trial (``call`` None) or of a timed call: the same
    in the reference and candidate processes (the RNG rule for RANDOM problems, docs/problems.md)."""
    base = trial_seed if call is None else call
    return (base ^ _FORWARD_SALT) & ((1 << 63) - 1)


def seed_forward(trial_seed: int, call: int | None = None) -> None:
    torch.manual_seed(forward_seed(trial_seed, call))


def redraw_weights(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Re-draw every floating parameter and buffer, keeping each one's scale and sign range.

    Defaults (BatchNorm's 0/1 statistics, zero biases) would let shortcuts look right; fresh
    values from the secret seed do not. Non-negative tensors (variances, norms' weights) stay
    non-negative. Returns the new state dict (on CPU), in the model's ``state_dict`` order.
    """
    generator = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    fresh: dict[str, torch.Tensor] = {}
    for name in sorted(state):
        tensor = state[name]
        if not tensor.is_floating_point() or tensor.numel() == 0:
            fresh[name] = tensor.detach().clone().cpu()
            continue
        values = tensor.detach().double().cpu()
        mean = values.mean().item()
        std = values.std().item() if values.numel() > 1 else 0.0
        nonneg = bool((values >= 0).all())
        noise = torch.randn(values.shape, generator=generator, dtype=torch.float64)
        if std > 0:
            new = noise * std + mean
        else:
            base = abs(mean) or 0.1
            new = base * (0.5 + torch.rand(values.shape, generator=generator, dtype=torch.float64)) \
                if nonneg else mean + base * noise
        if nonneg:
            new = new.abs() + 1e-3 * (abs(mean) or 1.0)  # variances stay strictly positive
        fresh[name] = new.to(tensor.dtype)
    model.load_state_dict(fresh)
    return {name: fresh[name] for name in state}  # in state_dict (registration) order


@dataclass(frozen=True)
class WeightsLoad:
    """How the reference's weights go into ``ModelNew``: ``state`` keyed by ModelNew's names (for
    ``load_state_dict(strict=False)``), and the pairs (Model's name, ModelNew's name) that were
    matched by registration order rather than by name (empty: every one by name)."""

    state: dict[str, torch.Tensor]
    renamed: tuple[tuple[str, str], ...] = ()


class WeightsMismatch(ValueError):
    """ModelNew's state dict takes the reference weights neither by name nor by order."""


#: Rows of the side-by-side listing of a mismatch.
_MISMATCH_ROWS = 24


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


@contextmanager
def registrations() -> Iterator[dict[tuple[int, str], int]]:
    """Records, while active, the order in which any module registers a parameter or buffer:
    ``(id(module), name) -> rank`` (the last registration of a name counts)."""
    from torch.nn.modules import module as nn_module

    ranks: dict[tuple[int, str], int] = {}
    counter = itertools.count()

    def hook(module: torch.nn.Module, name: str, value: object) -> None:
        ranks[(id(module), name)] = next(counter)

    handles = [nn_module.register_module_parameter_registration_hook(hook),
               nn_module.register_module_buffer_registration_hook(hook)]
    try:
        yield ranks
    finally:
        for handle in handles:
            handle.remove()


def in_registration_order(model: torch.nn.Module, state: Mapping[str, torch.Tensor],
                          ranks: Mapping[tuple[int, str], int]) -> dict[str, torch.Tensor]:
    """``state`` (the model's ``state_dict``) ordered as the model's parameters and buffers were
    registered (`registrations`, recorded while it was built): a submodule's before a parameter
    created after it, whatever ``state_dict`` lists first (a module's own parameters, then its
    children's). Entries without a recorded rank keep their place after the others."""
    rank: dict[str, float] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name in (*module._parameters, *module._buffers):
            rank.setdefault(f"{prefix}.{name}" if prefix else name, ranks.get((id(module), name), math.inf))
    keys = list(state)
    return {k: state[k] for k in sorted(keys, key=lambda k: rank.get(k, math.inf))}


def reference_weights_for(reference: Mapping[str, torch.Tensor], candidate: Mapping[str, torch.Tensor]) -> WeightsLoad:
    """The reference weights as ModelNew takes them (DESIGN §2, KernelBench's semantics).

    By name when ModelNew has every key of ``reference`` with the same shape (extra keys are
    fine). Otherwise by registration order, when the floating parameters and buffers of both
    match one to one in that order and in shape: KernelBench builds both models from the same
    seed, so names never mattered to it. Non-floating buffers (BatchNorm's step count) then go by
    name where ModelNew has them.

    Args:
        reference: the reference's weights in registration order (`in_registration_order`).
        candidate: ``ModelNew().state_dict()``, in registration order.

    Raises:
        WeightsMismatch: neither applies; its message lists both sets side by side.
    """
    if all(k in candidate and _shape(candidate[k]) == _shape(v) for k, v in reference.items()):
        return WeightsLoad(state=dict(reference))
    ours = [(k, v) for k, v in reference.items() if v.is_floating_point()]
    theirs = [(k, v) for k, v in candidate.items() if v.is_floating_point()]
    if len(ours) == len(theirs) and all(_shape(a) == _shape(b) for (_, a), (_, b) in zip(ours, theirs, strict=True)):
        state = {name: value for (_, value), (name, _) in zip(ours, theirs, strict=True)}
        state.update({k: v for k, v in reference.items()
                      if not v.is_floating_point() and k in candidate and _shape(candidate[k]) == _shape(v)})
        return WeightsLoad(state=state, renamed=tuple((a, b) for (a, _), (b, _) in zip(ours, theirs, strict=True)
                                                      if a != b))
    raise WeightsMismatch(_side_by_side(ours, theirs))


def _side_by_side(ours: list[tuple[str, torch.Tensor]], theirs: list[tuple[str, torch.Tensor]]) -> str:
    def cell(entry: tuple[str, torch.Tensor] | None) -> str:
        return "-" if entry is None else f"{entry[0]} {_shape(entry[1])}"

    rows = max(len(ours), len(theirs))
    cells = [(cell(ours[i] if i < len(ours) else None), cell(theirs[i] if i < len(theirs) else None),
              i < len(ours) and i < len(theirs) and _shape(ours[i][1]) == _shape(theirs[i][1]))
             for i in range(rows)]
    width = max([len("Model"), *(len(a) for a, _, _ in cells)])
    lines = [f"  {'#':>2}  {'Model':<{width}}  ModelNew"]
    lines += [f"  {i:>2}  {a:<{width}}  {b}{'' if same else '   <- missing' if '-' in (a, b) else '   <- differs'}"
              for i, (a, b, same) in enumerate(cells[:_MISMATCH_ROWS])]
    if rows > _MISMATCH_ROWS:
        lines.append(f"  [... {rows - _MISMATCH_ROWS} more]")
    return ("ModelNew's parameters and buffers match Model's neither by name (every key of Model's state_dict, "
            "same shape) nor by registration order (the floating ones, one to one, same shapes); in "
            "registration order:\n" + "\n".join(lines) + "\nKeep every parameter and buffer of Model, under its "
            "name or created in the same order with the same shape (e.g. self.conv = nn.Conv2d(...), or "
            "self.weight = nn.Parameter(torch.empty(out, in, k, k)) first, then the bias).")


#: Reduced-precision switches of torch's newer API: (backend, op) slots of ``fp32_precision``.
_FP32_PRECISION_SLOTS = (
    ("generic", "all"), ("cuda", "all"), ("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn"),
    ("mkldnn", "all"), ("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn"),
)
#: The legacy getters (one raises when the two APIs were mixed: that is a change too).
_LEGACY_GETTERS = ("_get_cublas_allow_tf32", "_get_cudnn_allow_tf32", "_get_float32_matmul_precision",
                   "_get_onednn_allow_tf32")
# Bound now, before any candidate code runs in this process: patching torch.backends does not
# reach them.
_precision_getter = getattr(torch._C, "_get_fp32_precision_getter", None)
_precision_setter = getattr(torch._C, "_set_fp32_precision_setter", None)
_legacy = {name: getattr(torch._C, name, None) for name in _LEGACY_GETTERS}
_off_state: tuple[Any, ...] | None = None


def tf32_probes() -> list[tuple[Any, tuple[str, ...]]]:
    """``(getter, args)`` per reduced-precision switch: torch's C getters, for the metered loop to
    hold and call after every timed call (`harness.sandboxed.meter`)."""
    probes: list[tuple[Any, tuple[str, ...]]] = []
    if _precision_getter is not None:
        for backend, op in _FP32_PRECISION_SLOTS:
            try:
                _precision_getter(backend, op)
            except Exception:  # noqa: BLE001 - a slot this build lacks (cudnn without CUDA)
                continue
            probes.append((_precision_getter, (backend, op)))
    probes.extend((getter, ()) for getter in _legacy.values() if getter is not None)
    return probes


def tf32_state() -> tuple[Any, ...]:
    """Every switch that lets fp32 math run in reduced precision (TF32, oneDNN bf16), both APIs."""
    state: list[Any] = []
    for backend, op in _FP32_PRECISION_SLOTS:
        try:
            state.append(_precision_getter(backend, op) if _precision_getter else None)
        except Exception:  # noqa: BLE001 - a slot this build lacks (cudnn without CUDA)
            state.append("n/a")
    for name in _LEGACY_GETTERS:
        getter = _legacy[name]
        try:
            state.append(getter() if getter else None)
        except Exception:  # noqa: BLE001 - torch refuses to answer after the APIs were mixed
            state.append("mixed")
    return tuple(state)


def tf32_off() -> None:
    """TF32 (and every reduced fp32 precision) off for reference, baselines and candidate alike
    (the contract's numerics: docs/architecture.md). The first call records the off state; later calls
    restore it exactly."""
    global _off_state
    if _off_state is not None and _precision_setter is not None:
        for (backend, op), value in zip(_FP32_PRECISION_SLOTS, _off_state, strict=False):
            if isinstance(value, str) and value not in ("n/a", "mixed"):
                with contextlib.suppress(Exception):
                    _precision_setter(backend, op, value)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if _off_state is None:
        _off_state = tf32_state()


def tf32_is_off() -> bool:
    """Whether every switch is as `tf32_off` left it."""
    return _off_state is not None and tf32_state() == _off_state
