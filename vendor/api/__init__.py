"""The REST API under /api/v1/: one thin view per operation, calling selectors and services."""
