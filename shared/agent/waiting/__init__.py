"""Waiting on people and tasks: who a call waits on (``whose``), a result recorded
(``results``, ``questions``, ``task_calls``) and the one path on after it
(``continuation``), for tasks' results and people's answers alike (``people``)."""
