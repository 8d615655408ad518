"""Voice: live-audio sessions and spoken replies (DESIGN §9)."""
