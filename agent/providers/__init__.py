"""LLM providers: ``openai`` (any OpenAI-compatible endpoint) and ``scripted`` (a fixed script).

`make_provider` builds one from a server-side `config.settings.LLMProfile`; jobs never carry keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.providers.base import (
    AssistantTurn,
    ContextOverflow,
    Interrupted,
    LLMProvider,
    ProviderError,
    ToolCall,
    Usage,
)

if TYPE_CHECKING:
    from config.settings import LLMProfile
    from problems.spec import Problem

__all__ = [
    "AssistantTurn",
    "ContextOverflow",
    "Interrupted",
    "LLMProvider",
    "ProviderError",
    "ToolCall",
    "Usage",
    "make_provider",
]


def make_provider(profile: LLMProfile, *, problem: Problem, target: str) -> LLMProvider:
    """The provider a profile names.

    Raises:
        ValueError: an unknown provider name.
        agent.providers.scripted.NoScript: ``scripted`` for a problem/target without a script.
    """
    if profile.provider == "openai":
        from agent.providers.openai_chat import OpenAIProvider

        return OpenAIProvider.from_profile(profile)
    if profile.provider == "scripted":
        from agent.providers.scripted import ScriptedProvider

        return ScriptedProvider.for_problem(problem.id, target)
    raise ValueError(f"unknown LLM provider {profile.provider!r}: use 'openai' or 'scripted'")
