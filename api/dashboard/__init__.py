"""The dashboard's pieces: browser sessions (`session`), what the pages show (`views`: timeline,
chart series, events, an attempt's verdict as tables and a plot), their rendering through Jinja2
templates with autoescape (`pages`, ``templates/``), Pygments highlighting and diffs
(`highlight`), static facts about problem sources (`problem_facts`) and the page script and
stylesheet (``static/``). Its routes are in `api.routes.dashboard`."""
