"""The composition root: the ``gateway`` CLI, settings loading, and serving."""
