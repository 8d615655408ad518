"""The HTTP edge of the ``api`` function: routing, auth, bodies, errors, SSE."""
