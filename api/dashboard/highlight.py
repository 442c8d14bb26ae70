"""A tiny syntax highlighter for kernel files: Python, with C++/CUDA inside its long strings.

Output is HTML-escaped text with ``<span class="…">`` around tokens, for a ``<pre>``:
``k`` keyword, ``b`` builtin, ``f`` defined name, ``s`` string, ``c`` comment, ``n`` number,
``p`` preprocessor line, ``t`` C/CUDA type. Python is read with `tokenize` (never executed); a
triple-quoted string that looks like C/C++/CUDA source is highlighted as such.
"""

from __future__ import annotations

import html
import io
import keyword
import re
import tokenize

__all__ = ["highlight"]

_PY_BUILTINS = frozenset(
    {
        "abs", "all", "any", "bool", "dict", "enumerate", "float", "getattr", "hasattr", "int", "isinstance",
        "len", "list", "max", "min", "print", "range", "setattr", "str", "super", "tuple", "type", "zip",
        "self", "None", "True", "False",
    }
)
_C_KEYWORDS = frozenset(
    {
        "auto", "break", "case", "const", "constexpr", "continue", "default", "do", "else", "for", "if",
        "inline", "namespace", "return", "sizeof", "static", "static_cast", "reinterpret_cast", "struct",
        "switch", "template", "typename", "using", "while", "__global__", "__device__", "__host__",
        "__shared__", "__restrict__", "__forceinline__", "__syncthreads", "__launch_bounds__", "extern",
        "volatile", "unsigned", "signed", "true", "false", "nullptr",
    }
)
_C_TYPES = frozenset(
    {
        "void", "bool", "char", "short", "int", "long", "float", "double", "half", "size_t", "int64_t",
        "int32_t", "uint32_t", "uint64_t", "float2", "float4", "dim3", "__half", "__nv_bfloat16", "torch",
        "Tensor",
    }
)
_C_TOKEN = re.compile(
    r"(?P<c>//[^\n]*|/\*.*?\*/)"
    r"|(?P<p>^[ \t]*#[^\n]*)"
    r'|(?P<s>"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\')'
    r"|(?P<n>\b\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[fFuUlL]*\b)"
    r"|(?P<w>\b[A-Za-z_]\w*\b)",
    re.DOTALL | re.MULTILINE,
)
#: What makes a long string C-like: an include, a kernel qualifier, or braces with semicolons.
_LOOKS_LIKE_C = re.compile(r"#include|__global__|\btorch::|;\s*\n.*[{}]", re.DOTALL)
_STRING_PARTS = tuple(
    t for t in (getattr(tokenize, n, None) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")) if t
)


def _span(cls: str, text: str) -> str:
    return f'<span class="{cls}">{html.escape(text, quote=False)}</span>'


def _highlight_c(code: str) -> str:
    out: list[str] = []
    pos = 0
    for match in _C_TOKEN.finditer(code):
        out.append(html.escape(code[pos : match.start()], quote=False))
        kind, text = match.lastgroup or "", match.group()
        if kind == "w":
            kind = "k" if text in _C_KEYWORDS else "t" if text in _C_TYPES else ""
        out.append(_span(kind, text) if kind else html.escape(text, quote=False))
        pos = match.end()
    out.append(html.escape(code[pos:], quote=False))
    return "".join(out)


def _string(text: str) -> str:
    match = re.match(r'(?s)([rRbBuUfF]*)("""|\'\'\')(.*)(\2)$', text)
    if match and _LOOKS_LIKE_C.search(match.group(3)):
        prefix, quote, body = match.group(1), match.group(2), match.group(3)
        return _span("s", prefix + quote) + _highlight_c(body) + _span("s", quote)
    return _span("s", text)


def _offsets(source: str) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def highlight(source: str) -> str:
    """``source`` as highlighted HTML (escaped); plain escaped text if it does not tokenize."""
    starts = _offsets(source)
    out: list[str] = []
    pos = 0
    previous = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.ENDMARKER:
                break
            start = starts[tok.start[0] - 1] + tok.start[1]
            end = starts[tok.end[0] - 1] + tok.end[1]
            if start < pos or not tok.string:
                continue
            out.append(html.escape(source[pos:start], quote=False))
            text = source[start:end]
            if tok.type == tokenize.STRING:
                out.append(_string(text))
            elif tok.type in _STRING_PARTS:
                out.append(_span("s", text))
            elif tok.type == tokenize.COMMENT:
                out.append(_span("c", text))
            elif tok.type == tokenize.NUMBER:
                out.append(_span("n", text))
            elif tok.type == tokenize.NAME:
                if previous in ("def", "class"):
                    out.append(_span("f", text))
                elif keyword.iskeyword(text) or keyword.issoftkeyword(text):
                    out.append(_span("k", text))
                elif text in _PY_BUILTINS:
                    out.append(_span("b", text))
                else:
                    out.append(html.escape(text, quote=False))
            else:
                out.append(html.escape(text, quote=False))
            if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                previous = tok.string
            pos = end
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return html.escape(source, quote=False)
    out.append(html.escape(source[pos:], quote=False))
    return "".join(out)
