"""``optimize --llm openai`` with no key set: refused before a job or a database exists (issue 24,
item 9), naming the variable, with exit 2 (misuse), rather than five 401s and a failed job."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app


def test_optimize_with_a_profile_whose_key_is_unset_stops_before_the_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(
        app, ["optimize", "level1/softmax", "--target", "cpu", "--llm", "openai", "--data-dir", str(data)],
        env={"COLUMNS": "200", "KERNELLOOP_DATA_DIR": str(data), "OPENAI_API_KEY": None},
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "the LLM profile 'openai' needs an API key in $OPENAI_API_KEY, which is not set in this shell" in said
    assert "`export OPENAI_API_KEY=…`" in said
    assert not (data / "kernelloop.db").exists()  # no job was made, nothing was migrated
