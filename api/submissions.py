"""Group commit of submissions: one writer per API process stores a burst of ``POST /jobs`` and
``POST /evaluations`` in one transaction instead of one transaction each.

A request checks its input (problem, profile, candidate: no database), then hands a `PendingSubmission`
to the app's `SubmissionWriter` and waits. The writer takes every submission waiting at that
moment (at most ``max_batch``; none is held back to wait for more, so a lone submission goes at
once) and, in one transaction on one thread:

1. reads what each agent job's key may still spend (`store.key_cost_left`, no lock: cost grows
   as jobs run, not as they are submitted), which bounds the job's budget;
2. finds or inserts each distinct problem source once;
3. inserts every job and its ``queued`` event (`store.create_jobs`: two multi-row ``INSERT``s);
4. locks the batch's keys, in id order, and reads their limits (revocation included: a key the
   API verified from its short cache cannot create a job once revoked) and usage
   (`store.lock_keys_usage`: two statements for any number of keys); the counts include the
   batch's own jobs, so each submission is judged, in arrival order, against the others' jobs
   and those taken before it; the refused (429, the same messages) are removed again
   (`store.discard_new_jobs`);
5. commits; then announces each job to the queue (`Dispatcher.job_created`) in order,
   answering each request as soon as its job is announced; a job the broker refuses is
   cancelled and its request gets 503. The next batch is written after that: writing it while
   this one is announced (on a second thread) was measured slower, the three threads (event
   loop, writer, announcer) then taking turns for the GIL.

The quotas hold across processes and batches: a key's lock is held from its count to the commit,
and a transaction waiting for it counts, once it has it, everything the holder committed. Taking
the locks after the inserts keeps them for two statements and the commit: API processes storing
bursts of one key's submissions take turns only for that (with the locks taken first, each
waited for the others' whole inserts: benchmarks/README.md, "Fourth round"). If the batch's
transaction fails for any other reason, each submission is written again on its own, so one bad
submission cannot fail the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value
from starlette.concurrency import run_in_threadpool

from api.dispatch import Dispatcher, DispatchError
from api.errors import ApiError, QueueUnavailable, QuotaExceeded, Unauthorized
from api.metrics import RequestMetrics
from api.middleware import add_server_timing
from api.schemas import BudgetsInput, JobPublic
from config import Settings
from problems import Problem
from store import (
    ApiKey,
    JobKind,
    KeyLimits,
    KeyUsage,
    NewJob,
    StoredProblem,
    Target,
    cancel_job,
    create_jobs,
    discard_new_jobs,
    get_or_create_problem,
    key_cost_left,
    lock_keys_usage,
    session_scope,
    utcnow,
)
from vocabulary.budgets import Budgets

__all__ = ["QUOTA_WINDOW", "PendingSubmission", "SubmissionWriter", "resolve_budgets"]

log = logging.getLogger(__name__)

#: The window of the "jobs per day" quota: a rolling day, not a calendar day.
QUOTA_WINDOW = timedelta(days=1)


@dataclass
class PendingSubmission:
    """One checked submission waiting for the writer."""

    key: ApiKey
    kind: JobKind
    problem: Problem
    bundled: bool
    target: Target
    #: Agent jobs: charged against the key's cost cap (evaluations use no LLM).
    charge_cost: bool
    llm_profile: str | None = None
    llm_model: str | None = None
    budgets: BudgetsInput | None = None
    trajectories: int = 0
    candidate_source: str | None = None
    future: asyncio.Future[JobPublic] | None = field(default=None, repr=False)
    #: When it reached each step (``time.perf_counter``): the request's ``Server-Timing`` phases.
    marks: dict[str, float] = field(default_factory=dict, repr=False)


def resolve_budgets(budgets: BudgetsInput | None, defaults: Budgets, *, cost_left: float | None) -> Budgets:
    """The job's budgets, resolved once, here: the request's, else ``defaults`` (the service's,
    `config.Settings.default_budgets`); the cost bounded by the key's cap. The job stores every one
    of them (``target_speedup`` null when unset)."""
    requested = (budgets or BudgetsInput()).model_dump(exclude_none=True)
    resolved = replace(defaults, **requested)
    if cost_left is not None:
        # The key's cost cap bounds every job: a job may spend at most what the key has left.
        resolved = replace(resolved, max_cost_usd=min(resolved.max_cost_usd, cost_left))
    return resolved


def _quota_refusal(item: PendingSubmission, limits: KeyLimits, usage: KeyUsage, taken: int) -> ApiError | None:
    """Why ``item`` may not be created, ``taken`` of its key's jobs being already in this batch."""
    if limits.revoked:
        return Unauthorized(
            "the X-API-Key is unknown or revoked; ask an admin for a new key",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "X-API-Key"},
        )
    if item.charge_cost and limits.cost_cap_usd is not None and limits.cost_cap_usd - usage.cost_usd <= 0:
        return QuotaExceeded(
            f"this key's jobs have cost ${usage.cost_usd:.2f} of its ${limits.cost_cap_usd:.2f} cap; "
            "ask an admin to raise the cap (evaluations, which use no LLM, still run)",
            extra={"quota": {"name": "cost_cap_usd", "limit": limits.cost_cap_usd, "used": usage.cost_usd}},
        )
    active, recent = usage.active_jobs + taken, usage.jobs_since + taken
    if active >= limits.max_concurrent_jobs:
        return QuotaExceeded(
            f"this key has {active} jobs queued or running, its limit is {limits.max_concurrent_jobs}; "
            "wait for one to finish or cancel one (POST /jobs/{id}/cancel)",
            extra={"quota": {"name": "max_concurrent_jobs", "limit": limits.max_concurrent_jobs, "used": active}},
        )
    if recent >= limits.max_jobs_per_day:
        return QuotaExceeded(
            f"this key created {recent} jobs in the last 24 hours, its limit is {limits.max_jobs_per_day}; "
            "try again later or ask an admin for a higher limit",
            extra={"quota": {"name": "max_jobs_per_day", "limit": limits.max_jobs_per_day, "used": recent}},
        )
    return None


