"""The dashboard's pure pieces: the session codec, the highlighter, the static problem facts."""

from __future__ import annotations

import html
import re

import pytest

from api.dashboard.highlight import highlight
from api.dashboard.problem_facts import read_facts
from api.dashboard.session import SessionCodec
from problems import bundled_problems
from tests.dashboard.support import REPO

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
