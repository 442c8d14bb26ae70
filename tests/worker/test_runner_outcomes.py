"""How agent jobs end, through `worker.runner.run_claimed_job` with the real agent and a fake LLM server.

A job succeeds only with a verified kernel; otherwise it fails with a reason a user can act on
(no attempt, refused, context, budget, the LLM endpoint's own message). The referee is a fake
(`tests.support.doubles.FakeEvaluator` behind the referee's interface): no compiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.schemas import JobPublic, MessagePublic
from config import LLMProfile, Settings
from store import JobState, claim_job, get_job, list_attempts, list_messages, session_scope
from tests.support.doubles import (
    Call,
    FakeCandidate,
    FakeEvaluator,
    FakeLLMServer,
    LlamaCppServer,
    OpenAIServer,
    Reply,
    VLLMServer,
)
from tests.support.worker import agent_job, quick_options
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import Verdict
from worker.runner import RunOutcome, run_claimed_job

WORKER = "test-worker"
FAST = "import torch\n\nclass ModelNew(torch.nn.Module):\n    # fast\n    pass\n"
DRAFT = "import torch\n\nclass ModelNew(torch.nn.Module):\n    # draft\n    pass\n"


class FakeReferee:
    """The referee's interface over a `FakeEvaluator`."""

    def __init__(self, evaluator: FakeEvaluator) -> None:
        self.inner = evaluator
        self.target = Target.CPU

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        return self.inner.evaluate(source, depth)

    @property
    def device_specs(self) -> dict[str, Any]:
        return self.inner.device_specs

    def close(self) -> None:
        return None

    def cancel(self) -> None:
        self.inner.cancel()


def _run(settings: Settings, factory: sessionmaker[Session], server: FakeLLMServer, *,
         budgets: dict[str, Any] | None = None, **profile: Any) -> tuple[RunOutcome, Callable[[Session], Any]]:
    llm = LLMProfile(base_url=server.base_url, model=server.model, api_key_env=None, max_retries=1,
                     context_window=profile.pop("context_window", server.context_window), max_output_tokens=1024,
                     idle_timeout_s=5.0, **profile)
    settings = settings.model_copy(update={"llm_profiles": {**settings.llm_profiles, "fake_server": llm}})
    with session_scope(factory) as session:
        job_id = agent_job(session, "unused", llm_profile="fake_server")
        if budgets:
            get_job(session=session, job_id=job_id).budgets = {**budgets}
    with session_scope(factory) as session:
        assert claim_job(session=session, job_id=job_id, worker_id=WORKER, lease_seconds=30) is not None
    evaluator = FakeEvaluator({FAST: FakeCandidate(median_ms=1.0), DRAFT: FakeCandidate("wrong")})
    outcome = run_claimed_job(job_id, settings=settings, session_factory=factory, worker_id=WORKER,
                      harness_options=quick_options(settings.resolved_cache_dir),
                      referee_factory=lambda *a: FakeReferee(evaluator))
    return outcome, lambda session: get_job(session=session, job_id=job_id)


def test_a_verified_kernel_succeeds_with_its_tokens_recorded_apart(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    script = [Reply(content="Plan.", reasoning="r " * 200, calls=(Call("benchmark", {"source": FAST}),)),
              Reply(content="Done.", calls=(Call("submit", {"source": FAST}),))]
    with OpenAIServer(script, model="o4-mini", reasoning_model=True) as server:
        outcome, job = _run(sqlite_settings, sqlite_factory, server, max_tokens_param="max_completion_tokens",
                            omit_params=("temperature",))
        assert server.statuses == [200, 200]  # the documented reasoning profile needs no retry
    assert outcome is RunOutcome.SUCCEEDED
    with session_scope(sqlite_factory) as session:
        row = job(session)
        assert row.state is JobState.SUCCEEDED and row.error is None and row.best_attempt_id is not None
        assistants = [m for m in list_messages(session=session, job_id=row.id).items if m.role == "assistant"]
        assert assistants[0].tokens_reasoning == 200 and assistants[1].tokens_cached >= 1024
        public = JobPublic.from_job(row)
        assert public.tokens_reasoning == 200 and public.tokens_cached == assistants[1].tokens_cached
        assert MessagePublic.from_message(assistants[0]).tokens_reasoning == 200


def test_a_model_that_makes_no_attempt_fails_the_job_saying_so(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with VLLMServer([Reply(content="I would tile the loops.")] * 4) as server:
        outcome, job = _run(sqlite_settings, sqlite_factory, server)
    assert outcome is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        row = job(session)
        assert row.state is JobState.FAILED and row.best_attempt_id is None
        assert (row.error or "").startswith("the model made no attempt: none of its 4 replies had a usable tool call")


def test_a_refusing_model_fails_the_job_saying_so(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with OpenAIServer([Reply(refusal="I can't help with that.")] * 4) as server:
        outcome, job = _run(sqlite_settings, sqlite_factory, server)
    assert outcome is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        assert job(session).error == "the model refused the task in all 4 replies: I can't help with that."


def test_a_conversation_that_cannot_fit_fails_with_the_servers_words(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    """llama.cpp started with a 3000-token context: even the system prompt does not fit."""
    with LlamaCppServer([Reply(content="x")], context_window=3000) as server:
        outcome, job = _run(sqlite_settings, sqlite_factory, server, context_window=32_768)
    assert outcome is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        error = job(session).error or ""
    assert error.startswith("the conversation does not fit the model's context window")
    assert "larger context_window" in error


@pytest.mark.parametrize(("status", "message", "kind"), [
    (400, "Error in applying chat template from request: 'dict object' has no attribute 'content'",
     "BadRequestError"),
    (404, "The model `Qwen/Qwen3-32B` does not exist.", "NotFoundError"),
])
def test_an_llm_error_fails_the_job_with_the_servers_message(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session], status: int, message: str, kind: str
) -> None:
    """A 400 (or 404) that ends the trajectory ends the job as failed, with the endpoint's message."""
    with VLLMServer() as server:
        server.enqueue(server.error(status, message))
        outcome, job = _run(sqlite_settings, sqlite_factory, server)
        url = server.base_url
    assert outcome is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        error = job(session).error or ""
    assert error.startswith(f"the LLM endpoint {url} refused the request: {message} [type: {kind}] "
                            f"(HTTP {status})"), error


def test_a_budget_spent_without_a_verified_kernel_fails_the_job_saying_so(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    script = [Reply(content="try", calls=(Call("check_correctness", {"source": DRAFT}),))] * 2
    with VLLMServer(script) as server:
        outcome, job = _run(sqlite_settings, sqlite_factory, server, budgets={"turns": 2})
    assert outcome is RunOutcome.FAILED
    with session_scope(sqlite_factory) as session:
        row = job(session)
        assert len(list_attempts(session=session, job_id=row.id).items) == 1  # the second was served from dedup
        assert row.error == ("no verified kernel: 2 attempts made, none passed benchmark before the turns budget "
                             "(2) ran out")
