"""A run's life: the model loop (``loop``, ``calls``), its persistence (``throttle``,
``finish``, ``runs``: the pure changes it makes), its place among its user's runs
(``slot``), what keeps it from being lost (``watch``, ``supervision``), what it is given
(``deps``) and the work that outlives a request (``background``)."""
