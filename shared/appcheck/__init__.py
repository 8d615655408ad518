"""App Check: that a call to the api comes from our own app (docs/observability.md).

* ``verifier``: an ``X-Firebase-AppCheck`` token's signature and claims, against App
  Check's published key set;
* ``replays``: the record of limited-use tokens already spent, one write with a
  precondition each, so a token works once across every process;
* ``guard``: what the edge calls per request, in the mode ``SPARK_APP_CHECK`` sets
  (``off``, ``monitor``, ``enforce``), and the errors a refusal raises.
"""
