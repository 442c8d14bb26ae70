"""Test doubles for the agent's and the worker's tests (kept out of the shipped `agent` package):
an in-memory `Recorder`, a fake `Evaluator` with canned verdicts, a stub Chat Completions server
for the real ``openai`` client, and fake servers that answer as the real ones do (OpenAI,
vLLM, SGLang, llama.cpp, Ollama, and an older LocalAI that ignores ``"stream": true``), for tests and benchmarks.
"""

from tests.support.doubles.fakes import FakeCandidate, FakeEvaluator, make_verdict
from tests.support.doubles.llamacpp_server import LlamaCppServer
from tests.support.doubles.llm_server import Call, Failure, FakeLLMServer, Reply
from tests.support.doubles.localai_server import LocalAIServer
from tests.support.doubles.memory import MemoryRecorder
from tests.support.doubles.ollama_server import OllamaServer
from tests.support.doubles.openai_server import OpenAIServer
from tests.support.doubles.sglang_server import SGLangServer
from tests.support.doubles.stub_server import StubChatServer, StubResponse
from tests.support.doubles.vllm_server import VLLMServer

__all__ = [
    "Call",
    "Failure",
    "FakeCandidate",
    "FakeEvaluator",
    "FakeLLMServer",
    "LlamaCppServer",
    "LocalAIServer",
    "MemoryRecorder",
    "OllamaServer",
    "OpenAIServer",
    "Reply",
    "SGLangServer",
    "StubChatServer",
    "StubResponse",
    "VLLMServer",
    "make_verdict",
]
