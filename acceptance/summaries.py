"""Run summaries in the reader's language. A run stores its summary in English, as the API and webhooks give
it; the sentences calculet itself writes are recognised here and shown translated, with the runner's own words
(check names, details, error messages) kept as the runner wrote them. No ORM here."""

import re
from collections.abc import Callable

from django.utils.translation import gettext, gettext_noop, ngettext, override

from acceptance import judging, stages
from calculet import labels, sentences

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


# The fields of the findings a golden stage's features add after the stage's own (judging.probe_judgements):
# the s8 judgement's one finding, and the sampling judgement's, which its reason says after one "sampling: ";
# and the runner stage's failed minimal example, said after its judgement's.
S8_FIELD = "measurements.vs_float"
SAMPLING_FIELD = "measurements.sampling"
SAID_ALONE = (S8_FIELD, judging.MINIMAL_EXAMPLE_FIELD)


def _said(value) -> str:
    """A parameter of a stored sentence in the active language: a sentence itself, or plain words as they are."""
    return sentences.text(value) if isinstance(value, dict) and "template" in value else str(value)


def _parts(said: list[dict], claim: dict | None, count: int) -> tuple[list[tuple[str, str]], list[dict]] | None:
    """What a judgement's reason says, part by part as (English, active language), from its templated findings
    in their order: the stage's own (its first `count`, led by the claim of a pass when there is one), then each
    feature's; and the stage's findings it leaves unsaid. None when the findings cannot compose a reason."""
    groups: list[tuple[str, list[dict]]] = []
    for item in said:
        field = item.get("field", "")
        kind = field if field in (SAMPLING_FIELD, *SAID_ALONE) else "stage"
        if groups and groups[-1][0] == kind:
            groups[-1][1].append(item)
        else:
            groups.append((kind, [item]))
    parts: list[tuple[str, str]] = []
    unsaid: list[dict] = []
    for index, (kind, items) in enumerate(groups):
        if kind == SAMPLING_FIELD:
            if any(item["template"] != judging.SAMPLING for item in items):
                return None
            english = "; ".join(item["message"].removeprefix("sampling: ") for item in items)
            text = "; ".join(_said(item["params"]["problem"]) for item in items)
            parts.append((judging.SAMPLING % {"problem": english}, gettext(judging.SAMPLING) % {"problem": text}))
        elif kind in SAID_ALONE:
            parts += [(item["message"], sentences.text(item)) for item in items]
        else:
            if index != 0:  # the stage's own findings come first
                return None
            english = "; ".join(item["message"] for item in items[:count])
            text = "; ".join(sentences.text(item) for item in items[:count])
            if claim is not None:
                english = judging.CLAIM_UNSUPPORTED % {"detail": english}
                text = gettext(judging.CLAIM_UNSUPPORTED) % {"detail": text}
            parts.append((english, text))
            unsaid = items[count:]
    if claim is not None and (not groups or groups[0][0] != "stage" or claim.get("message") != parts[0][0]):
        return None
    return parts, unsaid


# calculet-agent's note after a runner stage's reason: "<reason>; the minimal example was not run (…)".
_NOTE_BEFORE, _NOTE_AFTER = judging.EXAMPLE_NOT_RUN_AFTER.split("%(reason)s")
_EXAMPLE_NOT_RUN_AFTER = re.compile(
    re.escape(_NOTE_BEFORE) + "(?P<reason>.+)" + re.escape(_NOTE_AFTER % {"why": judging.EXAMPLE_NOT_RUN}) + "$",
    re.S,
)


def _example_not_run(reason: str) -> tuple[str, Callable[[str], str]]:
    """A runner stage's reason without the note calculet-agent says after it (its minimal example not run), and
    what says a reason with the note again in the active language."""
    match = _EXAMPLE_NOT_RUN_AFTER.match(reason)
    if match is None:
        return reason, lambda text: text
    return match[
        "reason"
    ], lambda text: gettext(judging.EXAMPLE_NOT_RUN_AFTER) % {"reason": text, "why": gettext(judging.EXAMPLE_NOT_RUN)}


def judged_reason(reason: str, findings: list) -> tuple[str, list[dict]] | None:
    """`_judged_reason`, and calculet-agent's note after it that the minimal example was not run."""
    reason, with_note = _example_not_run(reason)
    composed = _judged_reason(reason, findings)
    return None if composed is None else (with_note(composed[0]), composed[1])


