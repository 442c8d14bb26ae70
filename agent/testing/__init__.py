"""Test seams for the agent and for the worker's tests: an in-memory `Recorder`, a fake
`Evaluator` with canned verdicts, and a stub Chat Completions server for the real ``openai`` client.
"""

from agent.testing.fakes import FakeCandidate, FakeEvaluator, make_verdict
from agent.testing.memory import MemoryRecorder
from agent.testing.stub_server import StubChatServer, StubResponse

__all__ = ["FakeCandidate", "FakeEvaluator", "MemoryRecorder", "StubChatServer", "StubResponse", "make_verdict"]
