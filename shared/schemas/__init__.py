"""Pydantic models at the boundaries: Firestore documents and HTTP bodies."""
