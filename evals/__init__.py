"""The agent's evaluation suite (``make eval``, docs/evals.md), on Pydantic Evals.

``datasets/*.yaml`` hold the cases (five sets: teacher, learner, family, safety,
conversation); ``cases.py`` what a case says; ``world.py`` builds the real agent in
process for one case (the egress, tools and stores, on the in-package fakes) and runs its
turn; ``scorers.py`` the evaluators; ``run.py`` a whole run (its budget, its results file
and its comparison with the last kept one); ``settings.py`` what a run is told.
"""