def _store_problem(session: Session, problem: Problem, *, bundled: bool) -> StoredProblem:
    declarations = {k: v for k, v in problem.to_dict().items() if k != "source"}
    return get_or_create_problem(
        session=session, source=problem.source, declarations=declarations, bundled_id=problem.id if bundled else None
    )


def _settle(item: PendingSubmission, outcome: JobPublic | BaseException) -> None:
    """Answer one waiting request (on the event loop)."""
    if item.future is None or item.future.done():
        return
    if isinstance(outcome, BaseException):
        item.future.set_exception(outcome)
    else:
        item.future.set_result(outcome)


def _mark(items: Sequence[PendingSubmission], step: str) -> None:
    now = time.perf_counter()
    for item in items:
        item.marks[step] = now


#: ``Server-Timing`` phases of a submission: (name, from mark, to mark).
_PHASES = (
    ("queue", "queued", "batch"),  # waiting for the writer (busy with the batch before)
    ("store", "batch", "committed"),  # its batch's transaction
    ("locks", "locking", "committed"),  # the end of it: the keys' locks, the counts, the commit
    ("announce", "committed", "announced"),  # to the queue, after the batch's jobs before it
)


def _report_phases(marks: dict[str, float]) -> None:
    for name, start, end in _PHASES:
        if start in marks and end in marks:
            add_server_timing(name, marks[end] - marks[start])


def _fail(items: Sequence[PendingSubmission], exc: BaseException) -> None:
    for item in items:
        _settle(item, exc if isinstance(exc, Exception) else RuntimeError("the API is shutting down"))


