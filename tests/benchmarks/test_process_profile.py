"""The process view of a run (benchmarks/process_profile.py): samples joined with the process log
and the tests' records, on a small made-up run (``perf`` is not needed to read one)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.process_profile import SAMPLE_S, kind, report

#: Processes: the pytest controller (10), its worker gw0 (11), a reference sandbox under it (12),
#: g++ and its cc1plus (13, 14) under a builder forked by a fork server (15), and a stray process (16).
PROCESSES = [
    (10, 1, "python -m pytest -n 1", "/repo"),
    (11, 10, "python -u -c import sys;exec(eval(sys.stdin.readline()))", "/repo"),
    (12, 11, "python -P -m harness.sandboxed.roles reference 5", "/run"),
    (15, 11, "python -P -m harness.sandboxed.forkserver 7", "/run"),
    (13, 15, "c++ -c main.cpp -o main.o", "/build"),
    (14, 13, "/usr/lib/gcc/cc1plus -quiet -I /pch /build/kl_x-1a/main.cpp -o /tmp/cc.s", "/build"),
    (16, 1, "sleep 5", "/"),
]
#: (command name, pid, time): the first test runs from 100 s, the second from 110 s.
SAMPLES = [("python", 12, 101.0), ("python", 12, 102.0), ("cc1plus", 14, 111.0), ("cc1plus", 14, 112.0),
           ("cc1plus", 14, 113.0), ("swapper", 0, 113.5), ("sleep", 16, 114.0)]


def test_samples_are_counted_by_process_kind_compiler_run_and_test(tmp_path: Path) -> None:
    (tmp_path / "processes.jsonl").write_text("".join(json.dumps(list(p)) + "\n" for p in PROCESSES))
    (tmp_path / "samples.txt").write_text("".join(f"{name} {pid}/{pid} {at:.6f}:\n" for name, pid, at in SAMPLES))
    tests = tmp_path / "prof"
    tests.mkdir()
    (tests / "gw0.jsonl").write_text(json.dumps({"id": "t.py::first", "start": 100.0, "wall": 9.0}) + "\n"
                                     + json.dumps({"id": "t.py::second", "start": 110.0, "wall": 9.0}) + "\n")
    text = report(tmp_path, tests, min_s=0.0)
    assert f"| {3 * SAMPLE_S:.1f} | compiler: cc1plus |" in text
    assert f"| {2 * SAMPLE_S:.1f} | sandbox: reference |" in text
    compile_line = next(line for line in text.splitlines() if "main.cpp" in line)
    assert compile_line.split() == [f"{3 * SAMPLE_S:.1f}", "main.cpp", "t.py::second"]
    assert any(line.endswith("(sandbox: reference 0.1)") and "t.py::first" in line for line in text.splitlines())
    assert "(no test)" in text  # the stray process, which no worker started


def test_kinds_name_what_a_process_is() -> None:
    assert kind("swapper", "") == "idle"
    assert kind("python", "python -P -m harness.sandboxed.roles admission 4") == "sandbox: admission"
    assert kind("python", "/venv/bin/python /venv/bin/kernelloop optimize level1/softmax") == "kernelloop optimize"
    assert kind("python", "python -m mypy") == "mypy"
