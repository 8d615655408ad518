"""Erasing an account (DESIGN §15): the request (``service.py``), the task's steps in
pages (``steps.py``) and the marking of the former member's messages (``former.py``)."""
