"""The dashboard's pieces: browser sessions (`session`) and what every page route shares
(`browser`: the signed-in key, the pages' headers, the not-found page), what the pages show as
frozen values (`views`: timeline, chart series, events, an attempt's verdict as tables and a plot;
`profiles`: an attempt's profile table; `charts`: a job's roofline and usage charts laid out as SVG
primitives; `leaderboard`: jobs ranked per problem; `compare`: two attempts side by side), their
rendering through Jinja2 templates with autoescape (`pages`, `insight_pages`, ``templates/``: one
template per page on the shared ``base.html``), Pygments highlighting and diffs (`highlight`),
static facts about problem sources (`problem_facts`) and the page script and stylesheet
(``static/``). Its routes are in `api.routes.dashboard` and `api.routes.dashboard_insights`; a new
page adds a route module of its own on `browser`'s dependency and a template on ``base.html``."""
