"""Pure pieces of the referee: the roofline's speed of light, the quarantine, the seed derivation, the verified rule."""

import dataclasses

import torch

from harness.assembly import ROOFLINE_SLACK, UNTRUSTED_ROOFLINE_NOTE, quarantine
from harness.sandboxed.roofline import sol_ms
from harness.seeds import derive_seed, plan_trials
from vocabulary.devices import DeviceSpecs
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import Stage, Status, Verdict

_SPECS = DeviceSpecs(target="cuda", name="H200", peak_flops={"fp32": 50e12, "bf16": 1000e12},
                     measured_bandwidth=4e12)


def test_sol_ms_is_the_larger_of_the_compute_and_the_memory_floor() -> None:
    assert sol_ms(100e9, 4e9, _SPECS, torch.float32) == 2.0  # compute-bound: 100 GFLOP at 50 TFLOP/s
    assert sol_ms(1e9, 4e9, _SPECS, torch.float32) == 1.0  # memory-bound: 4 GB at 4 TB/s
    assert sol_ms(100e9, 0.0, _SPECS, torch.bfloat16) == 0.1  # bf16 outputs use the bf16 rate


def test_a_precision_without_a_peak_uses_fp32() -> None:
    assert _SPECS.peak_for(str(torch.float16)) == 50e12
    assert DeviceSpecs.from_dict({**_SPECS.to_dict(), "unknown": 1}) == _SPECS


def test_only_a_time_clearly_under_the_roofline_is_quarantined() -> None:
    def timed(median_ms: float) -> Verdict:
        return Verdict(status=Status.PASS, stage=Stage.DONE, timing=Timing(samples_ms=(median_ms,)), sol_ms=1.0,
                       baselines=Baselines(eager=Timing(samples_ms=(2.0,)), torch_compile=None))

    # A legit reduction on the H200 was timed at 100.4 % of the floor (measured copy bandwidth): believed.
    assert quarantine(timed(0.996), suspicious_speedup=10.0).status is Status.PASS
    assert quarantine(timed(ROOFLINE_SLACK * 1.01), suspicious_speedup=10.0).status is Status.PASS
    held = quarantine(timed(ROOFLINE_SLACK * 0.99), suspicious_speedup=10.0)
    assert held.status is Status.SUSPICIOUS and held.flags == ("faster_than_roofline",)
    over = quarantine(timed(0.15), suspicious_speedup=10.0)  # 13x eager, and under the floor
    assert over.flags == ("speedup_over_limit", "faster_than_roofline")
    # A roofline of rates measured only on a loaded host: a time under it is noted, not held.
    believed = quarantine(timed(ROOFLINE_SLACK * 0.5), suspicious_speedup=10.0, roofline_trusted=False)
    assert believed.status is Status.PASS and believed.flags == () and believed.notes == (UNTRUSTED_ROOFLINE_NOTE,)
    assert quarantine(timed(0.15), suspicious_speedup=10.0, roofline_trusted=False).flags == ("speedup_over_limit",)


def test_seeds_are_stable_distinct_and_secret_dependent() -> None:
    assert derive_seed(1234, "weights") == derive_seed(1234, "weights")
    assert derive_seed(1234, "weights") != derive_seed(1234, "trial:0") != derive_seed(1235, "trial:0")
    assert 0 <= derive_seed(1234, "weights") < 2**63


def test_the_trial_plan_orders_random_variant_then_shapes() -> None:
    plan = plan_trials(7, trials=2, input_variants=True, extra_shapes=[{"N": 3}])
    assert [t.kind for t in plan] == ["random", "random", "variant", "shape:0"]
    assert [t.seed for t in plan] == [derive_seed(7, f"trial:{i}") for i in range(4)]
    assert plan[3].overrides == {"N": 3}


def test_only_a_timed_benchmark_pass_is_verified() -> None:
    timed = Verdict(status=Status.PASS, stage=Stage.DONE, timing=Timing(samples_ms=(1.0,)),
                    baselines=Baselines(eager=Timing(samples_ms=(2.0,)), torch_compile=None))
    assert timed.is_verified
    assert not dataclasses.replace(timed, depth="correctness").is_verified
    assert not dataclasses.replace(timed, timing=None).is_verified
    assert not dataclasses.replace(timed, status=Status.SUSPICIOUS).is_verified
