"""The dashboard's pieces: browser sessions (`session`), page rendering (`pages`, ``templates/``),
a syntax highlighter (`highlight`), static facts about problem sources (`problem_facts`) and the
page script and stylesheet (``static/``). Its routes are in `api.routes.dashboard`."""
