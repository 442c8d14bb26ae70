"""The source of a patched model: the user's model with kernels in place of its regions.

One Python file that needs only torch and a compiler: the patch runtime
(`harness.sandboxed.regions.runtime`, copied unchanged), each region's kernel (a candidate file, unchanged,
executed as a module of its own), the plan (which graph nodes each region replaces, which of the
model's parameters its kernel binds), and ``ModelNew``, a subclass of the user's ``Model`` whose
state dict is ``Model``'s: the referee loads the model's weights into it by name.

Two forms: *standalone* (``patched.py``: imports the model file from beside it, or from its
absolute path, and checks and times itself when run), and *candidate* (the model's source
inside, for the referee, whose candidate sandbox sees no other file). Standard library only: the
text is assembled, nothing is run.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from vocabulary.regionplan import Region

__all__ = ["RUNTIME_FILE", "patched_source", "plan_of", "unique_extension_names"]

RUNTIME_FILE = Path(__file__).resolve().parent / "sandboxed" / "regions" / "runtime.py"
_EXTENSION_NAME = re.compile(r"""(\bname\s*=\s*)(['"])([A-Za-z_][A-Za-z0-9_]*)\2""")


def plan_of(regions: Sequence[Region]) -> list[dict[str, object]]:
    """What the runtime's ``install`` takes: one entry per instance of each region."""
    return [{"name": r.name, "kind": r.name, "unit": i.unit, "nodes": list(i.nodes), "targets": list(i.targets),
             "params": list(i.params)} for r in regions for i in r.instances]


def _extensions(source: str) -> dict[str, str]:
    """The extensions a kernel builds: each ``load_inline`` call's literal name → the call's text."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "load_inline":
            name = next((k.value for k in node.keywords if k.arg == "name"), None)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found[name.value] = ast.dump(node)
    return found


def unique_extension_names(kernels: Mapping[str, str]) -> dict[str, str]:
    """The kernels with every extension name that two of them build differently made distinct
    (``name="ext"`` becomes ``name="ext_<region>"``): two extensions of one name cannot live in
    one process. Kernels building the very same extension (one source for several regions) share it."""
    calls: dict[str, set[str]] = {}
    for source in kernels.values():
        for name, call in _extensions(source).items():
            calls.setdefault(name, set()).add(call)
    shared = {name for name, texts in calls.items() if len(texts) > 1}
    if not shared:
        return dict(kernels)
    def rename(source: str, region: str) -> str:
        def one(m: re.Match[str]) -> str:
            return f"{m.group(1)}{m.group(2)}{m.group(3)}_{region}{m.group(2)}" if m.group(3) in shared else m.group(0)

        return _EXTENSION_NAME.sub(one, source)

    return {region: rename(source, region) for region, source in kernels.items()}


_HEADER = '''"""{title}

Written by `kernelloop model apply`: {model} with a kernel in place of {count} of its regions
({names}). `ModelNew` is `Model` with the kernels bound to its own parameters (its state dict is
Model's); `patch(model)` patches a Model built elsewhere, in place. Needs torch and a compiler.
{usage}"""

import sys as _kl_sys
import types as _kl_types


def _kl_module(name, source, filename):
    module = _kl_types.ModuleType(name)
    module.__file__ = filename
    _kl_sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module

'''

_IMPORT_MODEL = '''import importlib.util as _kl_util
from pathlib import Path as _KlPath

_KL_MODEL_FILE = {path}
_kl_spec = _kl_util.spec_from_file_location("kl_user_model", _KL_MODEL_FILE)
_kl_model = _kl_util.module_from_spec(_kl_spec)
_kl_sys.modules["kl_user_model"] = _kl_model
_kl_spec.loader.exec_module(_kl_model)
'''

_FOOTER = '''
Model = _kl_model.Model
get_inputs = _kl_model.get_inputs
get_init_inputs = _kl_model.get_init_inputs
_KL_REGIONS = {plan}
_KL_KERNELS = {{
{kernels}
}}


class ModelNew(Model):
    """The model with kernelloop's kernels in place of its regions."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _kl_runtime.install(self, _KL_REGIONS, _KL_KERNELS)


def patch(model):
    """Patch a built Model in place (its weights stay; the kernels bind to them). Returns it."""
    return _kl_runtime.install(model, _KL_REGIONS, _KL_KERNELS)
'''

_MAIN = '''

def _kl_check(trials=3, runs=20, compile_baseline=True, device=None):
    """Compare ModelNew with Model on fresh inputs, then time Model, torch.compile(Model) and ModelNew."""
    import time

    import torch

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    model = Model(*get_init_inputs()).to(device)
    patched = ModelNew(*get_init_inputs()).to(device)
    patched.load_state_dict(model.state_dict())
    train = getattr(_kl_model, "MODE", "train") == "train"
    model.train(train)
    patched.train(train)
    worst = 0.0
    with torch.no_grad():
        for seed in range(trials):
            torch.manual_seed(seed)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in get_inputs()]
            expected, got = model(*inputs), patched(*inputs)
            expected = expected if isinstance(expected, (tuple, list)) else [expected]
            got = got if isinstance(got, (tuple, list)) else [got]
            for a, b in zip(expected, got):
                worst = max(worst, (a.float() - b.float()).abs().max().item())
                if not torch.allclose(a.float(), b.float(), atol=1e-4, rtol=1e-4):
                    print(f"trial {seed}: outputs differ (max abs error {worst:.3g})")
                    return 1

        def timed(fn):
            for _ in range(3):
                fn(*inputs)
            times = []
            for _ in range(runs):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                fn(*inputs)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append((time.perf_counter() - start) * 1e3)
            return sorted(times)[len(times) // 2]

        eager = timed(model)
        compiled = timed(torch.compile(model)) if compile_baseline else None
        ours = timed(patched)
    print(f"outputs match on {trials} trials (max abs error {worst:.3g})")
    print(f"eager {eager:.3f} ms, torch.compile {compiled and f'{compiled:.3f} ms' or '-'}, "
          f"patched {ours:.3f} ms: {eager / ours:.2f}x vs eager"
          + (f", {compiled / ours:.2f}x vs torch.compile" if compiled else ""))
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Check and time the patched model against the model.")
    parser.add_argument("--device", default=None)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true")
    arguments = parser.parse_args()
    _kl_sys.exit(_kl_check(arguments.trials, arguments.runs, not arguments.no_compile, arguments.device))
'''


def _model_path(model_path: Path, out_path: Path) -> str:
    """The model file as patched.py finds it: beside it (relative) when it can, else absolute."""
    model_path, out_dir = model_path.resolve(), out_path.resolve().parent
    try:
        relative = os.path.relpath(model_path, out_dir)
    except ValueError:
        return repr(str(model_path))
    if relative.startswith(".."):
        return repr(str(model_path))
    return f"_KlPath(__file__).resolve().parent / {relative!r}"


def patched_source(*, model_name: str, regions: Sequence[Region], kernels: Mapping[str, str],
                   model_source: str | None = None, model_path: Path | None = None,
                   out_path: Path | None = None) -> str:
    """The patched model's source (see the module's docstring).

    Args:
        model_name: the model file's name (for the docstring).
        regions: the regions to replace (each needs a kernel).
        kernels: region name → the kernel's candidate source (defines ``ModelNew``).
        model_source: the model's source, for the candidate form (the referee's).
        model_path, out_path: the model file and where the standalone form is written.

    Raises:
        ValueError: a region has no kernel, or neither form's inputs were given.
    """
    missing = [r.name for r in regions if r.name not in kernels]
    if missing:
        raise ValueError(f"no kernel for regions {', '.join(missing)}")
    names = ", ".join(r.name for r in regions) or "none"
    standalone = model_source is None
    if standalone and (model_path is None or out_path is None):
        raise ValueError("the standalone form needs the model file's path and the output path")
    usage = ("Run it: `python patched.py` checks the outputs against Model and times eager, torch.compile and\n"
             "the patched model (--device, --trials, --runs, --no-compile).\n") if standalone else ""
    parts = [_HEADER.format(title=f"{model_name}, patched with kernelloop's kernels.", model=model_name,
                            count=len(regions), names=names, usage=usage)]
    if standalone:
        assert model_path is not None and out_path is not None
        parts.append(_IMPORT_MODEL.format(path=_model_path(model_path, out_path)))
    else:
        parts.append(f"_kl_model = _kl_module('kl_user_model', {model_source!r}, {model_name!r})\n")
    parts.append(f"_kl_runtime = _kl_module('kl_patch_runtime', {RUNTIME_FILE.read_text()!r}, "
                 "'kernelloop_patch_runtime.py')\n")
    chosen = unique_extension_names({r.name: kernels[r.name] for r in regions})
    for region in regions:
        parts.append(f"_kl_kernel_{region.name} = _kl_module('kl_kernel_{region.name}', {chosen[region.name]!r}, "
                     f"'{region.name}_kernel.py')\n")
    entries = "\n".join(f"    {r.name!r}: _kl_kernel_{r.name}.ModelNew," for r in regions)
    parts.append(_FOOTER.format(plan=json.dumps(plan_of(regions), indent=1), kernels=entries))
    if standalone:
        parts.append(_MAIN)
    return "\n".join(parts)
