"""Translated labels of stored values, for pages and exports. Each app registers its vocabulary here when
it is ready, from the same lists its models take their choices from, so a label is written once."""

from collections.abc import Iterable

_LABELS: dict[str, dict[str, str]] = {}


def register(kind: str, pairs: Iterable[tuple[str, str]]) -> None:
    _LABELS[kind] = dict(pairs)


def extend(kind: str, pairs: Iterable[tuple[str, str]]) -> None:
    """Add to a vocabulary that several apps share (the audit log's actions)."""
    _LABELS.setdefault(kind, {}).update(pairs)


def label(kind: str, value) -> str:
    """The translated label of a stored value, or the value itself when it has none."""
    return _LABELS.get(kind, {}).get(value, value)


def choices(kind: str) -> list[tuple[str, str]]:
    """(value, label) pairs, translated once into the active language."""
    return [(value, str(text)) for value, text in _LABELS[kind].items()]
