"""What the tests share: builders, fakes, and helpers, by subject. Test modules import from here
only, never from another test module or a conftest; conftests hold fixtures alone.

- `paths`: ``REPO``, the checkout's root (stdlib only).
- `databases`: throwaway SQLite files, PostgreSQL databases and Redis (a pytest plugin that
  tests/conftest.py registers: ``db_url``, ``factory``, ``session``, ``redis_url`` …).
- `store`: `Builders`, rows and verdicts on a session.
- `api`: problem and candidate sources, `RecordingDispatcher`, API keys (`Key`), settings, job bodies,
  verdicts, and `serve` (an app under uvicorn on a free port).
- `dashboard`: a live API on SQLite (`live_service`), jobs, attempts and recorded agent sessions
  written into its store, `login`, and the headless Chromium the browser tests drive.
- `cli`: the ``kernelloop`` commands run as a user runs them, and a real ``kernelloop up``.
- `agents`: the agent's seed problems, scripted LLM profile, fakes and job specs.
- `doubles`: the agent's test doubles: an in-memory recorder, a fake evaluator, and fake
  Chat Completions servers modelled on the real ones (out of the shipped `agent` package).
- `worker`: the worker's jobs, settings, `ScriptedReferee`, a claimed job run in-process, and
  worker subprocesses; `fake_agent` is the scripted agent they run, `celery_entry` and
  `embedded_entry` the worker processes they start (``python -m tests.support.embedded_entry``).
- `tenancy`: the tenancy tests' `Service` and the honest parts of their problems.
- `integrity`: the adversarial suite's referee options.
- `gpu`: the GPU tests' figures (stdlib only: a GPU host has torch and pytest alone).
- `network`: free ports, health checks; `processes`: ``/proc`` scans; `waiting`: `wait_for`
  (stdlib only, all three).
"""
