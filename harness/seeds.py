"""Seeds derived from a job's secret, and the plan of correctness trials. Stdlib only.

The trusted side knows the secret; a candidate process receives only the derived seeds it
needs to rebuild the weights and regenerate each trial's inputs.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vocabulary.wire import JsonObject, JsonValue, Reader

__all__ = ["TrialSpec", "derive_seed", "new_secret", "plan_trials", "secret_identity"]


def new_secret() -> int:
    return secrets.randbits(62)


def derive_seed(secret: int, purpose: str) -> int:
    """A 63-bit seed for one purpose ("weights", "trial:3"), unguessable without the secret."""
    digest = hashlib.sha256(f"{secret}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def secret_identity(secret: int) -> str:
    """Names a secret in provenance without revealing it."""
    return hashlib.sha256(f"kernelloop-secret:{secret}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrialSpec:
    """One correctness trial: which seed, which input distribution, which sizes."""

    index: int
    seed: int
    kind: str = "random"
    #: The problem's size constants this trial sets (``EXTRA_SHAPES``), as they travel: JSON.
    overrides: Mapping[str, JsonValue] = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        return {"index": self.index, "seed": self.seed, "kind": self.kind, "overrides": dict(self.overrides)}

    @classmethod
    def from_dict(cls, data: object) -> TrialSpec:
        r = Reader(data, "a trial's plan")
        overrides = r.object("overrides")
        return cls(index=r.integer("index"), seed=r.integer("seed"), kind=r.text("kind"), overrides=overrides)


def plan_trials(secret: int, *, trials: int, input_variants: bool,
                extra_shapes: Sequence[Mapping[str, JsonValue]]) -> list[TrialSpec]:
    """Random trials, then a value-distribution variant, then one per extra shape."""
    plan = [TrialSpec(i, derive_seed(secret, f"trial:{i}")) for i in range(trials)]
    if input_variants:
        i = len(plan)
        plan.append(TrialSpec(i, derive_seed(secret, f"trial:{i}"), kind="variant"))
    for k, shape in enumerate(extra_shapes):
        i = len(plan)
        plan.append(TrialSpec(i, derive_seed(secret, f"trial:{i}"), kind=f"shape:{k}", overrides=dict(shape)))
    return plan
