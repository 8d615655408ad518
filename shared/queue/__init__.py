"""Where tasks are enqueued: the ``TaskQueue`` interface and its adapters."""
