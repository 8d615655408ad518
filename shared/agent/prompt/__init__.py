"""What the model is sent: a conversation's latest messages, normalised (``history``),
and its attachments as the model may see them (``files``)."""
