"""The agent's key pair (Ed25519): made once in its state directory, the public half registered with the
server, every result body signed with the private half. The server verifies with `signature_valid`."""

import base64
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_FILE = "agent-key.pem"
SIGNATURE_HEADER = "X-Calculet-Signature"


def key_load_or_create(state_dir: Path) -> Ed25519PrivateKey:
    """The agent's private key, made on its first start (readable by its own user only)."""
    path = state_dir / KEY_FILE
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path} does not hold an Ed25519 key")
        return key
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    state_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{KEY_FILE}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    os.replace(partial, path)
    return key


def public_key_text(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def sign(key: Ed25519PrivateKey, body: bytes) -> str:
    return base64.b64encode(key.sign(body)).decode()


def public_key_valid(public_key: str) -> bool:
    """Whether `public_key` is the base64 of an Ed25519 public key's 32 bytes."""
    try:
        Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True))
    except ValueError:
        return False
    return True


def signature_valid(public_key: str, body: bytes, signature: str) -> bool:
    """Whether `signature` (base64) is the registered key's over exactly `body`."""
    try:
        verifier = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True))
        verifier.verify(base64.b64decode(signature, validate=True), body)
    except (InvalidSignature, ValueError):
        return False
    return True
