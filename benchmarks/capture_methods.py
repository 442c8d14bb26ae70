"""How to capture a user's model as a graph: ``torch.fx.symbolic_trace``, ``torch.export``
(non-strict and strict) and dynamo (``torch.compile`` with a recording backend), measured on the
three example models (``examples/models/``) and, where ``transformers`` is installed, a GPT-2 block.

For each: whether it captures the model, how long it takes (a second capture of the same model,
after the first's imports and warm-up), how many graph nodes, and what the graph gives the region
finder (shapes on every node; ATen operations with their ``pointwise`` tags; the model's own
parameter objects, so a kernel binds to the model's weights). Run on the CPU:

    python -m benchmarks.capture_methods            # writes results/capture_methods.{md,json}

The figures chose ``torch.export`` (non-strict) for ``kernelloop model``: docs/own-models.md.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.sandboxed.roles.loading import load_module
from problems import parse_problem

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("mlp_stack", "conv_stem", "attention_block")


def _examples() -> list[tuple[str, torch.nn.Module, list[Any]]]:
    found = []
    for name in MODELS:
        path = ROOT / "examples" / "models" / f"{name}.py"
        problem = parse_problem(path.read_text(), problem_id=path.name)
        module = load_module(f"kl_capture_{name}", problem.source, str(path))  # each its own module
        for key, value in problem.size_overrides("cpu").items():
            setattr(module, key, tuple(value) if isinstance(value, list) else value)
        torch.manual_seed(0)
        found.append((name, module.Model(*module.get_init_inputs()).eval(), list(module.get_inputs())))
    try:
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    except ImportError:
        return found
    config = GPT2Config(n_embd=256, n_head=4, n_layer=1, n_positions=128)
    config._attn_implementation = "sdpa"  # what from_pretrained would choose

    class Gpt2Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = GPT2Block(config)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(x)[0]

    found.append(("gpt2_block (transformers)", Gpt2Block().eval(), [torch.randn(2, 32, 256)]))
    return found


def _fx(model: torch.nn.Module, inputs: list[Any]) -> dict[str, Any]:
    graph = torch.fx.symbolic_trace(model).graph
    return {"nodes": len(graph.nodes), "shapes": False, "aten": False, "own_parameters": True}


def _export(strict: bool) -> Callable[[torch.nn.Module, list[Any]], dict[str, Any]]:
    def capture(model: torch.nn.Module, inputs: list[Any]) -> dict[str, Any]:
        program = torch.export.export(model, tuple(inputs), strict=strict)
        module = program.module()
        own = {id(p) for p in model.parameters()}
        return {"nodes": len(program.graph.nodes), "shapes": True, "aten": True,
                "own_parameters": all(id(p) in own for p in module.parameters())}

    return capture


def _dynamo(model: torch.nn.Module, inputs: list[Any]) -> dict[str, Any]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(graph_module: torch.fx.GraphModule, example: Any) -> Any:
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    torch.compile(model, backend=backend)(*inputs)
    return {"nodes": sum(len(g.graph.nodes) for g in graphs), "graphs": len(graphs), "shapes": True, "aten": False,
            "own_parameters": False}


METHODS = {"fx.symbolic_trace": _fx, "export (non-strict)": _export(False), "export (strict)": _export(True),
           "dynamo": _dynamo}


def measure() -> list[dict[str, Any]]:
    rows = []
    for name, model, inputs in _examples():
        for method, capture in METHODS.items():
            row: dict[str, Any] = {"model": name, "method": method}
            try:
                with torch.no_grad():
                    capture(model, inputs)  # imports and warm-up
                    started = time.perf_counter()
                    row.update(capture(model, inputs))
                row["seconds"] = time.perf_counter() - started
                row["captured"] = True
            except Exception as exc:  # noqa: BLE001 - the failure is the finding
                row.update(captured=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


def main() -> int:
    rows = measure()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "capture_methods.json").write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    lines = [f"# Capture methods (torch {torch.__version__}, CPU)", "",
             "| model | method | captured | s (2nd capture) | nodes | shapes | ATen + tags | model's own parameters |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['method']} | {'yes' if r['captured'] else 'no: ' + r['error']} | "
                     f"{r.get('seconds', 0):.3f} | {r.get('nodes', '')} | {r.get('shapes', '')} | "
                     f"{r.get('aten', '')} | {r.get('own_parameters', '')} |")
    (RESULTS / "capture_methods.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
