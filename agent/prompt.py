"""The opening of every trajectory: the system prompt (role, contract, device, playbook, tools,
budget, strategy) and the problem message.

The contract is the evaluation contract of docs/architecture.md stated outright, with this
problem's values filled in, so the model never spends turns guessing what the seed transcripts
had to guess: train or eval mode, whether weights are copied, the tolerance, whether torch ops
may stay, whether TF32 is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.feedback import gpu_summary
from agent.playbook import playbook
from vocabulary.devices import DeviceSpecs

if TYPE_CHECKING:
    from problems.spec import Problem
    from vocabulary.budgets import Budgets

__all__ = ["budget_summary", "contract_text", "problem_message", "system_prompt"]


def _tolerance(problem: Problem) -> str:
    default = "atol = rtol = 1e-4 for float32 outputs, 1e-2 for float16/bfloat16, exact for integers and bools"
    if problem.atol is None and problem.rtol is None:
        return default
    return (f"this problem sets atol = {problem.atol if problem.atol is not None else 'per dtype'}, "
            f"rtol = {problem.rtol if problem.rtol is not None else 'per dtype'} (default: {default})")


def _mode(problem: Problem) -> str:
    if problem.mode.value == "train":
        return (
            "TRAIN. Both models are in .train() mode, as PyTorch builds them. BatchNorm normalises with "
            "the current batch's statistics (per channel over N, H, W: the mean and the biased variance) "
            "and updates running_mean / running_var (momentum, unbiased variance); the running statistics "
            "are NOT used for the output, so folding them into weights is wrong here. Dropout would be "
            "active (problems with dropout declare themselves non-deterministic)."
        )
    return (
        "EVAL. Both models are in .eval() mode. BatchNorm uses its running statistics, which makes it a "
        "per-channel affine (foldable into a preceding conv's weight and bias, in forward); dropout is "
        "the identity."
    )


def _policy(problem: Problem) -> str:
    if problem.policy.value == "pure":
        return ("PURE: forward may use torch only to allocate tensors and take views; every computation runs "
                "in your own kernels (the harness records the torch ops forward dispatches).")
    return ("MIXED: vendor ops through torch (F.conv2d, matmul, cuDNN/cuBLAS/oneDNN) may stay beside your "
            "kernels, but your extension must do real work: the harness replaces the outputs of your "
            "extension's functions with noise, and the result must then be wrong.")


def _trials(problem: Problem, random_trials: int) -> str:
    parts = [f"{random_trials} trials with get_inputs() re-drawn from per-trial seeds"]
    if problem.input_variants:
        parts.append("1 trial with another value distribution (uniform in [-2.5, 3.5) instead of randn)")
    for i, shape in enumerate(problem.extra_shapes):
        overrides = ", ".join(f"{k}={v}" for k, v in shape.items())
        parts.append(f"extra shape {i}: {overrides}")
    return "; ".join(parts)


def _random(problem: Problem) -> str:
    rule = ("the harness seeds torch's RNG with the same seed right before the reference's forward and "
            "before yours, in every trial and every re-checked timed call.")
    if problem.random:
        return (rule + " This problem's forward draws random numbers (it declares RANDOM = True, e.g. "
                "dropout): to match, draw them through torch's default generator in the same order, shapes "
                "and dtypes as the reference (e.g. call torch.nn.functional.dropout / torch.rand_like where it "
                "does, and fuse around them); numbers drawn by a generator of your own will not match.")
    return rule + " This problem draws none: neither may ModelNew."


def _timing_caches(target: str) -> str:
    if target == "cuda":
        return "with the L2 cache flushed before each"
    return "on warm caches (as torch.utils.benchmark times CPU code)"


def contract_text(problem: Problem, target: str, *, random_trials: int) -> str:
    """The evaluation contract, with this problem's mode, policy, tolerance and trials."""
    gpu_import = ("Your file is imported (and its extensions built) in a process with no GPU visible: "
                  "module-level code may compile but must not touch the GPU (no CUDA tensors, no torch.cuda "
                  "calls at import; torch.cuda.is_available() is False there, so a build behind it happens "
                  "only when your file runs on the GPU). " if target == "cuda" else "")
    return f"""\
## How your file is judged (the evaluation contract; nothing here is left to guess)
- Your file defines class ModelNew(nn.Module) with the same constructor arguments as Model (they come from
  get_init_inputs()) and the same forward arguments (from get_inputs()), returning the same tensor(s). It
  builds its kernels with torch.utils.cpp_extension.load_inline, best at import time (then the compile
  step builds and checks them); a build in __init__ or on the first forward works too. Every build goes
  through the same cached builder and counts as compile time, never as run time. {gpu_import}
- Weights: Model is built, then every floating-point parameter and buffer is re-drawn from a secret seed
  (each keeps its scale; variances stay positive), so defaults such as BatchNorm's running_mean = 0 and
  running_var = 1, or zero biases, never hold. ModelNew is built with the same arguments and the reference
  weights are loaded into it AFTER __init__: by name when it has every state_dict key of Model with the same
  shape (e.g. self.conv = nn.Conv2d(...), self.bias = nn.Parameter(...); extra keys are fine), otherwise by
  registration order when its floating-point parameters and buffers match Model's one to one, in the order
  they are created, with the same shapes (as in KernelBench, which builds both from the same seed); anything
  else is an error listing both. Anything derived from weights (folded BatchNorm, transposed layouts)
  must be computed in forward (cache it keyed on the tensors' ._version if you like), never in __init__.
- Mode: {_mode(problem)}
- Forward runs under torch.no_grad() for the reference and for you: no autograd support is needed.
- Random numbers: {_random(problem)}
- Inputs: {_trials(problem, random_trials)}. All must pass.
- Numerics: shape, dtype and device must match exactly; NaN and inf must sit in the same places; values
  must satisfy |out - ref| <= atol + rtol * |ref| with {_tolerance(problem)}. TF32 is OFF for the reference,
  the baselines and you (matmuls and convolutions run in true fp32); the harness checks after every call
  that you did not switch it on.
- Policy: {_policy(problem)}
- Not custom kernels: torch.compile, Triton, CUDA graphs. No try/except fallbacks to torch (a build error
  or kernel error your code catches is reported to you first anyway), no in-place changes to the inputs,
  no background threads, no outputs cached across calls.
- Timing: after warm-up, repeated calls {_timing_caches(target)} and inputs rotated; the median
  counts, and some timed outputs are re-checked. You get the speedup over eager PyTorch and over
  torch.compile of the reference, and the % of the roofline's speed-of-light (the reference's FLOPs and
  minimum bytes against this device's peak rate and bandwidth). A speedup above 10x, or a time under the
  roofline, is quarantined and re-timed in a fresh process before it can count.
"""


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def budget_summary(budgets: Budgets) -> str:
    """Every limit of a session, in one line (the system prompt states it; the loop reports what is left)."""
    parts = [f"{budgets.turns} turns (your messages; one without a tool call still uses a turn)",
             f"{budgets.tool_calls} tool calls", f"{budgets.max_tokens:,} tokens (prompt + reply, all turns)"]
    if budgets.max_cost_usd > 0:
        parts.append(f"${budgets.max_cost_usd:.2f} of LLM cost")
    parts.append(f"{_duration(budgets.wall_clock_s)} of wall clock (evaluations included)")
    return ", ".join(parts)


