"""Who is calling: Firebase ID tokens behind a small interface."""
