"""HTML of the dashboard's analysis pages: the leaderboard, two attempts compared, and the job
page's charts alone (what the live page fetches again as attempts and messages arrive). They
share `pages`' templates environment, layout (``base.html``) and number filters."""

from __future__ import annotations

from collections.abc import Sequence

from api.dashboard.charts import JobCharts
from api.dashboard.compare import Comparison
from api.dashboard.leaderboard import LeaderGroup
from api.dashboard.pages import Chrome, JobFilters, problem_name, render
from api.schemas import JobPublic
from display import problem_label
from display.timings import TimeToVerdict
from store import JobProblem, Target

__all__ = ["compare_page", "job_charts_fragment", "job_timings_fragment", "leaderboard_page"]


def leaderboard_page(*, groups: Sequence[LeaderGroup], problems: Sequence[JobProblem], filters: JobFilters,
                     owner: str, csrf: str, sees_every_job: bool) -> str:
    """Per problem and target, the jobs' best kernels ranked, with each model's best."""
    choices = [(p.bundled_id or p.sha256, problem_label(p.bundled_id, p.sha256)) for p in problems]
    return render("leaderboard.html", title="Leaderboard", chrome=Chrome(owner, csrf), groups=groups,
                  problem_choices=choices, targets=[t.value for t in Target], filters=filters,
                  sees_every_job=sees_every_job)


def compare_page(*, job: JobPublic, comparison: Comparison, owner: str, csrf: str) -> str:
    """Two attempts of a job: figures side by side, then the diff of their sources."""
    return render("compare.html", title=f"Job {job.id} · attempts {comparison.a_n} and {comparison.b_n}",
                  chrome=Chrome(owner, csrf), job=job, c=comparison, problem_name=problem_name(job))


def job_charts_fragment(*, charts: JobCharts) -> str:
    return render("job_charts.html", charts=charts)


def job_timings_fragment(*, job: JobPublic, timings: TimeToVerdict) -> str:
    return render("job_timings.html", job=job, timings=timings)