def _tools_and_budget(budgets: Budgets) -> str:
    return f"""\
## Tools and budget
- get_gpu_specs(); compile(source); check_correctness(source); benchmark(source); profile(source);
  submit(source). `source` is always the complete Python file. Several calls in one message run in order.
- An identical source is never evaluated twice: you get the stored verdict back.
- Budget: {budget_summary(budgets)}. Each tool result ends with what is left. When any of it runs out the
  session ends and your fastest candidate that passed benchmark counts, submitted or not; submit(source)
  verifies your final answer and ends the session. A malformed call (bad JSON, an unknown tool, a missing
  source) runs nothing and costs no tool call; problems on our side are retried and never charged to you.
"""


def system_prompt(problem: Problem, target: str, *, specs: DeviceSpecs | None, budgets: Budgets,
                  random_trials: int, strategy: str | None = None) -> str:
    """The system message of a trajectory."""
    if target == "cuda":
        role = ("You are an expert CUDA performance engineer. Replace a PyTorch reference model with ModelNew: "
                "the same outputs, computed faster by your own CUDA kernels.")
    else:
        role = ("You are an expert C++ performance engineer. This session's target is the CPU: replace a PyTorch "
                "reference model with ModelNew: the same outputs, computed faster by your own C++ kernels "
                "(OpenMP allowed).")
    device = ("## The device\n" + gpu_summary(specs)) if specs else (
        "## The device\n(specs not available yet: call get_gpu_specs)")
    sections = [role, contract_text(problem, target, random_trials=random_trials), device,
                "## Playbook\n" + playbook(target), _tools_and_budget(budgets)]
    if strategy:
        sections.append("## Strategy for this session\n" + strategy)
    return "\n\n".join(s.strip() for s in sections) + "\n"


def problem_message(problem: Problem, target: str) -> str:
    """The first user message: the problem, its sizes on this target, and what to do first."""
    title = f"Problem {problem.id}" + (f" (level {problem.level})" if problem.level else "")
    if problem.description:
        title += f": {problem.description}"
    lines = [title, f"Target: {target}. Mode: {problem.mode.value}. Policy: {problem.policy.value}."]
    if target == "cpu" and problem.cpu_sizes:
        sizes = ", ".join(f"{k}={v!r}" for k, v in problem.size_overrides("cpu").items())
        lines.append(f"On the cpu target these module constants are replaced before anything runs (constants "
                     f"derived from them included): {sizes}. Reason about shapes with these values.")
    lines.append("```python\n" + problem.source.rstrip() + "\n```")
    lines.append("Write ModelNew. First restate the shapes and count FLOPs and bytes against the device, name "
                 "the exact rewrites you can use, state your plan; then call the tools.")
    return "\n\n".join(lines)
