"""HTML of the dashboard's pages: `string.Template` files filled with escaped fragments.

Every value that comes from a row, a verdict or a source is escaped here (`html.escape`) before it
reaches a template; templates hold markup only. Numbers are formatted the way
``static/dashboard.js`` formats the rows it adds live, so a page and its updates look alike.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import quote

from api.dashboard.highlight import highlight
from api.dashboard.problem_facts import ProblemFacts

__all__ = [
    "WorkFigures",
    "attempt_row",
    "fmt_ms",
    "fmt_speedup",
    "job_page",
    "jobs_page",
    "layout",
    "login_page",
    "message_page",
    "problem_page",
]

TEMPLATES = Path(__file__).parent / "templates"
_LIVE_STATES = ("queued", "running")


@cache
def _template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _json_script(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>`` can close it)."""
    text = json.dumps(data, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- numbers (mirrored in dashboard.js) ----------------------------------------------------------


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def fmt_ms(value: Any) -> str:
    v = _finite(value)
    if v is None:
        return "—"
    return f"{v:.3f}" if v >= 1 else f"{v:.3g}"


def fmt_speedup(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"{v:.2f}×"


def fmt_pct(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"{v:.1f}%"


def fmt_count(value: Any) -> str:
    v = _finite(value)
    if v is None:
        return "—"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= limit:
            return f"{v / limit:.3g}{suffix}"
    return f"{v:.0f}"


def fmt_usd(value: Any) -> str:
    v = _finite(value)
    return "—" if v is None else f"${v:.2f}" if v >= 0.01 or v == 0 else f"${v:.4f}"


def fmt_time(value: datetime | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- layout --------------------------------------------------------------------------------------


def layout(*, title: str, body: str, csrf: str = "", owner: str | None = None, scripts: Sequence[str] = ()) -> str:
    """A whole page around ``body`` (already HTML)."""
    if owner is not None:
        nav = (
            f'<a href="/dashboard">jobs</a><a href="/docs">API</a><span class="who">{_e(owner)}</span>'
            f'<form method="post" action="/logout" class="inline"><input type="hidden" name="csrf_token" '
            f'value="{_e(csrf)}"><button type="submit" class="link" id="logout">sign out</button></form>'
        )
    else:
        nav = '<a href="/docs">API</a>'
    return _template("base.html").substitute(
        title=_e(title),
        csrf=_e(csrf),
        nav=nav,
        body=body,
        scripts="".join(f'<script src="/dashboard/static/{_e(s)}" defer></script>' for s in scripts),
    )


def login_page(*, login_csrf: str, next_path: str, error: str | None = None) -> str:
    body = _template("login.html").substitute(
        error=f'<p class="error" id="login-error">{_e(error)}</p>' if error else "",
        login_csrf=_e(login_csrf),
        next=_e(next_path),
    )
    return layout(title="Sign in", body=body)


def message_page(*, heading: str, text: str, owner: str | None = None, csrf: str = "") -> str:
    body = _template("message.html").substitute(heading=_e(heading), text=_e(text))
    return layout(title=heading, body=body, owner=owner, csrf=csrf)


# -- jobs ------------------------------------------------------------------------------------------


def _problem_name(job: Mapping[str, Any]) -> str:
    problem = job["problem"]
    return problem["bundled_id"] or f"posted {problem['sha256'][:10]}"


def _state_badge(state: str) -> str:
    return f'<span class="badge state-{_e(state)}">{_e(state)}</span>'


def jobs_page(
    *, jobs: Sequence[Mapping[str, Any]], owner: str, csrf: str, state: str | None, next_offset: int | None,
    total: int | None,
) -> str:
    """The jobs list; ``jobs`` are `JobPublic` dumps (JSON mode)."""
    rows = []
    for job in jobs:
        best = job.get("best") or {}
        tokens = (job.get("tokens_in") or 0) + (job.get("tokens_out") or 0)
        rows.append(
            f'<tr data-job-id="{job["id"]}"><td><a href="/dashboard/jobs/{job["id"]}">#{job["id"]}</a></td>'
            f"<td>{_e(_problem_name(job))}</td><td>{_e(job['kind'])}</td><td>{_e(job['target'])}</td>"
            f"<td>{_state_badge(job['state'])}</td><td class=\"num\">{job['attempts_count']}</td>"
            f'<td class="num">{fmt_speedup(best.get("speedup_vs_eager"))}</td>'
            f'<td class="num">{fmt_speedup(best.get("speedup_vs_compile"))}</td>'
            f'<td class="num">{fmt_count(tokens)}</td><td class="num">{fmt_usd(job.get("cost_usd"))}</td>'
            f"<td>{fmt_time(job.get('created_at'))}</td></tr>"
        )
    if not rows:
        rows.append('<tr><td colspan="11" class="muted">No jobs yet: <code>kernelloop submit PROBLEM</code>.</td></tr>')
    states = ("all", "queued", "running", "succeeded", "failed", "cancelled")
    filters = "".join(
        f'<a class="chip{" on" if (state or "all") == s else ""}" '
        f'href="/dashboard{"" if s == "all" else "?state=" + s}">{s}</a>'
        for s in states
    )
    pager = ""
    if next_offset is not None:
        query = f"?offset={next_offset}" + (f"&state={quote(state)}" if state else "")
        pager = f'<a href="/dashboard{query}">older jobs →</a>'
    if total is not None:
        pager = f'<span class="muted">{total} jobs</span> ' + pager
    body = _template("jobs.html").substitute(rows="".join(rows), filters=filters, pager=pager)
    return layout(title="Jobs", body=body, owner=owner, csrf=csrf)


def attempt_row(attempt: Mapping[str, Any], *, best_n: int | None) -> str:
    """One row of the attempts table (``AttemptPublic`` dump); dashboard.js builds the same."""
    n = attempt["n"]
    status = str(attempt["status"])
    best = ' class="best"' if best_n == n else ""
    message = str(attempt.get("message") or "")
    return (
        f'<tr id="attempt-{n}" data-n="{n}"{best}><td class="num">{n}</td>'
        f"<td>{_e(attempt.get('trajectory_id') if attempt.get('trajectory_id') is not None else '—')}</td>"
        f"<td>{_e(attempt.get('tool'))}</td>"
        f'<td><span class="badge status-{_e(status)}">{_e(status)}</span></td><td>{_e(attempt.get("stage"))}</td>'
        f'<td class="num">{fmt_ms(attempt.get("median_ms"))}</td>'
        f'<td class="num">{fmt_speedup(attempt.get("speedup_vs_eager"))}</td>'
        f'<td class="num">{fmt_speedup(attempt.get("speedup_vs_compile"))}</td>'
        f'<td class="num">{fmt_pct(attempt.get("pct_of_sol"))}</td>'
        f'<td class="msg" title="{_e(message)}">{_e(message[:160])}</td></tr>'
    )


def _progress(label: str, used: float, limit: float | None, text: str, ident: str) -> str:
    if limit is None or limit <= 0:
        width, limit_text = 0.0, "no limit"
    else:
        width, limit_text = min(100.0, 100.0 * used / limit), ""
    return (
        f'<div class="budget" id="budget-{ident}"><div class="label">{_e(label)} <span class="muted">'
        f'{_e(text)}{_e(limit_text)}</span></div><div class="bar"><div style="width:{width:.1f}%"></div></div></div>'
    )


def budgets_html(job: Mapping[str, Any], *, elapsed_s: float | None) -> str:
    budgets = job.get("budgets") or {}
    tokens = (job.get("tokens_in") or 0) + (job.get("tokens_out") or 0)
    max_tokens = budgets.get("max_tokens")
    max_cost = budgets.get("max_cost_usd")
    wall = budgets.get("wall_clock_s")
    parts = [
        _progress(
            "tokens", tokens, max_tokens,
            f"{fmt_count(tokens)} of {fmt_count(max_tokens)}" if max_tokens else fmt_count(tokens), "tokens",
        ),
        _progress(
            "cost", job.get("cost_usd") or 0.0, max_cost,
            f"{fmt_usd(job.get('cost_usd'))} of {fmt_usd(max_cost)}" if max_cost else fmt_usd(job.get("cost_usd")),
            "cost",
        ),
    ]
    if elapsed_s is not None:
        parts.append(
            _progress(
                "wall clock", elapsed_s, wall,
                f"{elapsed_s:.0f} s of {wall:.0f} s" if wall else f"{elapsed_s:.0f} s", "wall",
            )
        )
    return "".join(parts)


def _link_to_problem(job: Mapping[str, Any]) -> str:
    problem = job["problem"]
    if problem["bundled_id"]:
        href = f"/dashboard/problems/{quote(problem['bundled_id'])}"
    else:
        href = f"/dashboard/jobs/{job['id']}/problem"
    return f'<a href="{href}" id="problem-link">{_e(_problem_name(job))}</a>'


def best_label(best: Mapping[str, Any] | None) -> str:
    if not best:
        return "none verified yet"
    return f"attempt {best['n']} · {fmt_ms(best.get('median_ms'))} ms · {fmt_speedup(best.get('speedup_vs_eager'))}"


def job_page(
    *,
    job: Mapping[str, Any],
    attempts: Sequence[Mapping[str, Any]],
    best_source: str | None,
    last_event_id: int,
    compile_line: float | None,
    elapsed_s: float | None,
    owner: str,
    csrf: str,
) -> str:
    """The live job page; ``job`` a `JobPublic` dump, ``attempts`` `AttemptPublic` dumps."""
    best = job.get("best")
    best_n = best["n"] if best else None
    data = {
        "job_id": job["id"],
        "state": job["state"],
        "last_event_id": last_event_id,
        "best_n": best_n,
        "compile_line": compile_line,
        "attempts": [
            {k: a.get(k) for k in ("n", "status", "speedup_vs_eager", "speedup_vs_compile", "median_ms", "tool")}
            for a in attempts
        ],
    }
    live = job["state"] in _LIVE_STATES
    cancel = (
        f'<button type="button" class="button danger" id="cancel-job" '
        f'data-url="/jobs/{job["id"]}/cancel">Cancel</button>'
        if live
        else ""
    )
    llm = f"LLM {job['llm_profile']} ({job['llm_model']})" if job.get("llm_profile") else "no LLM"
    body = _template("job.html").substitute(
        job_id=job["id"],
        state=_e(job["state"]),
        download_disabled="" if best else " disabled",
        cancel_button=cancel,
        problem_link=_link_to_problem(job),
        target=_e(job["target"]),
        kind=_e(job["kind"]),
        llm=_e(llm),
        created=fmt_time(job.get("created_at")),
        error=f'<p class="error" id="job-error">{_e(job["error"])}</p>' if job.get("error") else "",
        best_eager=fmt_speedup((best or {}).get("speedup_vs_eager")),
        best_compile=fmt_speedup((best or {}).get("speedup_vs_compile")),
        best_ms=fmt_ms((best or {}).get("median_ms")) + (" ms" if best and best.get("median_ms") else ""),
        attempts_count=job["attempts_count"],
        budgets=budgets_html(job, elapsed_s=elapsed_s),
        rows="".join(attempt_row(a, best_n=best_n) for a in attempts),
        best_label=_e(best_label(best)),
        best_source=highlight(best_source) if best_source else '<span class="muted">No verified kernel yet.</span>',
        data=_json_script(data),
    )
    return layout(title=f"Job {job['id']}", body=body, owner=owner, csrf=csrf, scripts=("dashboard.js",))


# -- problems --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkFigures:
    """What the referee measured about a problem on one device (from a stored verdict)."""

    target: str
    device: str
    flops: float | None
    min_bytes: float | None
    sol_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    job_id: int


def _shape(shape: Sequence[Any] | None) -> str:
    return "—" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def problem_page(
    *,
    name: str,
    description: str,
    source: str,
    mode: str,
    policy: str,
    atol: float | None,
    rtol: float | None,
    sha256: str,
    facts: ProblemFacts,
    work: Iterable[WorkFigures],
    job_ids: Sequence[int],
    owner: str,
    csrf: str,
) -> str:
    inputs = "".join(
        f"<tr><td>{i}</td><td>{_e(fact.dtype or '—')}</td><td class=\"mono\">{_shape(fact.shape)}</td>"
        f'<td class="mono">{_shape(fact.cpu_shape)}</td><td class="mono">{_e(fact.expression)}</td></tr>'
        for i, fact in enumerate(facts.inputs)
    ) or '<tr><td colspan="5" class="muted">get_inputs() could not be read statically.</td></tr>'
    work_rows = []
    for w in work:
        intensity = w.flops / w.min_bytes if w.flops and w.min_bytes else None
        work_rows.append(
            f"<tr><td>{_e(w.target)}</td><td>{_e(w.device)}</td><td class=\"num\">{fmt_count(w.flops)}</td>"
            f'<td class="num">{fmt_count(w.min_bytes)}B</td>'
            f'<td class="num">{"—" if intensity is None else f"{intensity:.3g} FLOP/B"}</td>'
            f'<td class="num">{fmt_ms(w.sol_ms)}</td><td class="num">{fmt_ms(w.eager_ms)}</td>'
            f'<td class="num">{fmt_ms(w.compile_ms)}</td>'
            f'<td><a href="/dashboard/jobs/{w.job_id}">job {w.job_id}</a></td></tr>'
        )
    if not work_rows:
        work_rows.append(
            '<tr><td colspan="9" class="muted">No measurements yet: FLOPs and bytes come from the referee\'s '
            "verdicts, after a job on this problem has evaluated an attempt.</td></tr>"
        )
    names = sorted(set(facts.constants) | set(facts.cpu_constants))
    sizes = "".join(
        f'<tr><td class="mono">{_e(n)}</td><td class="mono">{_e(facts.constants.get(n, "—"))}</td>'
        f'<td class="mono{" changed" if facts.cpu_constants.get(n) != facts.constants.get(n) else ""}">'
        f"{_e(facts.cpu_constants.get(n, '—'))}</td></tr>"
        for n in names
    ) or '<tr><td colspan="3" class="muted">No module constants.</td></tr>'
    tolerance = "per dtype" if atol is None and rtol is None else f"atol {atol} · rtol {rtol}"
    actions = " ".join(f'<a class="chip" href="/dashboard/jobs/{j}">job {j}</a>' for j in job_ids[:8])
    body = _template("problem.html").substitute(
        name=_e(name),
        actions=actions,
        description=_e(description or ""),
        mode=_e(mode),
        policy=_e(policy),
        tolerance=_e(tolerance),
        sha=_e(sha256[:16]) + "…",
        inputs=inputs,
        init_inputs=_e(facts.init_inputs or "—"),
        work="".join(work_rows),
        sizes=sizes,
        source=highlight(source),
    )
    return layout(title=name, body=body, owner=owner, csrf=csrf)
