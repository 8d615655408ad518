"""What an operator can see of Spark AI Agent at work (docs/observability.md).

* ``setup``: each process's tracer and meter providers, chosen from the environment
  (in memory in tests, OTLP to make dev's local viewer, Cloud Trace and Cloud
  Monitoring in a deployment);
* ``content``: the guard that keeps what people said out of every exported span;
* ``metrics``: every instrument, and the small API the code records through;
* ``propagation``: a trace's context carried by a Cloud Task to another process.
"""
