"""Profile a user's model in a sandbox: `profile_model` (driver side, standard library only).

The model file is untrusted code, like a problem: it runs only in the ``model`` sandbox
(`harness.sandboxed.roles.model`), confined as a problem's sandboxes are (`harness.problemsandbox`: no cache but
its own compiler cache, the service's data hidden, memory, CPU and process limits). What comes
back is a `vocabulary.regionplan.ModelProfile`, read through `vocabulary.wire.Reader`; what goes wrong
in the model's code is `ModelFailed`, with the model's file and line.
"""

from __future__ import annotations

import re
import secrets

from harness.channel import ChannelClosed, ChannelTimeout
from harness.options import HarnessOptions
from harness.problemsandbox import compiler_cache_dir, compiler_cache_env, limit_message, problem_sandbox_spec
from harness.protocol import StartFailed
from harness.protocol.model import ProfileModelReply, ProfileModelRequest
from harness.sandbox import SandboxProcess
from harness.seeds import derive_seed, new_secret
from harness.toolchain import cuda_unavailable
from problems.spec import Problem
from vocabulary.evaluation import Target
from vocabulary.regionplan import ModelProfile
from vocabulary.wire import WireError

__all__ = ["DEFAULT_PROFILE_CALLS", "ModelFailed", "profile_model"]

#: Model calls the profiler records: enough to average out a cold call, few enough for a big model.
DEFAULT_PROFILE_CALLS = 10


_MODEL_FRAME = re.compile(r'File "(problem:[^"]*)", line (\d+)')


def problem_where(errors: str, what: str) -> str:
    """``what``, with the model file and line of the traceback's last frame in it and the
    exception's last line: "the model's code failed (problem:net.py, line 12): ValueError: …"."""
    frames = _MODEL_FRAME.findall(errors)
    lines = [line for line in errors.strip().splitlines() if line.strip()]
    place = f" ({frames[-1][0].removeprefix('problem:')}, line {frames[-1][1]})" if frames else ""
    return f"{what}{place}: {lines[-1].strip()[:300]}" if lines else what


class ModelFailed(RuntimeError):
    """The model could not be profiled: its own code failed (``problem`` True: the message names
    its file and line; ``details`` is the traceback trimmed to its lines), or ours did."""

    def __init__(self, message: str, details: str = "", *, problem: bool = True) -> None:
        self.details = details
        self.problem = problem
        super().__init__(message)


def profile_timeout_s(options: HarnessOptions, compile_gains: bool) -> float:
    """The model sandbox's time limit: a reference start, plus a baselines' worth for the timing
    (twice with ``torch.compile`` of the model and its regions)."""
    timeouts = options.timeouts
    return timeouts.reference_start_s + timeouts.baselines_s * (2 if compile_gains else 1)


def profile_model(problem: Problem, target: Target | str, options: HarnessOptions | None = None, *,
                  compile_gains: bool = True, profile_calls: int = DEFAULT_PROFILE_CALLS) -> ModelProfile:
    """Capture the model, find its regions, write each as a problem and time them on ``target``.

    Args:
        problem: the model file, parsed as a problem (``Model``, ``get_inputs``, ``get_init_inputs``,
            optionally ``MODE`` and ``CPU_SIZES``).
        target: where it runs and is timed.
        options: the harness options (cache, timing, limits); ``secret_seed`` fixes the weights'
            and inputs' seeds.
        compile_gains: also time ``torch.compile`` of the model and of each region.
        profile_calls: model calls the profiler records.

    Raises:
        ModelFailed: the model's code failed to build or run (its file and line in the message),
            hit a limit, or our sandbox failed (``problem`` False).
    """
    options = options or HarnessOptions()
    target = Target(target)
    if target is Target.CUDA:
        unavailable = cuda_unavailable(gpu=True)
        if unavailable:
            raise ModelFailed(unavailable, problem=False)
    secret = options.secret_seed if options.secret_seed is not None else new_secret()
    workdir = options.runs_dir / f"model-{secrets.token_hex(8)}"
    caches = compiler_cache_dir(options, problem.sha256)
    caches.mkdir(parents=True, exist_ok=True)
    spec = problem_sandbox_spec("model", workdir, options, target, namespaces=("user", "mount", "net", "pid"),
                                writable=(caches,),
                                extra_env=compiler_cache_env(caches))
    request = ProfileModelRequest(problem=problem, target=target, init_seed=derive_seed(secret, "init"),
                                  input_seed=derive_seed(secret, "trial:0"), compile_gains=compile_gains,
                                  profile_calls=max(1, profile_calls), timing=options.timing)
    limit_s = profile_timeout_s(options, compile_gains)
    with SandboxProcess(spec, sandbox=options.sandbox) as process:
        try:
            raw = process.request(request, timeout=limit_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            log = process.log_tail(options.output_limit)
            process.kill()
            limit = limit_message(spec, process.exit_code(1.0), log)
            if isinstance(exc, ChannelTimeout):
                what = f"the model's profile did not finish within its time limit of {limit_s:.0f} s"
            elif not process.sandbox_report.received or process.sandbox_report.exec_error:
                raise ModelFailed(f"the model sandbox failed to start: {exc}", log, problem=False) from None
            else:
                what = f"the process running the model's code {process.describe_exit()}"
            raise ModelFailed(f"{limit}: {what}" if limit else what, log) from None
    try:
        reply = ProfileModelReply.from_reply(raw)
    except WireError as exc:
        raise ModelFailed(f"the model's process sent a malformed reply: {exc}") from None
    if isinstance(reply, StartFailed):
        limit = limit_message(spec, None, reply.errors)
        message = problem_where(reply.errors, "the model's code failed")
        raise ModelFailed(f"{limit}: {message}" if limit else message, reply.errors)
    return reply.profile
