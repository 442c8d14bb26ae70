"""Syntax highlighting of kernel files with Pygments: Python, with C++/CUDA inside its long strings.

A candidate is a Python file whose kernels sit in triple-quoted strings handed to ``load_inline``.
The whole file is lexed as Python; each triple-quoted string that looks like C/C++/CUDA source
(an include, a kernel qualifier, braces with semicolons) is lexed again with Pygments' CUDA lexer,
between its quotes. Nothing is executed: Python's `tokenize` finds the strings, Pygments colours.

Output is escaped HTML with Pygments' short token classes (``k`` keyword, ``kn`` import, ``s2``
string, ``c1`` comment, ``cp`` preprocessor, ``kr`` CUDA qualifier, …) for a ``<pre class="code">``;
`stylesheet` colours them under ``.code``. `diff_lines` turns two sources into a unified diff's lines.
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from markupsafe import Markup
from pygments import lex
from pygments.formatters import HtmlFormatter
from pygments.lexers import CudaLexer, PythonLexer
from pygments.token import _TokenType

__all__ = ["DIFF_CONTEXT_LINES", "DiffLine", "count_changes", "diff_lines", "highlight", "stylesheet"]

#: What makes a long string C-like: an include, a kernel qualifier, or braces with semicolons.
_LOOKS_LIKE_C = re.compile(r"#include|__global__|\btorch::|;\s*\n.*[{}]", re.DOTALL)
_TRIPLE = re.compile(r'(?s)^([rRbBuUfF]*)("""|\'\'\')(.*)\2$')
#: Pygments' style: dark code blocks on the dashboard's light cards.
PYGMENTS_STYLE = "github-dark"

_Token = tuple[_TokenType, str]


@cache
def _formatter() -> HtmlFormatter:
    # nowrap: the template owns the <pre>; classes, not inline styles (the page's CSP allows both,
    # but one stylesheet is easier to keep consistent).
    return HtmlFormatter(nowrap=True, style=PYGMENTS_STYLE)


@cache
def stylesheet() -> str:
    """CSS for the token classes, scoped to ``.code`` (served as ``/dashboard/static/pygments.css``)."""
    # Token colours and the block's background only: Pygments' other rules (``pre``, line
    # numbers) are not scoped and would restyle every <pre> of the page.
    formatter = _formatter()
    return "\n".join([*formatter.get_background_style_defs(".code"), *formatter.get_token_style_defs(".code")]) + "\n"


def _c_spans(source: str) -> list[tuple[int, int]]:
    """Character spans of the bodies of triple-quoted strings that hold C/C++/CUDA code."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans: list[tuple[int, int]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.STRING:
                continue
            match = _TRIPLE.match(tok.string)
            if match is None or not _LOOKS_LIKE_C.search(match.group(3)):
                continue
            start = starts[tok.start[0] - 1] + tok.start[1] + len(match.group(1)) + 3
            spans.append((start, start + len(match.group(3))))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return spans
    return spans


def _with_offsets(tokens: Iterable[_Token], start: int = 0) -> Iterator[tuple[int, _TokenType, str]]:
    pos = start
    for kind, text in tokens:
        yield pos, kind, text
        pos += len(text)


def _tokens(source: str) -> list[_Token]:
    """Python tokens with the C spans' tokens replaced by the CUDA lexer's (every character kept)."""
    # Pygments' lexers normalise the text (a final newline added, tabs kept): lex with stripnl off
    # and drop what was added, so the output is the source character for character.
    python = PythonLexer(stripnl=False, ensurenl=False)
    spans = _c_spans(source)
    if not spans:
        return list(lex(source, python))
    cuda = CudaLexer(stripnl=False, ensurenl=False)
    out: list[_Token] = []
    span_iter = iter(spans)
    span = next(span_iter, None)
    for pos, kind, text in _with_offsets(lex(source, python)):
        end = pos + len(text)
        while text:
            if span is None or end <= span[0]:
                out.append((kind, text))
                break
            if pos < span[0]:  # the part before the span
                cut = span[0] - pos
                out.append((kind, text[:cut]))
                pos, text = span[0], text[cut:]
                continue
            if pos >= span[1]:  # the span is behind us
                span = next(span_iter, None)
                continue
            # Inside the span: skip the Python tokens, emit the CUDA tokens once at its start.
            if pos == span[0]:
                out.extend(lex(source[span[0] : span[1]], cuda))
            cut = min(end, span[1]) - pos
            pos, text = pos + cut, text[cut:]
            if pos >= span[1]:
                span = next(span_iter, None)
    return out


def highlight(source: str) -> Markup:
    """``source`` as highlighted, escaped HTML (every character of it kept)."""
    buffer = io.StringIO()
    _formatter().format(_tokens(source), buffer)
    html = buffer.getvalue()
    if not source.endswith("\n") and html.endswith("\n"):
        html = html[:-1]  # the formatter ends its last line; the source may not
    return Markup(html)


# -- diffs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff: ``kind`` is ``add``, ``del``, ``ctx`` or ``hunk``; line numbers
    on the old and new side where the line has one."""

    kind: str
    text: str
    old_n: int | None = None
    new_n: int | None = None


_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
#: Lines of unchanged context around each change (as ``diff -u``).
DIFF_CONTEXT_LINES = 3


def diff_lines(old: str, new: str, *, context: int = DIFF_CONTEXT_LINES) -> tuple[DiffLine, ...]:
    """The unified diff of ``old`` → ``new`` as lines with numbers (empty when they are equal)."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    out: list[DiffLine] = []
    old_n = new_n = 0
    for line in difflib.unified_diff(old_lines, new_lines, n=context, lineterm=""):
        if line.startswith(("---", "+++")) and not out:
            continue
        match = _HUNK.match(line)
        if match:
            old_n, new_n = int(match.group(1)), int(match.group(2))
            out.append(DiffLine("hunk", line))
        elif line.startswith("+"):
            out.append(DiffLine("add", line[1:], new_n=new_n))
            new_n += 1
        elif line.startswith("-"):
            out.append(DiffLine("del", line[1:], old_n=old_n))
            old_n += 1
        else:
            out.append(DiffLine("ctx", line[1:], old_n=old_n, new_n=new_n))
            old_n += 1
            new_n += 1
    return tuple(out)


def count_changes(lines: Sequence[DiffLine]) -> tuple[int, int]:
    """(lines added, lines removed)."""
    return sum(1 for d in lines if d.kind == "add"), sum(1 for d in lines if d.kind == "del")
