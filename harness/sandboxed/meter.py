"""The sandbox side of the metered loop: load `kl_meter`, bind it before any candidate code runs,
and hand it a forward to time (runs inside sandboxes; imports torch).

`Meter.load` imports the extension from the copy in the sandbox's run directory and binds it: it
takes its own references to torch's C builtins (``torch.mul``, ``Tensor.copy_``, the generators'
``manual_seed``...), the reduced-precision switches' getters with their values now (TF32 off), and
the harness objects it guards (every function of every ``harness`` module loaded so far, by the
name that holds it, and its code). Bound once: a later ``bind`` is refused. The same input
factors are recomputed by the comparer with `call_inputs` (the loop's ``load_inputs`` in C).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.channel import Channel
from harness.sandboxed import contract

__all__ = ["FACTOR_HIGH", "FACTOR_LOW", "Meter", "call_inputs"]

#: Packages whose functions the loop checks for tampering: the referee's code in this process.
_GUARDED_PACKAGES = frozenset({"harness", "vocabulary"})
#: Each floating input element of a timed call is its set's value times a factor drawn uniformly
#: in [FACTOR_LOW, FACTOR_HIGH) from the call's seed (kl_meter.c's ``load_inputs``).
FACTOR_LOW = 0.95
FACTOR_HIGH = 1.05
#: Fallback when the device does not report its L2 size.
_DEFAULT_L2_BYTES = 64 * 1024 * 1024
#: The flush writes this many times the L2 size before each timed CUDA call.
_FLUSH_FACTOR = 2.5


def call_inputs(source: Sequence[Any], seed: int, device: torch.device) -> list[Any]:
    """A metered call's inputs: input set ``source`` as the loop writes it for a call of ``seed``
    (the same ops, in the same order, on the same device: bitwise the same values)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    inputs = []
    for src in source:
        if not isinstance(src, torch.Tensor):
            inputs.append(src)
            continue
        buffer = src.clone()
        if src.is_floating_point():
            factors = torch.empty_like(src, dtype=torch.float32)
            factors.uniform_(FACTOR_LOW, FACTOR_HIGH, generator=generator)
            torch.mul(src, factors, out=buffer)
        inputs.append(buffer)
    return inputs


def _guarded() -> list[tuple[str, object, str, object, object]]:
    """``(name, holder, attribute, object, code)`` for every function of the referee's loaded
    modules, the harness's and the vocabulary's (what their globals hold, imported names included),
    and of their classes."""
    rows: list[tuple[str, object, str, object, object]] = []
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.partition(".")[0] not in _GUARDED_PACKAGES:
            continue
        for attribute, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType):
                rows.append((f"{module_name}.{attribute}", module, attribute, value, value.__code__))
            elif isinstance(value, type) and value.__module__ == module_name:
                for method_name, method in list(vars(value).items()):
                    if isinstance(method, types.FunctionType):
                        rows.append((f"{module_name}.{attribute}.{method_name}", value, method_name, method,
                                     method.__code__))
    return rows


def _builtins() -> dict[str, object]:
    base = torch._C.TensorBase
    return {
        "tensor_type": torch.Tensor, "empty_like": torch.empty_like, "empty": torch.empty, "mul": torch.mul,
        "set_grad_enabled": torch._C._set_grad_enabled, "is_grad_enabled": torch.is_grad_enabled,
        "uniform_": base.uniform_, "copy_": base.copy_, "cpu": base.cpu, "contiguous": base.contiguous,
        "data_ptr": base.data_ptr, "numel": base.numel, "element_size": base.element_size,
        "is_floating_point": base.is_floating_point, "manual_seed": torch._C.Generator.manual_seed,
        "shape": base.__dict__["shape"], "dtype": base.__dict__["dtype"], "device": base.__dict__["device"],
        "float32": torch.float32,
    }


class Meter:
    """The bound loop of this sandbox (one per process)."""

    def __init__(self, module: types.ModuleType, device: torch.device) -> None:
        self._run: Callable[..., int] = module.run
        self._tampered: Callable[[], list[str]] = module.tampered
        self.device = device

    @classmethod
    def load(cls, library: Path, device: torch.device) -> Meter:
        """Import and bind the extension at ``library`` (before any candidate code: the switches'
        values now are the ones every call is held to)."""
        loader = importlib.machinery.ExtensionFileLoader("kl_meter", str(library))
        spec = importlib.util.spec_from_file_location("kl_meter", str(library), loader=loader)
        if spec is None:
            raise ImportError(f"cannot load the timing loop from {library}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        bindings = _builtins()
        bindings["tf32_probes"] = [(probe, args) for probe, args in contract.tf32_probes()]
        bindings["guarded"] = _guarded()
        module.bind(bindings)
        return cls(module, device)

    def tampered(self) -> list[str]:
        """The guarded harness objects changed since the bind."""
        return list(self._tampered())

    def run(self, channel: Channel, fn: Callable[..., Any], sets: Sequence[Sequence[Any]], *, flush: bool) -> int:
        """Time ``fn`` over ``sets`` as the trusted side's GO frames say; returns the calls made.

        Raises:
            ConnectionError: the trusted side went away or sent something else than a GO frame.
        """
        cuda = self.device.type == "cuda"
        buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
        generator = torch.Generator(device=self.device)
        forward_generators = [torch.default_generator]
        flush_buffer = None
        stream = 0
        if cuda:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            forward_generators.append(torch.cuda.default_generators[index])
            stream = torch.cuda.current_stream(self.device).cuda_stream
            if flush:
                l2 = getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0) or _DEFAULT_L2_BYTES
                flush_buffer = torch.empty(int(_FLUSH_FACTOR * l2) // 4, dtype=torch.int32, device=self.device)
        return self._run(
            fd=channel.fileno(), fn=fn, buffers=buffers, sets=[list(s) for s in sets], generator=generator,
            forward_generators=forward_generators, device=self.device, cuda=cuda, stream=stream,
            flush_ptr=flush_buffer.data_ptr() if flush_buffer is not None else 0,
            flush_words=flush_buffer.numel() if flush_buffer is not None else 0)
