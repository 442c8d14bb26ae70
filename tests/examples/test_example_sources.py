"""Static checks of the example candidates (no compile, nothing executed: ``ast`` only).

They pin what the tests and the demo rely on: the wrong example shares the good one's build, the
compile-error example never shares a cache entry, the CUDA examples keep the fast-compile split, and
no example touches the GPU at import.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from tests.support.paths import REPO

EXAMPLES = REPO / "examples"
PROBLEMS = REPO / "problems" / "bundled" / "level2"

# example -> the bundled problem it answers
CANDIDATES = {
    "seed1_cpu": "conv_tanh_scale_bias_maxpool",
    "seed1_cpu_wrong": "conv_tanh_scale_bias_maxpool",
    "seed1_cpu_compile_error": "conv_tanh_scale_bias_maxpool",
    "seed2_train_cpu": "conv_bn_scale_train",
    "seed1_cuda": "conv_tanh_scale_bias_maxpool",
    "seed2_train_cuda": "conv_bn_scale_train",
    "seed2_eval_cuda": "conv_bn_scale_eval",
}
CUDA = ("seed1_cuda", "seed2_train_cuda", "seed2_eval_cuda")


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def init_args(tree: ast.Module, class_name: str) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [a.arg for a in item.args.args[1:]]
    raise AssertionError(f"no {class_name}.__init__")


def load_inline_call(tree: ast.Module) -> dict[str, Any]:
    """The keyword arguments of the module-level load_inline call, names resolved to constants."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_inline"
    ]
    assert len(calls) == 1, "one load_inline call expected"
    kwargs: dict[str, Any] = {}
    for kw in calls[0].keywords:
        assert kw.arg is not None, "no **kwargs in the load_inline call"
        value = kw.value
        kwargs[kw.arg] = constants[value.id] if isinstance(value, ast.Name) else ast.literal_eval(value)
    return kwargs


def build_key(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        kwargs.get(k)
        for k in (
            "name",
            "cpp_sources",
            "cuda_sources",
            "functions",
            "extra_cflags",
            "extra_cuda_cflags",
            "extra_ldflags",
            "no_implicit_headers",
        )
    )


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_candidate_matches_its_problems_constructor(name: str) -> None:
    tree = parse(EXAMPLES / f"{name}.py")
    problem = parse(PROBLEMS / f"{CANDIDATES[name]}.py")
    assert init_args(tree, "ModelNew") == init_args(problem, "Model")


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_no_gpu_at_import(name: str) -> None:
    """Module-level statements (outside defs and classes) never mention torch.cuda."""
    tree = parse(EXAMPLES / f"{name}.py")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        assert "torch.cuda" not in ast.unparse(node), ast.unparse(node)


def test_wrong_example_reuses_the_good_build_and_differs_in_python() -> None:
    good, wrong = parse(EXAMPLES / "seed1_cpu.py"), parse(EXAMPLES / "seed1_cpu_wrong.py")
    assert build_key(load_inline_call(good)) == build_key(load_inline_call(wrong))
    assert ast.dump(good) != ast.dump(wrong)


def test_extension_names_are_distinct_except_the_shared_build() -> None:
    names = {n: load_inline_call(parse(EXAMPLES / f"{n}.py"))["name"] for n in CANDIDATES}
    assert names["seed1_cpu"] == names["seed1_cpu_wrong"] == "kl_seed1_cpu"
    assert names["seed2_train_cpu"] == "kl_seed2_cpu"
    others = [v for k, v in names.items() if k != "seed1_cpu_wrong"]
    assert len(set(others)) == len(others)


@pytest.mark.parametrize("name", CUDA)
def test_cuda_examples_keep_the_fast_compile_split(name: str) -> None:
    kwargs = load_inline_call(parse(EXAMPLES / f"{name}.py"))
    assert kwargs["no_implicit_headers"] is True
    cuda_source, cpp_source = str(kwargs["cuda_sources"]), str(kwargs["cpp_sources"])
    assert "__global__" in cuda_source
    includes = [line for line in cuda_source.splitlines() if line.startswith("#include")]
    assert includes and not any("torch" in i or "ATen" in i or "c10" in i for i in includes), includes
    assert "#include <torch/extension.h>" in cpp_source
    assert "--use_fast_math" not in kwargs.get("extra_cuda_cflags", [])
