"""`rag eval`: a sub-app of one subcommand per experiment of the lab
(`rag_cli.lab`), `run` the default so that `rag eval --qrels Q --run R`
still works.

- `app`: the group (`DefaultGroup`), `rag eval tune`, the options the
  subcommands share and `show` (a report as a table or JSON, then its
  Markdown summary and plots);
- `retrieval`: run, compare, funnel, perturb, tune fusion;
- `answers`: answers (and the LLM judge), tune refusal, make-unanswerable;
- `online`: the served queries (`rag serve --log`).
"""

from rag_cli.cli.evaluation import app, retrieval, answers, online  # noqa: F401  (register the subcommands)
