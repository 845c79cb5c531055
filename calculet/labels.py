"""Translated labels of stored values, for pages and exports. Each app registers its vocabulary here when
it is ready, from the same lists its models take their choices from, so a label is written once."""

from collections.abc import Callable, Iterable

from django.utils.translation import get_language

_LABELS: dict[str, dict[str, str]] = {}
_PHRASES: dict[str, Callable[[str], str]] = {}


def register(kind: str, pairs: Iterable[tuple[str, str]]) -> None:
    _LABELS[kind] = dict(pairs)


def extend(kind: str, pairs: Iterable[tuple[str, str]]) -> None:
    """Add to a vocabulary that several apps share (the audit log's actions)."""
    _LABELS.setdefault(kind, {}).update(pairs)


def label(kind: str, value) -> str:
    """The translated label of a stored value, or the value itself when it has none."""
    return _LABELS.get(kind, {}).get(value, value)


def values(kind: str) -> list[str]:
    """The stored values a vocabulary labels, in the order the apps registered them."""
    return list(_LABELS[kind])


def choices(kind: str) -> list[tuple[str, str]]:
    """(value, label) pairs, translated once into the active language."""
    return [(value, str(text)) for value, text in _LABELS[kind].items()]


def register_phrases(kind: str, translate: Callable[[str], str]) -> None:
    """Stored sentences an app writes in English (a run's summary), shown through `translate`."""
    _PHRASES[kind] = translate


def phrase(kind: str, text: str) -> str:
    """A stored sentence in the active language, or as it is when no app translates its kind."""
    return _PHRASES[kind](text) if kind in _PHRASES and text else text


def listed(items: Iterable) -> str:
    """Items joined into a sentence the way the active language lists them: Chinese with its enumeration
    comma (、), English with a comma and a space."""
    separator = "、" if (get_language() or "").startswith("zh") else ", "
    return separator.join(str(item) for item in items)