def _judged_reason(reason: str, findings: list) -> tuple[str, list[dict]] | None:
    """A run reason that calculet's judging composed from the run's findings, said in the active language,
    and the templated findings it does not already say. The reason may begin with the runner's own (a runner
    that reported a failure: "2 check(s) failed — …; " and then calculet's), which `run_summary` says, its words
    quoted as they are. None when the stored reason is not what the findings compose to in English (a
    calculet sentence without its template, a reason stored before findings kept theirs): such a reason is
    shown as stored, never rebuilt."""
    if not all(isinstance(item, dict) for item in findings):
        return None
    claims = [item for item in findings if item.get("code") == "claim_unsupported"]
    said = [item for item in findings if "template" in item and item not in claims]
    if not said or len(claims) > 1:
        return None
    if any(sentences.english(item) != item.get("message") for item in said):
        return None
    claim = claims[0] if claims else None
    for count in sorted({len(said), min(len(said), judging.JUDGED_IN_REASON)}):
        composed = _parts(said, claim, count)
        if composed is None:
            return None
        parts, unsaid = composed
        english = "; ".join(part for part, _text in parts)
        text = "; ".join(text for _english, text in parts)
        if reason == english:
            return text, unsaid
        # A runner's own reason before calculet's: never with a claim of a pass, which only a passing runner makes.
        if claim is None and reason.endswith("; " + english):
            return run_summary(reason[: -len("; " + english)]) + "; " + text, unsaid
    return None


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


NO_DEVICE = gettext_noop("the runner reported no device identity and versions")  # protocol.device_findings
_VERSION_MISMATCH = re.compile(
    r"the device reports (?P<key>calrt|driver|firmware|chip) (?P<reported>.*?); the target is registered with "
    r"(?P<registered>.*?)(?=; the device reports |$)",
    re.S,
)


# What protocol.device_findings says for a version the device did not report.
NOT_REPORTED = gettext_noop("(none)")


def _versions(mismatch: re.Match) -> dict:
    """A version mismatch's parameters, a version the device did not report said in the active language."""
    said = mismatch.groupdict()
    return said | {"reported": gettext(NOT_REPORTED) if said["reported"] == NOT_REPORTED else said["reported"]}


def _not_the_target(match: re.Match) -> str:
    """ "the device is not the target as registered: " and what differs (protocol.device_findings), each said in
    the active language with the versions as they are; as stored when it is not only those sentences."""
    detail = match["detail"]
    if detail == NO_DEVICE:
        said = gettext(NO_DEVICE)
    else:
        found = list(_VERSION_MISMATCH.finditer(detail))
        if "; ".join(version.group(0) for version in found) != detail:
            return match.group(0)
        template = gettext("the device reports %(key)s %(reported)s; the target is registered with %(registered)s")
        said = "; ".join(template % _versions(version) for version in found)
    return gettext("the device is not the target as registered: %(detail)s") % {"detail": said}


# Why the sandbox ended a runner (calculet_agent.sandbox._explain, the same words whether the server or an agent ran
# it), and why an agent could not start one (calculet_agent.cli): each may be followed by ": " and the last line
# the runner wrote to stderr (protocol.runner_verdict), kept as written.
SANDBOX_REASONS = [
    gettext_noop("wall-time limit of %(seconds)s s exceeded; the runner was killed"),
    gettext_noop("output limit of %(bytes)s bytes exceeded; the runner was killed"),
    gettext_noop("working directory grew past %(bytes)s bytes; the runner was killed"),
    gettext_noop("the run was cancelled or taken over; the runner was killed"),
    gettext_noop("memory limit of %(mib)s MiB exceeded by the runner's processes together; they were killed"),
    gettext_noop("CPU-time limit of %(seconds)s s exceeded"),
    gettext_noop("file-size limit of %(bytes)s bytes exceeded"),
    gettext_noop("network access denied in the sandbox (%(detail)s)"),
    gettext_noop("memory limit of %(mib)s MiB exceeded"),
    gettext_noop("runner killed by SIGKILL (likely the memory limit of %(mib)s MiB or the OOM killer)"),
    gettext_noop("runner killed by signal %(signal)s (%(name)s)"),
    gettext_noop("runner exited with status %(status)s"),
    gettext_noop("the agent could not prepare or start the run: %(detail)s"),
]
# The sandbox's own words for a network access it denied, when the runner printed none.
NO_NETWORK = gettext_noop("connection attempt failed: the sandbox has no network")


def _pattern(template: str) -> re.Pattern:
    """`template` as a pattern matching the sentence it makes, each parameter a group, and the runner's stderr
    line after it."""
    parts = re.split(r"%\((\w+)\)s", template)
    pattern = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>.+?)" for index, part in enumerate(parts))
    return re.compile(f"^{pattern}(?P<stderr>: .*)?$", re.S)


