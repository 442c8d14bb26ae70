"""The ``scripted`` provider: a deterministic script of assistant turns, no network.

For tests, CI and the offline demo. Scripts exist for the bundled seed problems on both targets;
each walks the playbook as a model would (shapes, FLOPs and bytes, the device, the exact rewrite,
a first draft that does not compile, a wrong kernel, a slow correct one, the fast one, a profile,
submit). Candidate sources come from ``examples/`` (see `agent.providers.scripted_candidates`).

A provider instance can serve several trajectories at once: it finds its place in a history from
the ids of its own earlier tool calls (``scripted-<turn>-<call>``), not from state of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.providers.base import (
    AssistantTurn,
    ProviderError,
    ToolCall,
    Usage,
    estimate_tokens,
    message_calls,
    parse_arguments,
)
from agent.providers.scripted_candidates import CANDIDATES, EXAMPLES_DIR, LEVEL1_DEMOS, Level1Demo
from agent.providers.scripted_models import MODEL_CANDIDATES, MODEL_SCRIPT_TURNS
from vocabulary.wire import JsonValue

__all__ = [
    "NoScript",
    "ScriptedCall",
    "ScriptedProvider",
    "ScriptedTurn",
    "has_script",
    "no_script_message",
    "script_for",
    "scripted_problems",
]

_ID = re.compile(r"^scripted-(\d+)-\d+$")


class NoScript(LookupError):
    """There is no script for this problem and target."""

    def __init__(self, problem_id: str, target: str) -> None:
        self.problem_id, self.target = problem_id, target
        super().__init__(no_script_message(problem_id, target))


def no_script_message(problem_id: str, target: str) -> str:
    """Why the scripted LLM cannot run ``problem_id`` on ``target``, naming the problems it can."""
    targets: dict[str, list[str]] = {}
    for known, on in sorted(SCRIPTS):
        targets.setdefault(known, []).append(on)
    both = [p for p, on in targets.items() if len(on) > 1]
    one = [f"{p} ({on[0]} only)" for p, on in targets.items() if len(on) == 1]
    return (f"the scripted LLM has no script for {problem_id} on {target}; it has scripts for "
            f"{', '.join([*both, *one])} (on cpu and cuda); use another --llm for other problems")


@dataclass(frozen=True)
class ScriptedCall:
    """A tool call: ``candidate`` names a source of the script; ``raw_arguments`` overrides all."""

    tool: str
    candidate: str | None = None
    raw_arguments: str | None = None


@dataclass(frozen=True)
class ScriptedTurn:
    content: str
    calls: tuple[ScriptedCall, ...] = ()


def _seed1_turns(target: str) -> tuple[ScriptedTurn, ...]:
    if target == "cuda":
        shapes = ("x is [128, 8, 256, 256]. The 3x3 convolution without padding gives [128, 64, 254, 254]; "
                  "MaxPool2d(4) has stride 4 and floors, so the output is [128, 64, 63, 63] (rows and columns "
                  "252-253 are dropped). The extra-shape trial (batch 3, 37 x 41) gives 35 x 39 and then 8 x 9, "
                  "so every size must come from the tensors.")
        work = ("Work: the convolution is 2 * 128 * 64 * 254 * 254 * 8 * 9 = 76 GFLOP. Bytes: x 268 MB, the "
                "conv output 2.11 GB, the final output 130 MB. Eager writes the 2.11 GB intermediate and then "
                "reads and writes it once per elementwise op (tanh, *2, +bias) and reads it again for the "
                "pool: about 17 GB of traffic besides the convolution.")
        device = ("About 4 TB/s and 67 TFLOP/s fp32 (TF32 off): the ridge point is ~16 FLOP/byte. The "
                  "convolution (72 MACs per output, 2.1 GB written) is worth leaving to cuDNN; everything after it "
                  "is memory-bound, ~4 ms of traffic in eager, ~0.55 ms if read once and written once.")
        fix = "cuda.cu(17): `scaling` is undeclared; the parameter is `scale`."
        slow_note = "the float64 convolution dominates"
        profile_note = ("cuDNN's convolution is most of the time; my kernel reads the 2.1 GB once and is close to "
                        "bandwidth. Writing my own convolution would not beat cuDNN at fp32 here.")
    else:
        shapes = ("On the cpu target CPU_SIZES apply: x is [8, 8, 64, 64]. The 3x3 convolution without padding gives "
                  "[8, 16, 62, 62]; MaxPool2d(4) has stride 4 and floors, so the output is [8, 16, 15, 15] (rows and "
                  "columns 60-61 are dropped). The extra-shape trial (batch 3, 37 x 41) gives 35 x 39 and then "
                  "8 x 9, so every size must come from the tensors.")
        work = ("Work: the convolution is 2 * 8 * 16 * 62 * 62 * 8 * 9 = 70.9 MFLOP. Bytes: x 1 MiB, the conv "
                "output 1.9 MiB, the output 113 KiB. Everything fits in the last-level cache; eager pays a dispatch "
                "and a pass over the 1.9 MiB intermediate for each of tanh, *2, +bias and the pool.")
        device = ("The roofline says this is tiny either way; the wins are fewer passes and fewer dispatches. "
                  "oneDNN's convolution stays in torch (the policy is mixed).")
        fix = "main.cpp:20: `outt` is a typo for `out`."
        slow_note = "7,936 row-by-row float64 convolutions (one per sample, channel and output row) dominate"
        profile_note = ("oneDNN's convolution dominates; my fused pass is a small share. Beating oneDNN at this "
                        "size is not worth it.")
    return (
        ScriptedTurn(
            "Restating the problem: conv2d(8 -> 64 in the seed, 3x3) -> tanh -> * scaling_factor -> + bias[C,1,1] "
            f"-> MaxPool2d(4). {shapes}\n{work}\nThe problem runs in train mode, but it has no BatchNorm or "
            "dropout, so the mode changes nothing here. Let me check the device.",
            (ScriptedCall("get_gpu_specs"),)),
        ScriptedTurn(
            f"{device}\nExact rewrite: tanh is increasing, multiplying by a positive scale is increasing and "
            "+bias[c] is constant over a pooling window, so max(2 * tanh(v) + b) = 2 * tanh(max(v)) + b: pool "
            "first and evaluate tanh 16x less often. The scale is a constructor argument, so for a negative "
            "scale the map decreases and the max becomes a min. Plan: the convolution through torch, then one "
            "pass of my own that reads each 4x4 window once, takes its max and writes tanh(m) * scale + b. "
            "First draft:",
            (ScriptedCall("compile", "draft"),)),
        ScriptedTurn(
            f"The build failed: {fix} Fixed; I also call F.conv2d directly now instead of the module. Checking "
            "correctness:",
            (ScriptedCall("check_correctness", "wrong"),)),
        ScriptedTurn(
            "Every trial fails on almost every element, by up to ~0.4: a systematic error, not an edge. The pooling "
            "math is right, so the input to the kernel is wrong: F.conv2d(x, self.conv.weight) drops the "
            "convolution's own bias (nn.Conv2d has bias=True; it is separate from the model's extra `bias`). To "
            "separate concerns I first make a conservative version correct, then speed it up: check it and time it.",
            (ScriptedCall("check_correctness", "slow"), ScriptedCall("benchmark", "slow"))),
        ScriptedTurn(
            f"Correct on every trial, but slow: {slow_note}. The fused pass is fine; the convolution must "
            "be one fp32 call with its bias. Benchmark the fast version:",
            (ScriptedCall("benchmark", "fast"),)),
        ScriptedTurn("Much faster than the first version. Where does the time go now?",
                     (ScriptedCall("profile", "fast"),)),
        ScriptedTurn(
            f"{profile_note} The epilogue is one read of the conv output and one tanh per pooled value, which is "
            "what the rewrite allows. Submitting.",
            (ScriptedCall("submit", "fast"),)),
    )


def _seed2_turns(target: str, mode: str) -> tuple[ScriptedTurn, ...]:
    if target == "cuda":
        shapes = ("x is [128, 8, 128, 128]; the 3x3 convolution gives [128, 64, 126, 126] (520 MB in fp32); "
                  "BatchNorm2d and the scale keep that shape.")
        work = ("The convolution is 2 * 128 * 64 * 126 * 126 * 72 = 18.7 GFLOP, 67 MB in and 520 MB out. "
                "Eager then reads the 520 MB for the statistics, reads and writes it to normalise, and reads and "
                "writes it again for the scale.")
        fix = "cuda.cu(17): `totl` should be `total`."
    else:
        shapes = ("On the cpu target x is [16, 8, 64, 64]; the 3x3 convolution gives [16, 32, 62, 62] (7.5 MiB); "
                  "BatchNorm2d and the scale keep that shape.")
        work = ("The convolution is 2 * 16 * 32 * 62 * 62 * 72 = 283 MFLOP; the 7.5 MiB output fits in the "
                "last-level cache, so the cost after it is passes and dispatches: statistics, normalise, scale.")
        fix = "main.cpp:24: `outt` is a typo for `out`."
    if mode == "train":
        mode_text = ("The contract says TRAIN mode: BatchNorm normalises with this batch's mean and biased "
                     "variance over (N, H, W) per channel, and updates the running statistics. Folding the running "
                     "statistics into the weights would be wrong here; the batch statistics need a reduction "
                     "first, then one per-channel affine y * a[c] + b[c] with a = gamma * invstd * scale, "
                     "b = (beta - mean * gamma * invstd) * scale.")
        inverted = "train mode got the running statistics"
        fast_note = ("one statistics pass (double accumulators) and one fused affine pass over the conv output, "
                     "instead of eager's separate normalise and scale passes")
    else:
        mode_text = ("The contract says EVAL mode: BatchNorm uses the running statistics, so BatchNorm and the "
                     "scale are one per-channel affine, and it folds into the convolution's weight and bias. The "
                     "weights are loaded after __init__, so the folding happens in forward.")
        inverted = "eval mode got the batch statistics"
        fast_note = "the folded weights: one convolution and no pass over its output at all"
    return (
        ScriptedTurn(
            f"Restating the problem: conv2d(3x3) -> BatchNorm2d -> * scaling_factor. {shapes}\n{work}\n{mode_text} "
            "Let me check the device.",
            (ScriptedCall("get_gpu_specs"),)),
        ScriptedTurn(
            "The convolution stays with the vendor library (policy mixed); the BatchNorm and the scale are "
            "memory-bound and become my own passes. First draft:",
            (ScriptedCall("compile", "draft"),)),
        ScriptedTurn(
            f"The build failed: {fix} I rewrote the extension around two entry points (batch statistics for "
            "train mode, running statistics for eval) and switch on self.bn.training. Checking correctness:",
            (ScriptedCall("check_correctness", "wrong"),)),
        ScriptedTurn(
            "Every trial fails on most elements: systematic. The output depends on which statistics are used, and "
            f"my switch is inverted: {inverted}. Fixed. To separate concerns I check and time a conservative "
            "version first.",
            (ScriptedCall("check_correctness", "slow"), ScriptedCall("benchmark", "slow"))),
        ScriptedTurn(f"Correct. Now the fast version: {fast_note}.", (ScriptedCall("benchmark", "fast"),)),
        ScriptedTurn("Where does the time go now?", (ScriptedCall("profile", "fast"),)),
        ScriptedTurn("The convolution is the bulk of what remains; my kernels are a small share. Submitting.",
                     (ScriptedCall("submit", "fast"),)),
    )


#: What each level-1 demo says of its problem before the device check: the work and the plan
#: (per target, the example's own docstring adds how its kernel does it).
_LEVEL1_RESTATED: dict[str, str] = {
    "argmax": "torch.argmax over dim 1 of [128, 1024, 1024] (cpu: [32, 256, 192]); int64 indices, first index on "
              "ties. One read of 512 MB on CUDA, memory-bound, nothing to compute.",
    "avg_pool2d": "AvgPool2d(3, stride 2, padding 1) on [16, 64, 256, 256] (cpu: [8, 32, 64, 64]), defaults "
                  "count_include_pad=True and ceil_mode=False: the divisor is always 9. Memory-bound.",
    "bmm": "torch.bmm of [128, 256, 512] by [128, 512, 384] (cpu: [8, 128, 256] by [8, 256, 384]): 12.9 GFLOP in "
           "fp32 with TF32 off, compute-bound; the vendor GEMM is the bar.",
    "conv2d": "Conv2d(32 -> 64, 3x3, padding 1) on [32, 32, 128, 128] (cpu: 16 -> 32 channels on [8, 16, 64, 64]), "
              "with bias: 2 * 32 * 64 * 128 * 128 * 288 = 19.3 GFLOP in fp32.",
    "depthwise_conv2d": "Depthwise Conv2d(128 channels, 5x5, groups=128, padding 2) on [16, 128, 128, 128] "
                        "(cpu: [8, 16, 64, 64]): 25 MACs per output, memory-bound.",
    "gelu_tanh": "GPT-2's tanh GELU written as five torch ops on [4096, 8192] (cpu: [512, 1024]): eager makes five "
                 "passes over 128 MB; one elementwise pass does it all.",
    "layer_norm": "LayerNorm(1024, eps 1e-5) over the last dimension of [64, 1024, 1024] (cpu: [48, 128, 1024]), "
                  "affine weights away from 1/0; biased variance. Two reads of each row, memory-bound.",
    "matmul": "A @ B with [2048, 4096] by [4096, 2048] (cpu: [512, 512] by [512, 384]): 34 GFLOP in fp32 with TF32 "
              "off, compute-bound; cuBLAS/oneDNN is the bar.",
    "matmul_bf16": "A @ B in bfloat16, [4096, 4096] squared (cpu: [1024, 1024] by [1024, 512]); fp32 accumulation, the "
                   "output rounded to bf16 once; tolerance 1e-2.",
    "max_pool2d": "MaxPool2d(3, stride 2, padding 1) on [16, 64, 256, 256] (cpu: [8, 16, 64, 64]); padded "
                  "positions are -inf and never win. Memory-bound.",
    "max_reduction": "torch.max(x, dim=2).values of [128, 1024, 1024] (cpu: [48, 256, 256]): a row reduction over "
                     "the contiguous dimension, one read of 512 MB.",
    "softmax": "softmax over the last dimension of [16384, 4096] (cpu: [1024, 4096]); probabilities ~1/dim, so the "
               "problem sets atol 1e-6. Stable form: subtract the row max.",
    "sum_reduction": "torch.sum over dim 1 of [128, 1024, 1024] (cpu: [128, 256, 256]), the dimension dropped: a "
                     "strided reduction, one read of 512 MB.",
}


def _level1_turns(demo: Level1Demo, target: str) -> tuple[ScriptedTurn, ...]:
    """The short script every level-1 demo shares: restate, device, a cheap draft (a one-call edit
    of the kernel, sharing its build), the fix or the fast path, benchmark, submit."""
    where = "C++ with OpenMP through load_inline(cpp_sources=...)" if target == "cpu" else (
        "a CUDA kernel with a C-style launcher (cuda_sources, no torch headers) and a thin torch binding")
    if demo.draft == "wrong":
        draft_turn = ScriptedTurn(
            f"Plan: {where}, every size taken from the tensors. First version; checking correctness:",
            (ScriptedCall("check_correctness", demo.draft),))
        after = (f"The trials fail, and the pattern says why: {demo.draft_note}. Fixed in forward (the kernel "
                 "itself is unchanged, so it reuses the build). Timing it:")
    else:
        draft_turn = ScriptedTurn(
            f"Plan: {where}, every size taken from the tensors. First a straightforward version ({demo.draft_note}): "
            "check it, then time it.",
            (ScriptedCall("check_correctness", demo.draft), ScriptedCall("benchmark", demo.draft)))
        after = "Correct. The same kernel's fast path (same build) should beat that; timing it:"
    return (
        ScriptedTurn(f"Restating the problem: {_LEVEL1_RESTATED[demo.name]} Let me check the device.",
                     (ScriptedCall("get_gpu_specs"),)),
        draft_turn,
        ScriptedTurn(after, (ScriptedCall("benchmark", "fast"),)),
        ScriptedTurn("Correct on every trial and timed; the verdict has the speedups against eager and "
                     "torch.compile. Submitting.", (ScriptedCall("submit", "fast"),)),
    )


def _model_region_turns(problem_id: str) -> tuple[ScriptedTurn, ...]:
    """A region of an example model (`agent.providers.scripted_models`): compile, check, time, submit."""
    model, _, region = problem_id.partition("/")
    return tuple(ScriptedTurn(text.format(model=f"{model}.py", region=region), (ScriptedCall(tool, "kernel"),))
                 for text, tool in MODEL_SCRIPT_TURNS)


#: (problem id, target) -> turns.
SCRIPTS: dict[tuple[str, str], tuple[ScriptedTurn, ...]] = {
    ("level2/conv_tanh_scale_bias_maxpool", "cpu"): _seed1_turns("cpu"),
    ("level2/conv_tanh_scale_bias_maxpool", "cuda"): _seed1_turns("cuda"),
    ("level2/conv_bn_scale_train", "cpu"): _seed2_turns("cpu", "train"),
    ("level2/conv_bn_scale_train", "cuda"): _seed2_turns("cuda", "train"),
    ("level2/conv_bn_scale_eval", "cpu"): _seed2_turns("cpu", "eval"),
    ("level2/conv_bn_scale_eval", "cuda"): _seed2_turns("cuda", "eval"),
    **{(demo.problem_id, target): _level1_turns(demo, target) for demo in LEVEL1_DEMOS for target in ("cpu", "cuda")},
    **{key: _model_region_turns(key[0]) for key in MODEL_CANDIDATES},
}


def scripted_problems() -> tuple[tuple[str, str], ...]:
    """The (problem id, target) pairs with a script."""
    return tuple(sorted(SCRIPTS))


def has_script(problem_id: str, target: str) -> bool:
    """Whether the scripted LLM can run this problem on this target (a name lookup, nothing run)."""
    return (problem_id, target) in SCRIPTS


def script_for(problem_id: str, target: str, *,
               examples_dir: Path = EXAMPLES_DIR) -> tuple[tuple[ScriptedTurn, ...], dict[str, str]]:
    """A script's turns and its candidate sources (read from ``examples_dir`` now)."""
    key = (problem_id, target)
    if key not in SCRIPTS:
        raise NoScript(problem_id, target)
    builders = CANDIDATES[key] if key in CANDIDATES else MODEL_CANDIDATES[key]
    sources = {name: build(examples_dir) for name, build in builders.items()}
    return SCRIPTS[key], sources


