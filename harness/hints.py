"""Static patterns in a candidate's source: advice for the author, never a verdict."""

from __future__ import annotations

import re

__all__ = ["static_hints"]

_PATTERNS: tuple[tuple[str, str, str | None], ...] = (
    (r"\bexcept\b[^\n]*:\s*\n\s*(return|[\w.]+\s*=)\s*(torch|F|self\.)",
     "a try/except falls back to torch: a kernel that fails must fail loudly, not hide behind torch", None),
    (r"torch\.compile\b", "torch.compile inside a candidate is not a custom kernel", None),
    (r"\bimport triton\b|@triton\.jit", "Triton kernels are not custom CUDA kernels under this contract", None),
    (r"CUDAGraph|cuda\.graph\b", "CUDA graphs inside a candidate are not custom kernels", None),
    (r"allow_tf32\s*=\s*True|set_float32_matmul_precision\(\s*['\"](high|medium)",
     "TF32 must stay off: the harness checks it after every call", None),
    (r"load_inline\((?![^)]*no_implicit_headers)[^)]*cuda_sources",
     "compiles are faster with the split: kernels in cuda_sources with CUDA headers only and "
     "no_implicit_headers=True, the torch binding in cpp_sources", "cuda"),
)


def static_hints(source: str, *, target: str) -> list[str]:
    """Hints for the LLM about patterns that usually mean trouble."""
    hints = [text for pattern, text, only in _PATTERNS
             if (only is None or only == target) and re.search(pattern, source, re.DOTALL)]
    if target == "cuda" and "__global__" not in source:
        hints.append("no __global__ function: the candidate defines no CUDA kernel of its own")
    if "load_inline" not in source and "cpp_extension" not in source:
        hints.append("no torch.utils.cpp_extension build: the candidate has no custom kernel")
    return hints
