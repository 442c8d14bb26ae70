"""Test seams for the agent and for the worker's tests: an in-memory `Recorder`, a fake
`Evaluator` with canned verdicts, a stub Chat Completions server for the real ``openai`` client,
and scripted servers that answer as the real ones do (OpenAI, vLLM, SGLang, llama.cpp, Ollama),
for tests and benchmarks.
"""

from agent.testing.fakes import FakeCandidate, FakeEvaluator, make_verdict
from agent.testing.llamacpp_server import LlamaCppServer
from agent.testing.memory import MemoryRecorder
from agent.testing.ollama_server import OllamaServer
from agent.testing.openai_server import OpenAIServer
from agent.testing.scripted import Call, Failure, Reply, ScriptedServer
from agent.testing.sglang_server import SGLangServer
from agent.testing.stub_server import StubChatServer, StubResponse
from agent.testing.vllm_server import VLLMServer

__all__ = [
    "Call",
    "Failure",
    "FakeCandidate",
    "FakeEvaluator",
    "LlamaCppServer",
    "MemoryRecorder",
    "OllamaServer",
    "OpenAIServer",
    "Reply",
    "SGLangServer",
    "ScriptedServer",
    "StubChatServer",
    "StubResponse",
    "VLLMServer",
    "make_verdict",
]
