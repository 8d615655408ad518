"""Where tasks are enqueued: the ``TaskQueue`` interface and its adapters, and the
``TaskPort`` through which the agent and the tasks function hand work to Cloud Tasks."""
