"""Sending a message: refused early what would be refused anyway, admitted within the
user's limits (``claims``, ``queued``), opened as a run (``opening``, ``draft``), with
its first model request started while that is written (``head_start``)."""
