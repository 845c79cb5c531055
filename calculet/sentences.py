"""Sentences kept as a template and its parameters, so each reader sees them in their own language.

A service that refuses a request or explains a decision writes an English template marked with
`gettext_noop` and the values that fill it. The API and the stored records keep the English sentence as
they always have (`english`); a page renders the same sentence in the reader's language when it is shown
(`text`), so one record reads in one language for every reader, whoever caused it. A parameter that is a
stored code (a state, a stage, a target kind) is given as `Labelled` and shown by its label from
`calculet.labels`, in English too; the code itself stays in the record's parameters. A parameter may be a
stored sentence itself, rendered in the same language, or a list, joined as the reader's language lists.
"""

from dataclasses import dataclass

from django.utils.translation import gettext, override

from calculet import labels


@dataclass(frozen=True)
class Labelled:
    """A code shown by its label in the reader's language; `value` may be a list of codes of one kind."""

    kind: str
    value: str | list[str]


def sentence(template: str, **params) -> dict:
    """The stored form of a sentence: its template, its plain parameters, and which of them are codes."""
    return {
        "template": template,
        "params": {name: value.value if isinstance(value, Labelled) else value for name, value in params.items()},
        "labelled": {name: value.kind for name, value in params.items() if isinstance(value, Labelled)},
    }


def _labels(kind: str, value) -> str:
    if isinstance(value, list):
        return labels.listed(labels.label(kind, item) for item in value)
    return str(labels.label(kind, value))


def english(stored: dict) -> str:
    """The sentence in English: what the API and the audit log say."""
    with override("en"):
        return text(stored)


def text(stored: dict) -> str:
    """The sentence in the active language, codes shown by their labels."""
    kinds = stored.get("labelled", {})
    params = {name: _shown(value, kinds.get(name)) for name, value in stored["params"].items()}
    return gettext(stored["template"]) % params


def reason_text(reason: dict) -> str:
    """A stored reason (`{"code", "message", ...}`) in the active language; one stored before reasons kept their
    template is shown as its English message."""
    return text(reason) if "template" in reason else reason.get("message", "")


def _shown(value, kind: str | None):
    if kind is not None:
        return _labels(kind, value)
    if isinstance(value, dict) and "template" in value:
        return text(value)
    if isinstance(value, list):
        return labels.listed(value)
    return value