class SubmissionWriter:
    """The app's single writer of new jobs (see the module doc). Start with `start` from the
    event loop; `submit` from a request; `aclose` at shutdown."""

    def __init__(
        self,
        *,
        factory: sessionmaker[Session],
        dispatcher: Dispatcher,
        settings: Settings,
        metrics: RequestMetrics,
        max_batch: int,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._factory = factory
        self._dispatcher = dispatcher
        self._settings = settings
        self._metrics = metrics
        self._max_batch = max_batch
        self._queue: asyncio.Queue[PendingSubmission] | None = None
        self._task: asyncio.Task[None] | None = None
        #: Sizes of the batches written (the last 1000), for tests and curiosity.
        self.batch_sizes: list[int] = []

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="submission-writer")

    async def submit(self, item: PendingSubmission) -> JobPublic:
        """Store and queue one checked submission; raises what the request should answer."""
        if self._queue is None or self._task is None or self._task.done():
            raise RuntimeError("the submission writer is not running (the app has not started, or has stopped)")
        item.future = asyncio.get_running_loop().create_future()
        item.marks["queued"] = time.perf_counter()
        self._queue.put_nowait(item)
        try:
            return await item.future
        finally:
            _report_phases(item.marks)

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            items = [await self._queue.get()]
            while len(items) < self._max_batch and not self._queue.empty():
                items.append(self._queue.get_nowait())
            self.batch_sizes = [*self.batch_sizes[-999:], len(items)]
            _mark(items, "batch")
            try:
                outcomes = await run_in_threadpool(self._write, items)
            except BaseException as exc:  # cancelled at shutdown, or a bug: no request waits forever
                _fail(items, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.exception("submission writer: a batch failed")
                continue
            committed = [(item, o) for item, o in zip(items, outcomes, strict=True) if isinstance(o, JobPublic)]
            for item, outcome in zip(items, outcomes, strict=True):
                if not isinstance(outcome, JobPublic):
                    _settle(item, outcome)
            if committed:
                await self._announce(loop, committed)

    async def _announce(
        self, loop: asyncio.AbstractEventLoop, committed: Sequence[tuple[PendingSubmission, JobPublic]]
    ) -> None:
        try:
            await run_in_threadpool(self._dispatch_all, loop, committed)
        except BaseException as exc:  # the requests still waiting are answered; the writer goes on
            _fail([item for item, _ in committed], exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.exception("submission writer: announcing a batch failed")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- on the writer's thread ------------------------------------------------------------------

    def _dispatch_all(
        self, loop: asyncio.AbstractEventLoop, committed: Sequence[tuple[PendingSubmission, JobPublic]]
    ) -> None:
        for item, public in committed:
            outcome = self._dispatch(public, item)
            item.marks["announced"] = time.perf_counter()
            loop.call_soon_threadsafe(_settle, item, outcome)

    def _write(self, items: Sequence[PendingSubmission]) -> list[JobPublic | Exception]:
        """One transaction for all ``items``; if it fails, one each (so a failure stays its own)."""
        try:
            with session_scope(self._factory) as session:
                outcomes = self._write_batch(session, items)
            _mark(items, "committed")
            return outcomes
        except Exception as exc:  # noqa: BLE001 (answered to its request: a 4xx ApiError, else a 500)
            if len(items) == 1:
                return [exc]
            log.warning("a batch of %d submissions failed (%s: %s); writing them one by one",
                        len(items), type(exc).__name__, exc)
            return [self._write([item])[0] for item in items]

    def _write_batch(self, session: Session, items: Sequence[PendingSubmission]) -> list[JobPublic | Exception]:
        # Everything that needs no lock first: the budgets, the problems, the inserts. The keys'
        # locks then cover only the counts and the commit, the part that must be serial.
        by_key: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            by_key.setdefault(item.key.id, []).append(i)
        cost_left = {key_id: key_cost_left(session=session, api_key_id=key_id)
                     for key_id, indices in by_key.items() if any(items[i].charge_cost for i in indices)}
        problems: dict[str, StoredProblem] = {}
        for item in items:
            if item.problem.source not in problems:
                problems[item.problem.source] = _store_problem(session, item.problem, bundled=item.bundled)
        jobs = create_jobs(session=session, specs=[
            NewJob(
                problem_id=problems[item.problem.source].id,
                target=item.target,
                owner_id=item.key.id,
                kind=item.kind,
                llm_profile=item.llm_profile,
                llm_model=item.llm_model,
                budgets=resolve_budgets(item.budgets, self._settings.default_budgets(),
                                        cost_left=cost_left.get(item.key.id) if item.charge_cost else None).to_dict(),
                trajectories_count=item.trajectories,
                candidate_source=item.candidate_source,
            )
            for item in items
        ])
        outcomes: list[JobPublic | Exception | None] = [None] * len(items)
        refused: list[int] = []
        _mark(items, "locking")
        usage = lock_keys_usage(session=session, api_key_ids=by_key, since=utcnow() - QUOTA_WINDOW)
        for key_id, indices in by_key.items():
            limits, counted = usage[key_id]
            # The counts include this batch's jobs of the key (queued, created just now): each of
            # them is judged, in arrival order, against the others' and those taken before it.
            others = replace(counted, active_jobs=counted.active_jobs - len(indices),
                             jobs_since=counted.jobs_since - len(indices))
            taken = 0
            for i in indices:
                refusal = _quota_refusal(items[i], limits, others, taken)
                if refusal is None:
                    taken += 1
                    # The row is in hand: no lazy load (``problem`` is a view-only relationship).
                    set_committed_value(jobs[i], "problem", problems[items[i].problem.source])
                    outcomes[i] = JobPublic.from_job(jobs[i])
                else:
                    outcomes[i] = refusal
                    refused.append(jobs[i].id)
        discard_new_jobs(session=session, job_ids=refused)
        assert all(o is not None for o in outcomes)
        return outcomes  # type: ignore[return-value]

    def _dispatch(self, public: JobPublic, item: PendingSubmission) -> JobPublic | Exception:
        """Announce a committed job; if the broker refuses, cancel it (so it holds no quota): 503."""
        try:
            self._dispatcher.job_created(public.id, public.target.value)
        except DispatchError as exc:
            self._metrics.dispatch_failed()
            try:
                with session_scope(self._factory) as session:
                    cancel_job(session=session, job_id=public.id, reason=f"not queued: {exc}")
            except Exception as cancel_exc:  # noqa: BLE001 (the redispatcher picks an undispatched job up)
                log.warning("job %d: not queued, and cancelling it failed: %s", public.id, cancel_exc)
            error = QueueUnavailable(
                f"the job queue is unreachable, so job {public.id} was cancelled; try again shortly"
            )
            error.__cause__ = exc
            return error
        return public
