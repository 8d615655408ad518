"""A person's data, taken away (DESIGN §15): ``GET /api/spark/me/export`` and a parent's
export of a dependent's, a zip streamed as it is made.

``service.Exports`` claims the export in the person's ledger (``limit``: one per ten
minutes, decided by the store) and streams the zip; ``contents`` says what it holds and
reads it from the stores a page, a conversation, a file piece at a time;
``conversations`` writes one conversation, archive merged, as JSON and Markdown.
"""
