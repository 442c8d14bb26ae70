from pathlib import Path

import pytest

from harness.buildcache import BuildCache, BuildError, parse_ptxas, trim_compiler_errors
from harness.buildcache.records import BuildAnswer
from harness.protocol.build import Delegation
from vocabulary.builds import BuildFailure, BuildPhase

GCC_LOG = """[1/2] c++ -MMD -MF main.o.d -c /root/.cache/kernelloop/builds/ext-abc/main.cpp -o main.o
FAILED: main.o
/root/.cache/kernelloop/builds/ext-abc/main.cpp: In function 'at::Tensor f(at::Tensor)':
/root/.cache/kernelloop/builds/ext-abc/main.cpp:20:15: error: 'outt' was not declared in this scope
   20 |   float* op = outt.data_ptr<float>();
      |               ^~~~
/root/.cache/kernelloop/builds/ext-abc/main.cpp:31:3: error: expected ';' before '}' token
ninja: build stopped: subcommand failed.
"""

NVCC_LOG = """/tmp/b/cuda.cu(42): error: identifier "blockDimx" is undefined
      int i = blockIdx.x * blockDimx + threadIdx.x;
                           ^
1 error detected in the compilation of "/tmp/b/cuda.cu".
"""

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z12fused_kernelPKfPfi' for 'sm_90a'
ptxas info    : Function properties for _Z12fused_kernelPKfPfi
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]
"""


def test_gcc_errors_are_trimmed_to_file_line_with_context() -> None:
    text = trim_compiler_errors(GCC_LOG)
    lines = text.splitlines()
    assert lines[0].startswith("main.cpp:20:15: error: 'outt' was not declared")
    assert "outt.data_ptr" in lines[1]
    assert any(line.startswith("main.cpp:31:3: error") for line in lines)
    assert "/root/.cache" not in text


def test_nvcc_errors_keep_file_and_line() -> None:
    text = trim_compiler_errors(NVCC_LOG)
    assert text.startswith('cuda.cu(42): error: identifier "blockDimx" is undefined')


def test_error_count_is_capped() -> None:
    log = "\n".join(f"main.cpp:{i}:1: error: bad {i}" for i in range(1, 30))
    text = trim_compiler_errors(log, max_errors=3)
    assert text.count("error: bad") == 3 and "[... 26 more errors]" in text


def test_link_failures_without_file_line_keep_the_tail() -> None:
    text = trim_compiler_errors("a\nb\n/usr/bin/ld: cannot find -lfoo\ncollect2: error: ld returned 1 exit status")
    assert "cannot find -lfoo" in text


def test_ptxas_registers_smem_and_spills_per_kernel() -> None:
    (kernel,) = parse_ptxas(PTXAS_LOG)
    assert kernel.to_dict() == {"kernel": "_Z12fused_kernelPKfPfi", "arch": "sm_90a", "registers": 40,
                                "smem_bytes": 4096, "stack_bytes": 8, "spill_stores": 4, "spill_loads": 4}


def test_the_candidate_sandbox_asks_the_trusted_side_for_a_build_it_lacks_saying_where(tmp_path: Path) -> None:
    """A lazy build: the candidate sandbox (``load`` mode) cannot build, so it asks over its channel
    (here a fake), with where the candidate is; a failure it is answered with is a `BuildError` the
    candidate may catch, recorded with its trimmed errors. None may start while timing."""
    asked: list[Delegation] = []

    def delegate(build: Delegation) -> BuildAnswer:
        asked.append(build)
        return BuildAnswer(ok=False, log="[1/2] c++ ...\nmain.cpp:1:9: error: 'g' was not declared in this scope\n")

    cache = BuildCache(tmp_path, mode="load", delegate=delegate)
    with pytest.raises(RuntimeError, match="while being timed or profiled"):
        cache.load_inline("kl_lazy", "int f() { return g; }", functions=["f"])
    assert asked == [] and cache.errors == []
    cache.phase = BuildPhase.FORWARD
    with pytest.raises(BuildError, match=r"main\.cpp:1:9: error: 'g' was not declared") as failed:
        cache.load_inline("kl_lazy", "int f() { return g; }", functions=["f"], extra_cflags=["-O1"])
    (build,) = asked
    assert (build.name, build.phase, build.refusal) == ("kl_lazy", BuildPhase.FORWARD, None)
    assert build.request is not None and build.request["kwargs"] == {"extra_cflags": ["-O1"]}
    assert cache.errors == [failed.value] and failed.value.failure() == BuildFailure(
        name="kl_lazy", errors="main.cpp:1:9: error: 'g' was not declared in this scope", lazy=BuildPhase.FORWARD)
    # A build the builder refuses is asked about too (to be told why), without its arguments.
    cache.phase = BuildPhase.INIT
    with pytest.raises(BuildError):
        cache.load_inline("kl_lazy", "int f();", functions=["f"], extra_include_paths=["/opt/x"])
    assert asked[-1].request is None and asked[-1].refusal == "extra_include_paths"
    assert asked[-1].phase is BuildPhase.INIT


def test_a_build_answered_but_not_handed_over_is_not_loaded(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path, mode="load", delegate=lambda build: BuildAnswer(ok=True, key="0" * 24))
    cache.phase = BuildPhase.INIT
    with pytest.raises(RuntimeError, match="was not handed to this sandbox"):
        cache.load_inline("kl_lazy", "int f();", functions=["f"])
