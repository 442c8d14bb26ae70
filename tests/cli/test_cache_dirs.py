"""One cache per machine: the service's settings and the CLI resolve the same directory, with the
XDG base directories honoured (and ``KERNELLOOP_CACHE_DIR`` / ``KERNELLOOP_DATA_DIR`` first); and
one timing: ``KERNELLOOP_TIMING_MAX_S`` times the service's jobs and the CLI's judging alike."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from cli.client.replay import replay_options
from cli.common import machine_options
from config import Settings, default_data_dir
from harness import HarnessOptions
from harness.options import TimingOptions, default_cache_dir
from worker.runner import harness_options_for


def test_the_cache_and_data_dirs_follow_xdg(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    assert default_cache_dir({"HOME": home}) == Path(home) / ".cache" / "kernelloop"
    assert default_data_dir({"HOME": home}) == Path(home) / ".local" / "share" / "kernelloop"
    xdg = {"HOME": home, "XDG_CACHE_HOME": str(tmp_path / "xc"), "XDG_DATA_HOME": str(tmp_path / "xd")}
    assert default_cache_dir(xdg) == tmp_path / "xc" / "kernelloop"
    assert default_data_dir(xdg) == tmp_path / "xd" / "kernelloop"
    # A relative XDG value is invalid (the XDG spec): ignored.
    assert default_cache_dir({"HOME": home, "XDG_CACHE_HOME": "rel"}) == Path(home) / ".cache" / "kernelloop"
    assert default_cache_dir({**xdg, "KERNELLOOP_CACHE_DIR": str(tmp_path / "mine")}) == tmp_path / "mine"


def _clear(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("KERNELLOOP_CACHE_DIR", "KERNELLOOP_DATA_DIR", "KERNELLOOP_TIMING_MAX_S", "XDG_CACHE_HOME",
                 "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # no .env file here


def test_service_and_cli_share_one_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clear(monkeypatch, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    expected = tmp_path / "xdg-cache" / "kernelloop"
    settings = Settings()
    assert settings.data_dir == tmp_path / "xdg-data" / "kernelloop"
    # Not inside the data directory any more: the service and `eval`/`replay` share builds and baselines.
    assert settings.resolved_cache_dir == expected
    assert machine_options().cache_dir == expected
    assert HarnessOptions().cache_dir == expected
    assert replay_options(trials=1, cache_dir=None, arch_list=None, reuse_baselines=False).cache_dir == expected
    assert machine_options(tmp_path / "flag").cache_dir == tmp_path / "flag"


def test_kernelloop_cache_dir_moves_it_for_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clear(monkeypatch, tmp_path)
    monkeypatch.setenv("KERNELLOOP_CACHE_DIR", str(tmp_path / "shared"))
    assert Settings().resolved_cache_dir == tmp_path / "shared" == machine_options().cache_dir
    # A .env file the service reads is read by the CLI too: one resolution.
    monkeypatch.delenv("KERNELLOOP_CACHE_DIR")
    (tmp_path / ".env").write_text(f"KERNELLOOP_CACHE_DIR={tmp_path / 'from-env-file'}\n")
    assert Settings().resolved_cache_dir == tmp_path / "from-env-file" == machine_options().cache_dir


def test_timing_max_s_times_the_service_and_the_cli_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clear(monkeypatch, tmp_path)
    assert harness_options_for(Settings()).timing == machine_options().timing == TimingOptions()
    monkeypatch.setenv("KERNELLOOP_TIMING_MAX_S", "0.25")
    settings = Settings()
    job = harness_options_for(settings)
    assert job.timing.max_time_s == 0.25
    assert replace(job.timing, max_time_s=TimingOptions().max_time_s) == TimingOptions()  # only that changed
    assert job.hidden_paths == (settings.data_dir, settings.resolved_cache_dir / "locks")
    # `eval` and `replay` time as the jobs they are compared with (a baseline's cache key hashes it).
    assert machine_options().timing == job.timing
    assert replay_options(trials=1, cache_dir=None, arch_list=None, reuse_baselines=False).timing == job.timing
    monkeypatch.setenv("KERNELLOOP_TIMING_MAX_S", "0")
    with pytest.raises(ValidationError, match="timing_max_s"):
        Settings()
