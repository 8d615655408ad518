"""Streaming and replay: the events a run emits (``events``), reduced into its message
(``transcript``), framed for the wire (``sse``, ``uistream``), and given back from the
stored message to a client that reconnects (``replay``, ``resume``)."""
