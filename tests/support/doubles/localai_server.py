"""A fake server that ignores ``"stream": true``, as LocalAI did before it streamed.

Reproduced (mudler/LocalAI issue #416, fixed by pull request #465): the server logged the request
with ``"stream":true``, then ran it with ``Stream:false`` and answered one ``application/json``
body, the whole completion at once, with a usage of zeros
(``{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}``: it did not count tokens).
The ``openai`` client, reading that body as a stream of events, finds no event in it: without
care, a streamed request to such a server "answers with no choices" on every try.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.support.doubles.llm_server import FakeLLMServer, Step

__all__ = ["LocalAIServer"]


class LocalAIServer(FakeLLMServer):
    """``local-ai`` of mid-2023: Chat Completions, never streamed, tokens not counted."""

    streams = False
    counts_tokens = False
    reasoning_field = None

    def __init__(self, script: Iterable[Step] = (), *, model: str = "ggml-model-q4_0.bin",
                 context_window: int = 16_384) -> None:
        super().__init__(script, model=model, context_window=context_window)
