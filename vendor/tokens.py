"""API token keys: generated once, stored only as a SHA-256."""

import hashlib
import secrets

KEY_PREFIX = "clt_"


def token_generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
