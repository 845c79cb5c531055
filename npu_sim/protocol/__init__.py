"""The runner protocol's job (schema 1 and 2) and what a running job shares (docs/runner-protocol.md)."""
