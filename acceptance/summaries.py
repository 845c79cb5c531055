"""Run summaries in the reader's language. A run stores its summary in English, as the API and webhooks give
it; the sentences calculet itself writes are recognised here and shown translated, with the runner's own words
(check names, details, error messages) kept as the runner wrote them. No ORM here."""

import re
from collections.abc import Callable

from django.utils.translation import gettext, gettext_noop, ngettext

from calculet import labels

_MORE = re.compile(r"^(?P<detail>.*) \(and (?P<more>\d+) more\)$")


def _with_more(detail: str) -> str:
    """ "a; b (and 3 more)" with its "and 3 more" translated."""
    match = _MORE.match(detail)
    if match is None:
        return detail
    more = int(match["more"])
    return match["detail"] + " " + ngettext("(and %(count)s more)", "(and %(count)s more)", more) % {"count": more}


def _checks_failed(match: re.Match) -> str:
    count = int(match["count"])
    text = ngettext("%(count)s check failed", "%(count)s checks failed", count) % {"count": count}
    return f"{text} — {_with_more(match['detail'])}"


# The findings of the in-process stages (services/checks.py) that a PM meets most, in the order tried.
FINDINGS: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (
        re.compile(r"^Section 13 element missing: (?P<element>.+)\.$"),
        lambda match: gettext("Section 13 element missing: %(element)s.") % {"element": gettext(match["element"])},
    ),
    (
        re.compile(r"^No calbin package among the executable assets\.$"),
        lambda _match: gettext("No calbin package among the executable assets."),
    ),
    (
        re.compile(r"^More than one calbin package: an answer names one\.$"),
        lambda _match: gettext("More than one calbin package: an answer names one."),
    ),
    (
        re.compile(r"^(?P<artifact>.+) is (?P<state>[a-z_]+), not verified\.$"),
        lambda match: (
            gettext("%(artifact)s is %(state)s, not verified.")
            % {"artifact": match["artifact"], "state": labels.label("artifact_state", match["state"])}
        ),
    ),
]


def _finding(message: str) -> str:
    for pattern, translate in FINDINGS:
        match = pattern.match(message)
        if match is not None:
            return translate(match)
    return message


def _probes_failed(match: re.Match) -> str:
    count = int(match["count"])
    text = ngettext("%(count)s probe failed", "%(count)s probes failed", count) % {"count": count}
    return f"{text} — {match['detail']}"


def _findings(match: re.Match) -> str:
    count = int(match["count"])
    text = ngettext("%(count)s finding", "%(count)s findings", count) % {"count": count}
    detail = _MORE.match(match["detail"])
    listed = detail["detail"] if detail else match["detail"]
    translated = "; ".join(_finding(message) for message in listed.split("; "))
    return f"{text}: {_with_more(translated + (match['detail'][len(listed) :] if detail else ''))}"


def _artifacts_verified(match: re.Match) -> str:
    count = int(match["count"])
    return ngettext(
        "%(count)s artifact verified for %(target)s", "%(count)s artifacts verified for %(target)s", count
    ) % {"count": count, "target": match["target"]}


def _lost_workers(match: re.Match) -> str:
    return gettext(
        "infrastructure error: the run was started %(count)s times and each time its worker was lost before a "
        "verdict; it is not retried again"
    ) % {"count": match["count"]}


def _prefixed(message: str) -> Callable[[re.Match], str]:
    return lambda match: gettext(message) % {"detail": match["detail"]}


# The sentences acceptance/protocol.py, services/checks.py and services/runs write, in the order tried.
SENTENCES: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"^all checks passed$"), lambda _match: gettext("all checks passed")),
    (re.compile(r"^(?P<count>\d+) check\(s\) failed — (?P<detail>.*)$", re.S), _checks_failed),
    (re.compile(r"^(?P<count>\d+) probe\(s\) failed — (?P<detail>.*)$", re.S), _probes_failed),
    (
        re.compile(r"^the runner reported a failure without naming a check$"),
        lambda _match: gettext("the runner reported a failure without naming a check"),
    ),
    (re.compile(r"^(?P<count>\d+) finding\(s\): (?P<detail>.*)$", re.S), _findings),
    (
        re.compile(r"^all six elements of section 13 are present$"),
        lambda _match: gettext("all six elements of section 13 are present"),
    ),
    (re.compile(r"^(?P<count>\d+) artifact\(s\) verified for (?P<target>\S+)$"), _artifacts_verified),
    (
        re.compile(r"^the runner refused the job \(exit 2\): (?P<detail>.*)$", re.S),
        _prefixed(gettext_noop("the runner refused the job (exit 2): %(detail)s")),
    ),
    (
        re.compile(r"^runner protocol violated: (?P<detail>.*)$", re.S),
        _prefixed(gettext_noop("runner protocol violated: %(detail)s")),
    ),
    (
        re.compile(r"^internal error in the worker: (?P<detail>.*)$", re.S),
        _prefixed(gettext_noop("internal error in the worker: %(detail)s")),
    ),
    (
        re.compile(r"^the runner could not be started: (?P<detail>.*)$", re.S),
        _prefixed(gettext_noop("the runner could not be started: %(detail)s")),
    ),
    (
        re.compile(
            r"^infrastructure error: the run was started (?P<count>\d+) times and each time its worker was lost "
            r"before a verdict; it is not retried again$"
        ),
        _lost_workers,
    ),
]


# Why a target is not healthy (selectors.target_health_state), stored in English as a run's summary is.
HEALTH_REASONS: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (
        re.compile(r"^no hardware runner command is registered: the target runs nothing$"),
        lambda _match: gettext("no hardware runner command is registered: the target runs nothing"),
    ),
    (
        re.compile(r"^no worker has reported for this target yet$"),
        lambda _match: gettext("no worker has reported for this target yet"),
    ),
    (
        re.compile(r"^no worker heartbeat for (?P<seconds>\d+) s$"),
        lambda match: gettext("no worker heartbeat for %(seconds)s s") % {"seconds": match["seconds"]},
    ),
    (
        re.compile(r"^the last health check failed \(run (?P<run>\d+)\)$"),
        lambda match: gettext("the last health check failed (run %(run)s)") % {"run": match["run"]},
    ),
    (re.compile(r"^the last health check failed$"), lambda _match: gettext("the last health check failed")),
]


def _translated(sentences: list[tuple[re.Pattern, Callable[[re.Match], str]]], text: str) -> str:
    for pattern, translate in sentences:
        match = pattern.match(text)
        if match is not None:
            return translate(match)
    return text


def run_summary(reason: str) -> str:
    """`reason` in the active language when calculet wrote it; otherwise as it is."""
    return _translated(SENTENCES, reason)


def health_reason(reason: str) -> str:
    """A target's health reason in the active language."""
    return _translated(HEALTH_REASONS, reason)
