"""The conversation's size per turn under a small context window: 30 turns, distinct 1.4 KB sources.

A fake vLLM server (`tests.support.doubles.VLLMServer`, started with ``--max-model-len 16384``, prefix
caching reported) plays a model that sends a new ~1.4 KB candidate every turn; a fake evaluator
judges them (every third one verified, faster each time, so the best moves). The real loop and
the real ``openai`` client talk to it. For every request the server received it records:

- the request's size (bytes of its JSON) and its prompt tokens as the server counted them (the
  client only estimates), and the prompt tokens it served from its prefix cache;
- whether the request is an append-only extension of the previous one (its messages start with
  the previous request's messages, unchanged: what a provider's prompt cache can reuse);
- whether the best verified source and the latest source so far are in it verbatim.

It prints the table and the summary and writes ``results/context_window.{json,md}``. It checks
what the history promises: never over the window (prompt + the reply's reserve), no request
refused, the best and latest sources always present, at least 80 % of turns append-only.

    python -m benchmarks.context_window            # ~10 s; no GPU, no compiles
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent import JobSpec, run_job
from agent.providers.openai_chat import OpenAIProvider
from config.settings import LLMProfile
from problems import load_problem
from tests.support.doubles import Call, FakeCandidate, FakeEvaluator, MemoryRecorder, Reply, VLLMServer
from vocabulary.budgets import Budgets

RESULTS = Path(__file__).resolve().parent / "results"
PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
TURNS = 30
WINDOW = 16_384
#: The reply's reserve: a 16k local model is run with a few thousand output tokens.
MAX_OUTPUT = 2048
SOURCE_BYTES = 1400
#: The share of turns that must extend the previous request unchanged.
APPEND_ONLY_TARGET = 0.80


def source(i: int) -> str:
    """A distinct, plausible candidate of about ``SOURCE_BYTES`` bytes."""
    head = ("import torch\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"CPP = r'''\n#include <torch/extension.h>\n// variant {i}: unroll {i % 4 + 1}, tile {8 << (i % 3)}\n")
    body = "".join(f"static inline float f{i}_{k}(float x) {{ return x * {k + 1}.0f + {i}.0f; }}\n" for k in range(14))
    tail = ("torch::Tensor run(torch::Tensor x) { return x.tanh_(); }\n'''\n"
            f"ext = load_inline(name='kl_ctx_{i}', cpp_sources=CPP, functions=['run'])\n\n"
            "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return ext.run(x)\n")
    text = head + body + tail
    return text + "#" * max(0, SOURCE_BYTES - len(text) - 1) + "\n"


def _contains(messages: list[dict[str, Any]], text: str) -> bool:
    for message in messages:
        if text in (message.get("content") or ""):
            return True
        for call in message.get("tool_calls") or ():
            try:
                if json.loads(call["function"]["arguments"]).get("source") == text:
                    return True
            except (ValueError, AttributeError):
                continue
    return False


def run() -> dict[str, Any]:
    sources = [source(i) for i in range(TURNS)]
    # every third candidate is verified, each faster than the last; the rest fail correctness
    table = {s: FakeCandidate(median_ms=10.0 - i * 0.25) if i % 3 == 0 else FakeCandidate("wrong")
             for i, s in enumerate(sources)}
    script = [Reply(content=f"Variant {i}: unroll by {i % 4 + 1}, tile {8 << (i % 3)}; benchmark it.",
                    calls=(Call("benchmark", {"source": s}),)) for i, s in enumerate(sources)]
    best_after: list[str | None] = []
    best: str | None = None
    for i, s in enumerate(sources):
        if i % 3 == 0:
            best = s
        best_after.append(best)
    with VLLMServer(script, context_window=WINDOW) as server:
        profile = LLMProfile(base_url=server.base_url, model=server.model, api_key_env=None,
                             context_window=WINDOW, max_output_tokens=MAX_OUTPUT)
        spec = JobSpec(problem=load_problem(PROBLEM), target="cpu", llm=profile,
                       budgets=Budgets(turns=TURNS, tool_calls=TURNS, max_tokens=10_000_000, max_cost_usd=0,
                                       wall_clock_s=3600.0))
        started = time.perf_counter()
        result = run_job(spec, evaluator=FakeEvaluator(table), recorder=MemoryRecorder(),
                         provider=OpenAIProvider.from_profile(profile))
        elapsed = time.perf_counter() - started
        exchanges = list(server.exchanges)
    rows = []
    previous: list[dict[str, Any]] | None = None
    for turn, exchange in enumerate(exchanges, start=1):
        messages = exchange.body["messages"]
        latest = sources[turn - 2] if turn >= 2 else None
        best = best_after[turn - 2] if turn >= 2 else None
        rows.append({
            "turn": turn, "status": exchange.status, "request_bytes": len(json.dumps(exchange.body)),
            "prompt_tokens": exchange.prompt_tokens, "cached_tokens": exchange.cached_tokens,
            "messages": len(messages),
            "append_only": previous is not None and messages[:len(previous)] == previous,
            "best_present": best is None or _contains(messages, best),
            "latest_present": latest is None or _contains(messages, latest),
        })
        previous = messages
    later = rows[1:]
    summary = {
        "turns": len(rows), "window": WINDOW, "max_output_tokens": MAX_OUTPUT,
        "max_prompt_tokens": max(r["prompt_tokens"] for r in rows),
        "never_over_window": all(r["prompt_tokens"] + MAX_OUTPUT <= WINDOW and r["status"] == 200 for r in rows),
        "best_and_latest_always_present": all(r["best_present"] and r["latest_present"] for r in rows),
        "append_only_share": sum(r["append_only"] for r in later) / len(later),
        "cached_share_of_prompt_tokens": sum(r["cached_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows),
        "compactions": sum(not r["append_only"] for r in later),
        "stop_reason": result.reason.value, "elapsed_s": round(elapsed, 2),
    }
    return {"rows": rows, "summary": summary}


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [f"# Context window: {s['turns']} turns, distinct {SOURCE_BYTES} B sources, {WINDOW}-token window",
             "", f"Reply reserve {MAX_OUTPUT} tokens; server-counted tokens (fake vLLM, prefix caching on).", "",
             "| turn | request KB | prompt tokens | cached tokens | messages | append-only | best present | "
             "latest present |", "| ---: | ---: | ---: | ---: | ---: | :---: | :---: | :---: |"]
    for r in report["rows"]:
        lines.append(f"| {r['turn']} | {r['request_bytes'] / 1024:.1f} | {r['prompt_tokens']} | {r['cached_tokens']} | "
                     f"{r['messages']} | {'yes' if r['append_only'] else 'no'} | "
                     f"{'yes' if r['best_present'] else 'NO'} | {'yes' if r['latest_present'] else 'NO'} |")
    lines += ["", f"- largest prompt: {s['max_prompt_tokens']} tokens (+ {MAX_OUTPUT} reserved) of {WINDOW}: "
              f"{'never over the window' if s['never_over_window'] else 'OVER THE WINDOW'}",
              f"- best and latest sources always present: {s['best_and_latest_always_present']}",
              f"- append-only turns: {s['append_only_share']:.0%} (target >= {APPEND_ONLY_TARGET:.0%}); "
              f"compactions: {s['compactions']}",
              f"- prompt tokens served from the prefix cache: {s['cached_share_of_prompt_tokens']:.0%}",
              f"- the job stopped: {s['stop_reason']} ({s['elapsed_s']} s)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only; do not write results/")
    args = parser.parse_args(argv)
    report = run()
    text = markdown(report)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "context_window.json").write_text(json.dumps(report, indent=1) + "\n")
        (RESULTS / "context_window.md").write_text(text)
    s = report["summary"]
    ok = (s["never_over_window"] and s["best_and_latest_always_present"]
          and s["append_only_share"] >= APPEND_ONLY_TARGET)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
