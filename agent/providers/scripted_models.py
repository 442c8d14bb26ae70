"""The scripted LLM's scripts for the regions of the example models (``examples/models/``).

``kernelloop model extract`` names a region's problem ``<model>/<region>``; for each region of the
three example models (a stack of pre-norm MLP blocks, a convolutional stem, an attention block)
there is a hand-written C++ kernel in ``examples/models/kernels/<model>/<region>.py``, and the script
plays a short session with it on the cpu target: compile, check, time, submit. What the scripted LLM
offers for ``kernelloop model optimize examples/models/<model>.py --llm scripted``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.providers.scripted_candidates import EXAMPLES_DIR

__all__ = ["MODEL_CANDIDATES", "MODEL_KERNELS_DIR", "MODEL_SCRIPT_TURNS", "model_region_ids"]

#: The kernels of the example models' regions: ``<model>/<region>.py``.
MODEL_KERNELS_DIR = EXAMPLES_DIR / "models" / "kernels"
#: (text, tool) of each turn: one call each, all with the region's kernel.
MODEL_SCRIPT_TURNS: tuple[tuple[str, str], ...] = (
    ("Region {region} of {model}: the problem is the model's own operations between two boundaries, with its "
     "parameters. The heavy operation stays with the vendor library where it wins; what follows it is fused in one "
     "C++/OpenMP pass (eval-mode batch norm folds into the convolution, in forward). Compiling the kernel:",
     "compile"),
    ("It builds. Checking it on the referee's trials (fresh weights and inputs):", "check_correctness"),
    ("Correct on every trial. Timing it against eager and torch.compile of the region:", "benchmark"),
    ("Timed. The same kernel serves every instance of the region in the model. Submitting.", "submit"),
)


def model_region_ids() -> tuple[tuple[str, str, Path], ...]:
    """(problem id, target, kernel file) of every example region kernel (a listing; nothing is run)."""
    if not MODEL_KERNELS_DIR.is_dir():
        return ()
    return tuple((f"{path.parent.name}/{path.stem}", "cpu", path)
                 for path in sorted(MODEL_KERNELS_DIR.glob("*/*.py")))


def _reader(path: Path) -> Callable[[Path], str]:
    def read(examples: Path) -> str:
        return (examples / path.relative_to(EXAMPLES_DIR)).read_text()

    return read


#: (problem id, target) → the candidate sources by name (``kernel``), read from ``examples/`` when used.
MODEL_CANDIDATES: dict[tuple[str, str], dict[str, Callable[[Path], str]]] = {
    (problem_id, target): {"kernel": _reader(path)} for problem_id, target, path in model_region_ids()
}
