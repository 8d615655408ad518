"""Lesson documents: their XML grammar (``grammar``) and the text operations the
document tools perform on them (``text``). Pure: no I/O here."""
