"""The dashboard's pure pieces: the session codec, the highlighter and diffs, the chart marks, the
timing plot, the timeline, the static problem facts."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import pytest

from api.dashboard.highlight import diff_lines, highlight
from api.dashboard.problem_facts import read_facts
from api.dashboard.session import SessionCodec
from api.dashboard.views import (
    MESSAGE_PREVIEW_CHARS,
    MarkKind,
    TimelineEntry,
    _preview,
    mark_kind,
    sample_plot,
)
from problems import bundled_problems
from tests.support.paths import REPO
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import Stage, Status, Verdict

SECRET = b"0123456789abcdef0123456789abcdef"
KEY_HASH = "ab" * 32


def test_session_cookies_verify_expire_and_resist_tampering() -> None:
    codec = SessionCodec(SECRET, ttl_s=60)
    value = codec.issue(key_id=7, key_hash=KEY_HASH, now=1000.0)
    session = codec.verify(value, now=1030.0)
    assert session is not None and session.key_id == 7 and session.matches(KEY_HASH)
    assert not session.matches("cd" * 32)
    assert codec.verify(value, now=1061.0) is None  # expired
    assert SessionCodec(b"another secret of 32 bytes......").verify(value, now=1030.0) is None
    version, payload, signature = value.split(".")
    assert codec.verify(f"{version}.{payload[:-2]}xx.{signature}", now=1030.0) is None
    for junk in ("", "v1", "v1.a.b.c", "v2.a.b", "v1.!!!.sig"):
        assert codec.verify(junk) is None
    token = codec.csrf_token(session)
    assert codec.check_csrf(session, token) and not codec.check_csrf(session, token[:-1]) and not codec.check_csrf(
        session, None)
    other = codec.verify(codec.issue(key_id=7, key_hash=KEY_HASH, now=1000.0), now=1030.0)
    assert other is not None and codec.csrf_token(other) != token  # one token per session
    with pytest.raises(ValueError):
        SessionCodec(b"short")


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.py")), ids=lambda p: p.name)
def test_highlighting_keeps_every_character(path) -> None:  # type: ignore[no-untyped-def]
    source = path.read_text()
    rendered = highlight(source)
    assert html.unescape(re.sub(r"<[^>]+>", "", rendered)) == source
    assert '<span class="kn">import</span>' in rendered  # Pygments' Keyword.Namespace


def test_highlighting_escapes_and_colours_embedded_cuda() -> None:
    source = (
        'K = r"""\n#include <cuda.h>\n__global__ void k(float* x) { x[0] = 1.0f; } // hi\n"""\n'
        'x = "</pre><script>"\n'
    )
    rendered = highlight(source)
    assert "<script>" not in rendered and "&lt;/pre&gt;&lt;script&gt;" in rendered
    # The string's body is CUDA to Pygments' CUDA lexer; its quotes stay a Python string.
    assert '<span class="kr">__global__</span>' in rendered and '<span class="c1">// hi</span>' in rendered
    assert '<span class="cp">#include</span><span class="w"> </span><span class="cpf">&lt;cuda.h&gt;</span>' in rendered
    assert rendered.count('<span class="s2">"""</span>') == 2
    broken = "def broken(:\n  '''"
    assert html.unescape(re.sub(r"<[^>]+>", "", highlight(broken))) == broken  # does not tokenize: kept


def test_facts_read_every_bundled_problem_without_running_it() -> None:
    for problem in bundled_problems():
        facts = read_facts(problem.source)
        assert facts.inputs, problem.id
        assert all(f.shape is not None for f in facts.inputs), problem.id
        for name, value in problem.cpu_sizes.items():
            assert facts.cpu_constants[name] == (tuple(value) if isinstance(value, list) else value)


def test_facts_refuse_to_compute_huge_expressions() -> None:
    facts = read_facts("n = 10 ** 10 ** 10\nm = 2\ndef get_inputs():\n    return [torch.randn(n, m), x]\n")
    assert "n" not in facts.constants and facts.constants["m"] == 2
    assert facts.inputs[0].shape is None and facts.inputs[1].factory is None
    assert read_facts("def (").inputs == ()


def test_untimed_passes_are_not_failures_on_the_chart() -> None:
    assert mark_kind("pass", 1.7) == MarkKind.TIMED
    assert mark_kind("pass", None) == mark_kind("suspicious", None) == MarkKind.UNTIMED  # check, profile, compile
    assert mark_kind("fail", None) == mark_kind("error", None) == MarkKind.FAILED
    assert mark_kind("pass", float("nan")) == MarkKind.UNTIMED and mark_kind("pass", 0.0) == MarkKind.UNTIMED


def test_diff_lines_number_both_sides() -> None:
    old = "a\nb\nc\nd\n"
    new = "a\nB\nc\nd\ne\n"
    lines = diff_lines(old, new)
    assert [(d.kind, d.text, d.old_n, d.new_n) for d in lines] == [
        ("hunk", "@@ -1,4 +1,5 @@", None, None),
        ("ctx", "a", 1, 1), ("del", "b", 2, None), ("add", "B", None, 2), ("ctx", "c", 3, 3), ("ctx", "d", 4, 4),
        ("add", "e", None, 5),
    ]
    assert diff_lines(old, old) == ()


def test_the_samples_plot_keeps_every_sample_and_goes_logarithmic_for_wide_ranges() -> None:
    def timed(candidate: list[float], eager: list[float]) -> Verdict:
        return Verdict(status=Status.PASS, stage=Stage.DONE, timing=Timing.from_samples(candidate, clock="cuda_events"),
                       baselines=Baselines(eager=Timing.from_samples(eager, clock="cuda_events"), torch_compile=None))

    plot = sample_plot(timed([1.0, 1.1, 0.9], [4.0, 4.2]))
    assert plot is not None and not plot.log_scale
    assert [(s.name, len(s.points), s.median_ms) for s in plot.series] == [("candidate", 3, 1.0), ("eager", 2, 4.1)]
    top, bottom = plot.top, plot.height - plot.bottom
    assert all(top <= y <= bottom for s in plot.series for _, y in s.points)
    assert plot.series[0].median_y > plot.series[1].median_y  # faster is lower
    assert sample_plot(timed([0.01, 0.012], [4.0, 4.1])).log_scale  # type: ignore[union-attr]
    assert sample_plot(Verdict(status=Status.PASS, stage=Stage.CORRECTNESS)) is None


def test_timeline_previews_cut_at_a_word() -> None:
    entry = TimelineEntry(kind="message", at=datetime.now(UTC), trajectory_index=0, content="x", preview="x")
    assert entry.short
    long = " ".join(["word"] * 200)
    cut = _preview(long)
    assert cut.endswith(" …") and len(cut) <= MESSAGE_PREVIEW_CHARS + 2 and cut[:-2].split(" ")[-1] == "word"
