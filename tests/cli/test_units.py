"""The client's pure parts: configuration precedence, the SSE parser, suites and the bench summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.client.bench import BenchResult, read_suite, summarize
from cli.client.http import DEFAULT_API_URL, ClientConfig, parse_sse, resolve_config
from cli.client.replay import relative_difference, replay_options
from tests.support.paths import REPO
from vocabulary.figures import AttemptFigures
from vocabulary.verdict import Stage, Status


def _write_config(home: Path, text: str) -> Path:
    path = home / ".config" / "kernelloop" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_config_precedence_flags_then_env_then_file(tmp_path: Path) -> None:
    _write_config(tmp_path, 'api_url = "http://file:1/"\napi_key = "kl_file"\n')
    env = {"HOME": str(tmp_path)}
    assert resolve_config(api_url=None, api_key=None, environ=env) == ClientConfig(
        "http://file:1", "kl_file", {"api_url": str(tmp_path / ".config/kernelloop/config.toml"),
                                     "api_key": str(tmp_path / ".config/kernelloop/config.toml")},
    )
    env |= {"KERNELLOOP_API_URL": "http://env:2", "KERNELLOOP_API_KEY": "kl_env"}
    config = resolve_config(api_url=None, api_key=None, environ=env)
    assert (config.api_url, config.api_key) == ("http://env:2", "kl_env")
    config = resolve_config(api_url="http://flag:3", api_key="kl_flag", environ=env)
    assert (config.api_url, config.api_key, config.origin["api_url"]) == ("http://flag:3", "kl_flag", "flag")
    bare = resolve_config(api_url=None, api_key=None, environ={"HOME": str(tmp_path / "nobody")})
    assert bare.api_url == DEFAULT_API_URL and bare.api_key is None


def test_config_file_errors_are_reported(tmp_path: Path) -> None:
    _write_config(tmp_path, "api_url = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        resolve_config(api_url=None, api_key=None, environ={"HOME": str(tmp_path)})


def test_sse_parser_follows_the_wire_format() -> None:
    lines = [
        "retry: 1000", "", ": keep-alive", "", "id: 7", "event: attempt", 'data: {"n": 3}', "",
        "event: end", 'data: {"state": "succeeded"}', "", "data: line one", "data: line two", "",
    ]
    events = list(parse_sse(lines))
    assert [(e.id, e.type, e.data) for e in events] == [
        (7, "attempt", {"n": 3}),
        (None, "end", {"state": "succeeded"}),
        (None, "message", "line one\nline two"),
    ]


def _result(problem: str, correct: bool, eager: float | None, compile_: float | None = None) -> BenchResult:
    best = AttemptFigures(status=Status.PASS, stage=Stage.DONE, correct=True, median_ms=1.0, speedup_vs_eager=eager,
                          speedup_vs_compile=compile_)
    return BenchResult(problem=problem, job_id=1, state="succeeded", best=best if correct else None, tokens=10,
                       cost_usd=0.5)


def test_fast_p_counts_every_problem_and_geomeans_only_correct_ones() -> None:
    summary = summarize([
        _result("a", True, 2.5, 1.2), _result("b", True, 1.2, 0.6), _result("c", True, 0.5, 0.3),
        _result("d", False, None), _result("e", True, None),  # correct but untimed: fast_0 only
    ])
    assert summary.fast_p == {0.0: 0.8, 1.0: 0.4, 1.5: 0.2, 2.0: 0.2}
    assert summary.geomean_speedup_vs_eager == pytest.approx((2.5 * 1.2 * 0.5) ** (1 / 3))
    assert summary.geomean_speedup_vs_compile == pytest.approx((1.2 * 0.6 * 0.3) ** (1 / 3))
    assert summary.tokens == 50 and summary.cost_usd == pytest.approx(2.5)
    assert summary.to_dict()["fast_p"] == {"0": 0.8, "1": 0.4, "1.5": 0.2, "2": 0.2}
    nothing = summarize([_result("x", False, None)])
    assert nothing.geomean_speedup_vs_eager is None and nothing.fast_p[0.0] == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_suites_from_a_list_or_a_directory(tmp_path: Path) -> None:
    source = (REPO / "problems/bundled/level1/softmax.py").read_text()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "b.py").write_text(source)
    (tmp_path / "dir" / "a.py").write_text(source)
    (tmp_path / "dir" / "_helper.py").write_text("x = 1\n")
    assert [e.name for e in read_suite(tmp_path / "dir")] == ["a", "b"]
    listing = tmp_path / "suite.txt"
    listing.write_text("level1/softmax  # bundled\n\ndir/a.py\n")
    entries = read_suite(listing)
    assert entries[0].fields == {"problem_id": "level1/softmax"} and "problem_source" in entries[1].fields
    listing.write_text("level1/nope\n")
    with pytest.raises(ValueError, match=r"suite\.txt:1"):
        read_suite(listing)
    listing.write_text("# nothing\n")
    with pytest.raises(ValueError, match="names no problems"):
        read_suite(listing)


def test_replay_remeasures_baselines_unless_told_to_reuse(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    remeasured = replay_options(trials=2, cache_dir=cache, arch_list=None, reuse_baselines=False)
    assert not remeasured.reuse_baselines and remeasured.builds_dir == cache / "builds"
    reused = replay_options(trials=2, cache_dir=cache, arch_list="9.0a", reuse_baselines=True)
    assert reused.reuse_baselines and reused.arch_list == "9.0a"


def test_replay_differences_are_relative_to_the_stored_figure() -> None:
    assert relative_difference(1.2, 1.0) == "+20.0%"
    assert relative_difference(0.75, 1.5) == "-50.0%"
    assert relative_difference(None, 1.0) == relative_difference(1.0, None) == relative_difference(1.0, 0) == ""


def test_a_page_of_the_api_reads_as_a_json_page() -> None:
    from cli.client.http import JsonPage
    from vocabulary.wire import WireError

    page = JsonPage.from_json({"items": [{"id": 1}, {"id": 2}], "next_cursor": 2, "total": 9}, "the jobs page")
    assert page == JsonPage(items=[{"id": 1}, {"id": 2}], next_cursor=2, total=9)
    assert JsonPage.from_json({"items": [], "next_cursor": None}, "p") == JsonPage(items=[], next_cursor=None)
    with pytest.raises(WireError, match="an item of the jobs page is not a JSON object"):
        JsonPage.from_json({"items": [1], "next_cursor": None}, "the jobs page")
    with pytest.raises(WireError, match="'next_cursor' is not an integer"):
        JsonPage.from_json({"items": [], "next_cursor": "2"}, "the jobs page")


def test_a_bench_report_entry_reads_back_or_names_its_field() -> None:
    from cli.client.benchrun import ProblemRun
    from vocabulary.wire import WireError

    run = ProblemRun("level1/relu", job_id=3, job={"id": 3, "state": "running"}, provenance={"device": "cpu"})
    assert ProblemRun.from_dict(run.to_dict()) == run
    with pytest.raises(WireError, match="'job_id' is not an integer"):
        ProblemRun.from_dict({"problem": "level1/relu", "job_id": "3"})