def _sandbox_reason(template: str) -> Callable[[re.Match], str]:
    def said(match: re.Match) -> str:
        params = {name: value for name, value in match.groupdict().items() if name != "stderr"}
        if params.get("detail") == NO_NETWORK:
            params["detail"] = gettext(NO_NETWORK)
        return gettext(template) % params + (match["stderr"] or "")

    return said


def sandbox_sentence(reason: str) -> str:
    """The sandbox's reason as a `judging.Said`, so that a sentence holding it says it in the reader's language
    too; as it is when it is not one of `SANDBOX_REASONS` alone."""
    for template in SANDBOX_REASONS:
        match = _pattern(template).match(reason)
        if match is not None and match["stderr"] is None:
            return judging.Said(
                template, **{name: value for name, value in match.groupdict().items() if name != "stderr"}
            )
    return reason


def _prefixed(message: str) -> Callable[[re.Match], str]:
    return lambda match: gettext(message) % {"detail": match["detail"]}


# The sentences acceptance/protocol.py, services/checks.py and services/runs write, in the order tried.
SENTENCES: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"^all checks passed$"), lambda _match: gettext("all checks passed")),
    (re.compile("^" + re.escape(judging.EXAMPLE_NOT_RUN) + "$"), lambda _match: gettext(judging.EXAMPLE_NOT_RUN)),
    (
        re.compile(
            r"^(?P<target>\S+) is a hardware target with no hardware runner command registered: nothing ran \(a "
            r"hardware target never falls back to the bundled simulator\)$"
        ),
        lambda match: (
            gettext(
                "%(target)s is a hardware target with no hardware runner command registered: nothing ran (a hardware "
                "target never falls back to the bundled simulator)"
            )
            % {"target": match["target"]}
        ),
    ),
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
        # calculet's judging (acceptance/judging.py): a reason its findings compose is said whole by judged_reason.
        re.compile(r"^the runner claims a pass its measurements do not support — (?P<detail>.*)$", re.S),
        _prefixed(judging.CLAIM_UNSUPPORTED),
    ),
    (re.compile(r"^the device is not the target as registered: (?P<detail>.*)$", re.S), _not_the_target),
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
    *[(_pattern(template), _sandbox_reason(template)) for template in SANDBOX_REASONS],
    (
        re.compile(
            r"^infrastructure error: the run was started (?P<count>\d+) times and each time its worker was lost "
            r"before a verdict; it is not retried again$"
        ),
        _lost_workers,
    ),
    (
        re.compile(
            r"^the run waited (?P<minutes>\d+) min for (?P<target>\S+), which cannot take runs: (?P<why>.*); it was "
            r"not run$",
            re.S,
        ),
        lambda match: (
            gettext("the run waited %(minutes)s min for %(target)s, which cannot take runs: %(why)s; it was not run")
            % {"minutes": match["minutes"], "target": match["target"], "why": health_reason(match["why"])}
        ),
    ),
]


# Why a target is not healthy (selectors.target_health_state), stored in English as a run's summary is.
HEALTH_REASONS: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"^it is in maintenance$"), lambda _match: gettext("it is in maintenance")),
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
        re.compile(
            r"^out of rotation until a health check passes: health check run (?P<run>\d+) failed: (?P<detail>.*)$", re.S
        ),
        lambda match: (
            gettext("out of rotation until a health check passes: health check run %(run)s failed: %(detail)s")
            % {"run": match["run"], "detail": run_summary(match["detail"])}
        ),
    ),
    (
        re.compile(
            r"^out of rotation until a PM or operator approves the (?P<first>first )?registration agent (?P<host>.+?) "
            r"sent(?:: (?P<changes>.*))?$",
            re.S,
        ),
        lambda match: _registration_reason(match),
    ),
]


def _registration_reason(match: re.Match) -> str:
    if not match["changes"]:
        template = gettext("out of rotation until a PM or operator approves the first registration agent %(host)s sent")
    elif match["first"]:
        template = gettext(
            "out of rotation until a PM or operator approves the first registration agent %(host)s sent: %(changes)s"
        )
    else:
        template = gettext(
            "out of rotation until a PM or operator approves the registration agent %(host)s sent: %(changes)s"
        )
    return template % {"host": match["host"], "changes": _NONE_BEFORE_CHANGE.sub(_none_said, match["changes"] or "")}


# A field the target had no value for, in a registration's changes (services/registration.registration_reason).
_NONE_BEFORE_CHANGE = re.compile(r"(?:^|(?<=; ))(?P<field>\S+) \(none\) -> ")


def _none_said(match: re.Match) -> str:
    return f"{match['field']} {gettext(NOT_REPORTED)} -> "


