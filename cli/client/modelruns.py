"""A model run's kernels through the API, for ``kernelloop model apply --from RUN``.

``GET /models/{id}`` gives the run's profile (its regions and their instances) and its region
jobs; each job's best attempt (``GET /jobs/{id}/best``) is that region's kernel with its verdict.
A run of another model file is refused (the sha256 of the file must match the run's).
"""

from __future__ import annotations

import hashlib

import typer

from cli.client.http import ApiRequestError, api_failure, open_client
from cli.client.output import CliExit, err
from problems import Problem
from vocabulary.modelreport import KernelChoice
from vocabulary.regionplan import ModelProfile
from vocabulary.verdict import Verdict
from vocabulary.wire import Reader, WireError

__all__ = ["fetch_run_kernels"]


def fetch_run_kernels(run_id: int, model: Problem, *, api: str | None, key: str | None
                      ) -> tuple[ModelProfile, dict[str, KernelChoice]]:
    """The run's profile and each region's best kernel; exits 2 when the run is another model's or
    has no verified kernel, or the API refuses."""
    try:
        with open_client(api, key) as client:
            run = Reader(client.get_model_run(run_id), f"model run {run_id}")
            kernels: dict[str, KernelChoice] = {}
            for item in run.items("regions"):
                region = Reader(item, "a region of the run")
                job_id = region.optional_integer("job_id")
                if job_id is None or not Reader(region.json("job", optional=True) or {}, "its job").has("best"):
                    continue
                best = Reader(client.best_attempt(job_id), f"job {job_id}'s best attempt")
                kernels[region.text("name")] = KernelChoice(best.text("source"),
                                                            Verdict.from_dict(best.object("verdict")))
            profile = ModelProfile.from_dict(run.object("profile"))
            sha = run.text("model_sha256")
    except ApiRequestError as exc:
        raise api_failure(exc) from None
    except WireError as exc:
        err.print(f"[red]error:[/red] the API's model run {run_id} is malformed: {exc}", highlight=False)
        raise typer.Exit(CliExit.USAGE) from None
    if sha != hashlib.sha256(model.source.encode()).hexdigest():
        err.print(f"[red]error:[/red] model run {run_id} optimised another version of {model.id}: its file has "
                  "changed since (apply the run's kernels to the file it profiled)", highlight=False)
        raise typer.Exit(CliExit.USAGE)
    if not kernels:
        err.print(f"[red]error:[/red] no region job of model run {run_id} has a verified kernel yet", highlight=False)
        raise typer.Exit(CliExit.USAGE)
    return profile, kernels
