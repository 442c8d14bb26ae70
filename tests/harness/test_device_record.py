"""Peak rates and bandwidth are measured once per machine, on the trusted side's record, so the
roofline and % of SOL stay put from job to job (issue 24, item 4: fp32 peaks of 0.017 and 0.185
TFLOP/s in two jobs); softmax-like problems get FLOPs (the counter left them at 0)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness import HarnessOptions, Referee
from harness.devicerecord import SETTLE_AFTER, DeviceRecord, Measurement
from harness.sandboxed.roles.loading import load_problem_module
from harness.sandboxed.roofline import count_flops
from problems import bundled_ids, load_problem
from vocabulary.devices import DeviceSpecs

ENVIRONMENT = {name: os.environ.get(name, "") for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                             "CUDA_VISIBLE_DEVICES")}


def specs(fp32: float, bandwidth: float) -> DeviceSpecs:
    return DeviceSpecs(target="cpu", name="x86_64", peak_flops={"fp32": fp32}, measured_bandwidth=bandwidth)


def test_the_record_keeps_the_best_rates_and_settles(tmp_path: Path) -> None:
    record = DeviceRecord(tmp_path, "cpu", ENVIRONMENT)
    assert record.best() is None and not record.settled()
    record.add(Measurement(specs=specs(0.017e12, 5e9), host_loaded=True))
    record.add(Measurement(specs=specs(0.185e12, 4e9), host_loaded=True))
    best = record.best()
    assert best is not None and best.peak_flops["fp32"] == 0.185e12 and best.measured_bandwidth == 5e9
    assert not record.settled()  # both taken on a loaded host: measure again
    record.add(Measurement(specs=specs(0.1e12, 6e9), host_loaded=False))
    assert record.settled()
    assert DeviceRecord(tmp_path, "cuda", ENVIRONMENT).best() is None  # one record per target
    loaded = DeviceRecord(tmp_path / "other", "cpu", ENVIRONMENT)
    for _ in range(SETTLE_AFTER):
        loaded.add(Measurement(specs=specs(0.05e12, 5e9), host_loaded=True))
    assert loaded.settled()  # a host that is always busy still settles
    assert not loaded.measured_unloaded() and record.measured_unloaded()


@pytest.mark.slow
def test_a_settled_record_is_what_every_job_uses_and_no_job_measures_again(tmp_path: Path) -> None:
    options = HarnessOptions(cache_dir=tmp_path, secret_seed=3, compile_baseline=False, trials=1)
    problem = load_problem("level1/softmax")
    record = DeviceRecord(tmp_path / "devices", "cpu", ENVIRONMENT)
    # 1. An empty record: the reference sandbox measures (before the problem's code is loaded).
    with Referee(problem, "cpu", options) as referee:
        first = referee.start_reference()
    (measured,) = record.measurements()
    assert first.specs == record.best() and first.specs.peak_flops["fp32"] > 0
    assert referee.roofline_trusted is not measured.host_loaded  # rates of a loaded host: no quarantine on them
    # 2. A settled record (planted: rates no measurement here would find) is used as it is.
    record.add(Measurement(specs=specs(1e12, 1e11), host_loaded=False))
    sols = []
    for _ in range(2):
        with Referee(problem, "cpu", options) as referee:
            info = referee.start_reference()
        assert info.specs.peak_flops["fp32"] == max(1e12, measured.specs.peak_flops["fp32"])
        assert referee.roofline_trusted  # measured unloaded once: believed
        assert info.specs.measured_bandwidth == max(1e11, measured.specs.measured_bandwidth)
        sols.append(info.sol_ms)
    assert len(record.measurements()) == 2  # nobody measured again
    assert sols[0] == sols[1] and sols[0] is not None and sols[0] > 0
    # the softmax's FLOPs are counted now (5 a element), so its compute floor is no longer 0
    sizes = load_problem_module(problem, "cpu")
    assert info.flops == 5 * sizes.batch_size * sizes.dim


def test_pointwise_reductions_softmax_and_pooling_get_flops() -> None:
    for pid in bundled_ids():
        module = load_problem_module(load_problem(pid), "cpu")
        torch.manual_seed(0)
        assert count_flops(module.Model(*module.get_init_inputs()), module.get_inputs()) > 0, pid