def _stage_conclusion(match: re.Match) -> str:
    """ "Isolated runner passed on Bundled NPU simulator (simulator) with x.calbin.tar 0.1.0.", with " (host h)"
    after the kind for an agent's run."""
    with override("en"):  # the conclusion names the stage by its English label
        stage = next((code for code, text in stages.STAGE_LABELS.items() if str(text) == match["stage"]), None)
    if stage is None:
        return match.group(0)
    params = {
        "stage": labels.label("stage", stage),
        "verdict": labels.label("verdict", stages.PASS if match["verdict"] == "passed" else stages.FAIL),
        "target": labels.label("target_name", match["target"]),
        "kind": labels.label("target_kind", match["kind"]),
    }
    if match["host"]:  # an agent's run names the host it came from
        params["host"] = match["host"]
        if match["artifact"]:
            template = gettext(
                "%(stage)s %(verdict)s on %(target)s (%(kind)s) (host %(host)s) with %(artifact)s %(version)s."
            )
            return template % {**params, "artifact": match["artifact"], "version": match["version"]}
        return gettext("%(stage)s %(verdict)s on %(target)s (%(kind)s) (host %(host)s).") % params
    if match["artifact"]:
        return gettext("%(stage)s %(verdict)s on %(target)s (%(kind)s) with %(artifact)s %(version)s.") % {
            **params,
            "artifact": match["artifact"],
            "version": match["version"],
        }
    return gettext("%(stage)s %(verdict)s on %(target)s (%(kind)s).") % params


# The conclusions calculet writes for the evidence of a run (services/runs/finishing.py); the checklist's own
# conclusions are in its language and stay as they are.
CONCLUSIONS: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (
        re.compile(
            r"^(?P<stage>[A-Z][^()]+?) (?P<verdict>passed|failed) on (?P<target>.+?) \((?P<kind>simulator|hardware)\)"
            r"(?: \(host (?P<host>[^()]+)\))?(?: with (?P<artifact>\S+) (?P<version>\S+))?\.$"
        ),
        _stage_conclusion,
    ),
]


def _check_summary(detail: str) -> str:
    """ "SDK calrt-sdk-0.7.6.tar 0.7.6: nothing found" or "…: 3 findings", the count translated."""
    what, _, said = detail.rpartition(": ")
    if said == "nothing found":
        return gettext("%(what)s: nothing found") % {"what": what}
    if match := re.fullmatch(r"(\d+) findings", said):
        count = int(match[1])
        return ngettext("%(what)s: %(count)s finding", "%(what)s: %(count)s findings", count) % {
            "what": what,
            "count": count,
        }
    return detail


# Why a deliverable was accepted or rejected, as the static checks (services/deliverable_checks.py) and the
# document reviews (services/reviews.py) write it; a PM's own words after them stay as written.
DELIVERABLE_REASONS: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (
        re.compile(r"^Static check of answer r(?P<revision>\d+) passed: (?P<detail>.*)$", re.S),
        lambda match: (
            gettext("Static check of answer r%(revision)s passed: %(detail)s")
            % {"revision": match["revision"], "detail": _check_summary(match["detail"])}
        ),
    ),
    (
        re.compile(r"^Static check of answer r(?P<revision>\d+) failed: (?P<detail>.*)$", re.S),
        lambda match: (
            gettext("Static check of answer r%(revision)s failed: %(detail)s")
            % {"revision": match["revision"], "detail": match["detail"]}
        ),
    ),
    (
        re.compile(r"^Document review (?P<review>\d+): does not hold: (?P<detail>.*)$", re.S),
        lambda match: (
            gettext("Document review %(review)s: does not hold: %(detail)s")
            % {"review": match["review"], "detail": match["detail"]}
        ),
    ),
    (
        re.compile(r"^Document review (?P<review>\d+): (?P<detail>.*)$", re.S),
        lambda match: (
            gettext("Document review %(review)s: %(detail)s") % {"review": match["review"], "detail": match["detail"]}
        ),
    ),
]


def _translated(sentences: list[tuple[re.Pattern, Callable[[re.Match], str]]], text: str) -> str:
    for pattern, translate in sentences:
        match = pattern.match(text)
        if match is not None:
            return translate(match)
    return text


def run_summary(reason: str) -> str:
    """`reason` in the active language when calculet wrote it; otherwise as it is."""
    reason, with_note = _example_not_run(reason)
    return with_note(_translated(SENTENCES, reason))


def health_reason(reason: str) -> str:
    """A target's health reason in the active language."""
    return _translated(HEALTH_REASONS, reason)


def evidence_conclusion(conclusion: str) -> str:
    """An evidence item's conclusion in the active language when calculet wrote it."""
    return _translated(CONCLUSIONS, conclusion)


def deliverable_reason(reason: str) -> str:
    """Why a deliverable was decided, in the active language where calculet wrote it."""
    return _translated(DELIVERABLE_REASONS, reason)
