"""The adversarial suite's referee options and its forged timing loop (tests/harness/integrity, the
GPU suite and benchmarks/forgery_sweep.py): one place, since a test of the suite builds the options
again in a fresh interpreter (``python -c``, to put a canary in its environment)."""

from __future__ import annotations

from pathlib import Path

from harness import HarnessOptions, Timeouts, TimingOptions

#: Quick timing: enough calls for rotation and audits to matter; every one of the first 10 timed
#: calls audited (a cheat on half of them slips through with odds of 2**-10, fewer if the run goes on).
QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=10, max_repeats=40, max_time_s=0.2, input_sets=2, audits=10)
#: Small enough that allocating past it takes a second, large enough for torch and a compile.
MEMORY_LIMIT_MB = 3072


def make_options(cache: Path, **changes: object) -> HarnessOptions:
    base = HarnessOptions(
        cache_dir=cache, secret_seed=20261130, trials=2, compile_baseline=False, timing=QUICK_TIMING,
        timeouts=Timeouts(trial_s=8.0, load_s=60.0, timing_s=60.0, compile_s=400.0),
        memory_limit_mb=MEMORY_LIMIT_MB,
    )
    return base.replace(**changes)


def forged_loop(scale: float, *, hide_tampering: bool = False, spin_between_runs: int = 0,
                device: str = "cpu") -> str:
    """Module code for a candidate that replaces the harness's timing loop, in its own process, by
    one written in Python: it speaks the loop's protocol perfectly (every call's inputs loaded as
    the real loop loads them, audits answered with sealed memfds of the true outputs) and reports
    each call's true time times ``scale``. ``hide_tampering``: the tamper check is replaced too.
    ``spin_between_runs``: that many processes burn the CPU from the end of each run to the start
    of the next (while the referee calibrates the loop again, to widen the allowance). What is left
    to catch it is the trusted clock."""
    return f'''
import sys as _sys
if "harness.sandboxed.meter" in _sys.modules:  # the candidate sandbox, not the compile sandbox
    import fcntl as _fcntl, json as _json, os as _os, socket as _socket, struct as _struct, time as _time
    _meter = _sys.modules["harness.sandboxed.meter"]
    _GO = _struct.Struct("=4sIQQQQII")
    _spinners = []

    def _forged_run(self, channel, fn, sets, *, flush):
        sock = channel._sock
        sock.settimeout(None)

        def read_exact(n):
            data = b""
            while len(data) < n:
                data += sock.recv(n - len(data))
            return data

        def send(payload, fds=()):
            prefix = _struct.pack(">I", len(payload))
            if fds:
                _socket.send_fds(sock, [prefix], list(fds))
                sock.sendall(payload)
            else:
                sock.sendall(prefix + payload)

        device, held, last, calls = torch.device("{device}"), None, 0, 0
        while True:
            (size,) = _struct.unpack(">I", read_exact(4))
            while _spinners:
                _os.kill(_spinners.pop(), 9)
            _, flags, call, seed, forward_seed, nonce, index, _ = _GO.unpack(read_exact(size))
            if flags & 2:
                for _ in range({spin_between_runs!r}):
                    if (pid := _os.fork()) == 0:
                        while True:
                            pass
                    _spinners.append(pid)
                return calls
            if flags & 1:
                data = held.detach().cpu().contiguous().numpy().tobytes()
                fd = _os.memfd_create("audit", _os.MFD_ALLOW_SEALING)
                _os.write(fd, data)
                _fcntl.fcntl(fd, 1033, 15)
                description = _json.dumps({{"single": True, "tensors": [{{
                    "dtype": str(held.dtype).replace("torch.", ""), "shape": list(held.shape),
                    "device": held.device.type}}]}})
                send(_struct.pack("=4sIQQ", b"KLAU", 0, last, len(data)) + description.encode(), (fd,))
                _os.close(fd)
                continue
            inputs = _meter.call_inputs(sets[index], seed, device)
            if flags & 4:
                torch.manual_seed(forward_seed)
            started = _time.perf_counter()
            with torch.no_grad():
                held = fn(*inputs)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            sample = (_time.perf_counter() - started) * 1e3 * {scale!r}
            send(_struct.pack("=4sIQQd", b"KLDN", 0, call, nonce, sample))
            last, calls = call, calls + 1

    _meter.Meter.run = _forged_run
    if {hide_tampering!r}:
        _meter.Meter.tampered = lambda self: []
'''
