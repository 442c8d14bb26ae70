"""Numerical self-test of the CUDA examples on a GPU (torch only; no kernelloop import).

    python examples/check_cuda_examples.py            # all CUDA examples, full seed shapes
    python examples/check_cuda_examples.py seed1_cuda # one of them

For each example it builds the reference model (an inline copy of the bundled problem), re-draws
every floating parameter and buffer (same scale, variances positive, as the harness does), loads
the reference state_dict into ModelNew (every key with the same shape), sets the problem's mode and
compares outputs at atol=rtol=1e-4 with TF32 off: full seed shape, odd shapes, a shifted/wider
input distribution, and variants that take the kernels' other paths (negative scale, another pool
window). It also prints a rough eager-vs-candidate time (CUDA events, median, no L2 flush: the
harness's numbers are the ones to quote). Exit status 1 if anything fails.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent
ATOL = RTOL = 1e-4


# Reference models: copies of the bundled seed problems.
class Seed1Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.max_pool = nn.MaxPool2d(pool_kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = torch.tanh(x)
        x = x * self.scaling_factor
        x = x + self.bias
        return self.max_pool(x)


class Seed2Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scaling_factor


SEED1_INIT = [8, 64, 3, 2.0, (64, 1, 1), 4]
SEED2_INIT = [8, 64, 3, 2.0]

# example -> (reference class, mode, [(label, init args, input shapes)])
CASES = {
    "seed1_cuda": (Seed1Model, "train", [
        ("seed", SEED1_INIT, [(128, 8, 256, 256), (3, 8, 37, 41), (2, 8, 34, 66)]),
        ("scale<0", [8, 64, 3, -1.5, (64, 1, 1), 4], [(3, 8, 37, 41)]),
        ("pool=3", [8, 64, 3, 2.0, (64, 1, 1), 3], [(3, 8, 37, 41)]),
        ("pool=2", [8, 64, 3, 2.0, (64, 1, 1), 2], [(2, 8, 38, 42)]),
    ]),
    "seed2_train_cuda": (Seed2Model, "train", [
        ("seed", SEED2_INIT, [(128, 8, 128, 128), (3, 8, 37, 41), (1, 8, 5, 7)]),
        ("scale<0", [8, 64, 3, -0.7], [(3, 8, 37, 41)]),
    ]),
    "seed2_eval_cuda": (Seed2Model, "eval", [
        ("seed", SEED2_INIT, [(128, 8, 128, 128), (3, 8, 37, 41)]),
        ("scale<0", [8, 64, 3, -0.7], [(3, 8, 37, 41)]),
    ]),
}


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"kl_example_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    start = time.perf_counter()
    spec.loader.exec_module(module)
    print(f"{name}: import (build or cached) {time.perf_counter() - start:.1f} s")
    return module


@torch.no_grad()
def redraw(model: nn.Module, gen: torch.Generator) -> None:
    """Re-draw floating parameters and buffers: same scale, variances positive."""
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if not t.is_floating_point():
            continue
        if name.endswith("running_var"):
            t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
        else:
            scale = t.abs().mean().item() or 1.0
            t.copy_(torch.randn(t.shape, generator=gen) * scale)


@torch.no_grad()
def median_ms(fn, x, reps: int = 20) -> float:
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check(name: str, seed: int = 0) -> bool:
    ref_cls, mode, cases = CASES[name]
    module = load_example(name)
    ok = True
    for label, init, shapes in cases:
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        ref = ref_cls(*init)
        redraw(ref, gen)
        cand = module.ModelNew(*init)
        cand_sd = cand.state_dict()
        for key, value in ref.state_dict().items():
            if key not in cand_sd or cand_sd[key].shape != value.shape:
                print(f"  {label}: state_dict key {key!r} missing or of another shape")
                return False
        cand.load_state_dict(ref.state_dict(), strict=False)
        ref, cand = ref.cuda(), cand.cuda()
        getattr(ref, mode)()
        getattr(cand, mode)()
        for shape in shapes:
            for dist in ("randn", "shifted"):
                x = torch.randn(shape, generator=gen)
                if dist == "shifted":
                    x = x * 3.0 + 1.0
                x = x.cuda()
                with torch.no_grad():
                    expected = ref(x)
                    got = cand(x)
                torch.cuda.synchronize()
                if got.shape != expected.shape or got.dtype != expected.dtype:
                    print(f"  {label} {shape} {dist}: shape/dtype {tuple(got.shape)}/{got.dtype} "
                          f"!= {tuple(expected.shape)}/{expected.dtype}  FAIL")
                    ok = False
                    continue
                close = torch.isclose(got, expected, atol=ATOL, rtol=RTOL, equal_nan=True)
                err = (got - expected).abs().max().item()
                passed = bool(close.all())
                ok &= passed
                print(f"  {label} {mode} {shape} {dist}: max_abs_err={err:.3e} "
                      f"mismatch={1 - close.float().mean().item():.2e} {'PASS' if passed else 'FAIL'}")
        if label == "seed":
            x = torch.randn(shapes[0], generator=gen).cuda()
            eager, ours = median_ms(ref, x), median_ms(cand, x)
            print(f"  timing {shapes[0]}: eager {eager:.3f} ms, candidate {ours:.3f} ms, "
                  f"speedup {eager / ours:.2f}x (rough)")
        del ref, cand
        torch.cuda.empty_cache()
    return ok


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    names = argv or list(CASES)
    results = {name: check(name) for name in names}
    for name, passed in results.items():
        print(f"{name}: {'PASS' if passed else 'FAIL'}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
