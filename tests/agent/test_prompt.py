"""The opening messages state the evaluation contract outright and carry the playbook."""

from __future__ import annotations

import dataclasses

from agent.prompt import problem_message, system_prompt
from problems import load_problem
from problems.spec import Policy, Problem
from tests.support.agents import SEED2_EVAL, budgets_of
from tests.support.doubles.fakes import FAKE_SPECS
from vocabulary.budgets import Budgets
from vocabulary.devices import DeviceSpecs


def _prompt(problem: Problem, target: str = "cuda", *, specs: DeviceSpecs | None = FAKE_SPECS,
            budgets: Budgets | None = None, strategy: str | None = None) -> str:
    return system_prompt(problem, target, specs=specs, budgets=budgets or budgets_of(), random_trials=3,
                         strategy=strategy)


def test_contract_for_a_train_mode_problem(seed2: Problem) -> None:
    text = _prompt(seed2)
    # mode, and what it means for BatchNorm
    assert "Mode: TRAIN" in text and "current batch's statistics" in text
    assert "folding them into weights is wrong here" in text
    # weights: re-drawn, loaded by name (else by registration order) after __init__, derived things in forward
    assert "re-drawn from a secret seed" in text and "running_var = 1" in text
    assert "weights are loaded into it AFTER __init__: by name" in text
    assert "otherwise by\n  registration order" in text and "KernelBench" in text
    assert "must be computed in forward" in text
    # inputs, shapes, tolerance, TF32, policy, no GPU at import
    assert "3 trials with get_inputs() re-drawn" in text and "another value distribution" in text
    assert "extra shape 0: batch_size=3, height=37, width=41" in text
    assert "atol = rtol = 1e-4 for float32" in text and "1e-2 for float16/bfloat16" in text
    assert "TF32 is OFF" in text
    assert "Policy: MIXED" in text and "must do real work" in text
    assert "no GPU visible" in text
    assert "torch.compile, Triton, CUDA graphs" in text
    assert "above 10x" in text


def test_contract_for_an_eval_mode_problem_with_overrides(seed2: Problem) -> None:
    problem = load_problem(SEED2_EVAL)
    text = _prompt(dataclasses.replace(problem, atol=1e-3, rtol=2e-3, policy=Policy.PURE))
    assert "Mode: EVAL" in text and "running statistics" in text and "foldable" in text
    assert "atol = 0.001, rtol = 0.002" in text
    assert "Policy: PURE" in text


def test_device_playbook_tools_budget_and_strategy(seed2: Problem) -> None:
    text = _prompt(seed2, budgets=budgets_of(turns=7, tool_calls=12), strategy="Fuse everything.")
    assert "NVIDIA H200" in text and "ridge point" in text
    # the playbook's steps
    for phrase in ("256 -> 254", "254 -> 63", "max(f(v)) = f(max(v))", "eval-mode BatchNorm is a per-channel affine",
                   "memory-bound", "coalescing", "vectorised"):
        assert phrase in text, phrase
    # the fast-compile split
    assert "no_implicit_headers=True" in text and "<c10/cuda/CUDAStream.h>" in text
    assert "c10::cuda::getCurrentCUDAStream()" in text and "Do not include <ATen/cuda/CUDAContext.h>" in text
    assert "7 turns" in text and "12 tool calls" in text and "submit(source)" in text
    assert text.rstrip().endswith("Fuse everything.")


def test_cpu_prompt_adapts_the_playbook_and_states_the_sizes(seed2: Problem) -> None:
    text = _prompt(seed2, target="cpu", specs=None)
    assert "C++ performance engineer" in text and "#pragma omp parallel for" in text
    assert "cuda_sources=" not in text and "no GPU visible" not in text
    assert "call get_gpu_specs" in text
    message = problem_message(seed2, "cpu")
    assert "batch_size=16" in message and "height=64" in message
    assert "class Model(nn.Module)" in message and "restate the shapes" in message
    assert "batch_size=16" not in problem_message(seed2, "cuda")