class ScriptedProvider:
    """Answers with scripted turns, in order, whatever the history says.

    Args:
        turns: the script.
        sources: candidate sources by the names the script's calls use.
    """

    def __init__(self, turns: Sequence[ScriptedTurn], sources: Mapping[str, str] | None = None) -> None:
        self.turns = tuple(turns)
        self.sources = dict(sources or {})
        for turn in self.turns:
            for call in turn.calls:
                if call.candidate is not None and call.candidate not in self.sources:
                    raise ValueError(f"the script uses candidate {call.candidate!r}, which it was not given")

    @classmethod
    def for_problem(cls, problem_id: str, target: str, *, examples_dir: Path = EXAMPLES_DIR) -> ScriptedProvider:
        turns, sources = script_for(problem_id, target, examples_dir=examples_dir)
        return cls(turns, sources)

    def source(self, candidate: str) -> str:
        return self.sources[candidate]

    @staticmethod
    def position(messages: Sequence[Mapping[str, JsonValue]]) -> int:
        """How many scripted turns this history already holds."""
        position = 0
        for message in messages:
            if message.get("role") != "assistant":
                continue
            ids = [_ID.match(str(c.get("id", ""))) for c in message_calls(message)]
            found = [int(m.group(1)) for m in ids if m]
            position = max(found) + 1 if found else position + 1
        return position

    def _call(self, turn_index: int, k: int, call: ScriptedCall) -> ToolCall:
        if call.raw_arguments is not None:
            raw = call.raw_arguments
        else:
            raw = json.dumps({"source": self.sources[call.candidate]} if call.candidate else {})
        arguments, error = parse_arguments(raw)
        return ToolCall(id=f"scripted-{turn_index}-{k}", name=call.tool, raw_arguments=raw, arguments=arguments,
                        error=error)

    def complete(self, messages: Sequence[Mapping[str, JsonValue]], tools: Sequence[Mapping[str, JsonValue]], *,
                 temperature: float, text_tools: bool = False,
                 should_stop: Callable[[], bool] | None = None) -> AssistantTurn:
        index = self.position(messages)
        if index >= len(self.turns):
            raise ProviderError(f"the script has no turn {index + 1} (it has {len(self.turns)})")
        scripted = self.turns[index]
        calls = tuple(self._call(index, k, c) for k, c in enumerate(scripted.calls))
        turn = AssistantTurn(content=scripted.content, tool_calls=calls,
                             finish_reason="tool_calls" if calls else "stop")
        usage = Usage(tokens_in=estimate_tokens(messages), tokens_out=estimate_tokens([turn.to_message()]))
        return AssistantTurn(content=turn.content, tool_calls=calls, usage=usage, latency_ms=0.0,
                             finish_reason=turn.finish_reason)
