"""docs/acceptance.md's table of every question's deliverables, generated from the data: what each deliverable
is, what accepts it, and what a wrong delivery gets. `python manage.py deliverables_table --write` rewrites the
table between its markers; the tests check the document is the data's. No ORM here."""

from pathlib import Path

from acceptance.recipes import recipe_for
from evidence.seed.deliverables import QUESTION_DELIVERABLES, DeliverableSeed
from npu_sim.probes import PROBES

DOC = Path(__file__).resolve().parents[1] / "docs" / "acceptance.md"
BEGIN = "<!-- deliverables table: generated from evidence/seed/deliverables.py -->"
END = "<!-- end of deliverables table -->"
REJECTED = {"package-metadata": "rejects A16 (16777216 MB) and A17 (a prefill labelled llm_decode)"}
# What a probe asks of the package besides the features it declares.
PACKAGE_NEEDS = {
    "decode_batch": "a package at another decode batch",
    "cpu_fallback": "a package placing no op on the CPU",
    "kv_shift": "a package of decode batch 1 (copy, keep and state need a second lane)",
    "models_per_chiplet": "two packages of the same chip affinity",
}
DEFECTS = {"package-metadata": "a schema accepting A16 or A17"}
# What each question's fix adds to a metadata schema's check (acceptance/inspection/schema.py): what is asked, and
# what a schema without it gets.
ASKED = {
    "version": (
        "rejects the current metadata claiming another schema_version (another number, or the version as a string), "
        "or without schema_version, name, memory or submodels",
        "one naming no version: `version_not_pinned`; one leaving a field optional: `field_not_required` naming it",
    ),
    "units": (
        "gives each size field (device and chiplet memory, parameter blocks', tensors' sizes) its unit: a `unit` "
        "keyword in a subschema that accepts the field's value, or a unit the field carries and must have",
        "a size field with no unit: `field_without_unit` naming it",
    ),
    "A16": (
        "rejects A16's 16 TiB written in B, KiB or GiB, a size over 1 TiB drawn for each check in every unit, and a "
        "size with no unit or an unknown one",
        "one refusing only MB, or only the sizes probed: `unit_not_fixed`; a unit left optional or free: "
        "`unit_not_required`",
    ),
    "A17": (
        "rejects the decode labelled llm_prefill, a type that does not exist, and the sub-models swapped with "
        "their labels",
        'one checking a position or only "not llm_decode": `submodel_type_unchecked` naming the case; one telling '
        "them by batch: `rejects_current` naming the package at decode batch 1 (M06)",
    ),
    "compatibility": (
        "requires compatibility with calrt, driver, firmware and chip, each range a version specifier",
        "rules optional or incomplete: `compatibility_not_required`, `compatibility_incomplete` naming the key; "
        "a calrt, driver or firmware range in words, or the chips in a sentence: `range_not_machine_readable`",
    ),
}


def _probe(name: str, params: dict) -> str:
    return f"`{name}`" + (f" ({', '.join(f'{k} {v}' for k, v in params.items())})" if name == "decode_batch" else "")


def accepted_by(d: DeliverableSeed) -> str:
    if d.kind == "calbin":
        probes = dict.fromkeys(_probe(p.name, dict(p.params)) for c in d.capabilities for p in recipe_for(c).probes)
        return f"{', '.join(probes)} pass runner, golden, failure, integration and soak"
    if d.kind == "sdk":
        calls = dict.fromkeys(f"`{e}`" for c in d.capabilities for e in recipe_for(c).sdk_entry_points)
        roles = dict.fromkeys(f"a call named for `{r}`" for c in d.capabilities for r, _ in recipe_for(c).sdk_roles)
        named = ", ".join([*calls, *roles]) if calls or roles else "the entry points the answer declares"
        return f"{named} in the headers and the library's dynamic symbols, same version; the example builds"
    if d.kind == "container_image":
        sbom = (
            "SBOM whose versioned components list every compiled file of the image by SHA-256"
            if d.sbom_components
            else "SBOM"
        )
        if d.commits:
            compiler = d.commits[0][0]
            at = " and ".join(f"{name} at {prefix}…" for name, prefix in d.commits)
            sbom = f"the image holds `{compiler}`; SBOM giving {at}"
        return f"OCI layout and digests verify offline; {sbom} and licence; a build command gives the same bytes twice"
    if d.kind == "onnx":
        return f"an ONNX model (ModelProto with a graph and an opset) whose SHA-256 begins {d.sha256_prefix}"
    if d.kind == "tool":
        return (
            "its command, run in the sandbox on calculet's ONNX models, accepts the valid one (exit 0) and refuses "
            "the truncated one and the one reading an undefined tensor"
        )
    if d.kind == "schema" and d.schema_of == "trace":
        return (
            "the schema of the vendor's own trace format accepts its sample; the converter, run in the sandbox on "
            "the sample, writes a valid Chrome trace with the sample's events: as many, named as in it, each sample "
            "thread's on one Chrome thread, each event's start and duration those `fields.json` points to, in its "
            "unit (a clock in cycles converted), to the microsecond, the nesting kept; its instants on their thread "
            "at their time and its counters at their time with their value, when `fields.json` names them; and so "
            "again on the sample varied for each check (an event left out, a nested span of three added on one of its "
            "threads, started 1000 to 2000 µs later, a clock in cycles multiplied by 2 to 4)"
        )
    if d.kind == "schema":
        asked = f"; {ASKED[d.asks][0]}" if d.asks else ""
        return f"valid JSON Schema; accepts the current {d.schema_of}; {REJECTED[d.schema_of]}{asked}"
    return "PM review: " + "; ".join(d.checklist)


def wrong_delivery(d: DeliverableSeed) -> str:
    """What the checks give a delivery that is not what the deliverable asks — and, where they cannot tell,
    that they cannot."""
    recipes = [recipe_for(c) for c in d.capabilities]
    if d.kind == "calbin":
        probes = dict.fromkeys(p.name for r in recipes for p in r.probes)
        features = dict.fromkeys(f for name in probes for f in PROBES[name].features)
        said = []
        if features:
            declared = " or ".join(f"`{f}`" for f in features)
            said.append(f"a package not declaring {declared}: the probe ends `not_exercised`, the runner stage fails")
        needs = [name for name in probes if name in PACKAGE_NEEDS]
        said += [f"{PACKAGE_NEEDS[name]}: `{name}` `not_exercised`" for name in needs]
        if any(r.needs_second_package for r in recipes):
            said.append("one calbin alone: `second_calbin_missing` at the artifact stage")
        if not features and not needs:
            said.append(
                "any valid package passes: the probes exercise the simulator's runtime against the documented "
                "semantics, not the package (E4); only a board's runs (E0) test the vendor's runtime"
            )
        if len(recipes) > 1:
            said.append("one capability passed of several: still owed")
        return "; ".join(said)
    if d.kind == "sdk":
        roles = [f"`{role}`" for r in recipes for role, _ in r.sdk_roles]
        if roles:
            return (
                f"an SDK naming no call for {' or '.join(roles)}: `sdk_role_not_named`; a named call missing: "
                "`entry_point_not_declared` or `entry_point_not_defined`, rejected"
            )
        if any(r.sdk_entry_points for r in recipes):
            return (
                "an SDK missing one of those calls: `entry_point_not_declared` or `entry_point_not_defined`, rejected"
            )
        return (
            "any SDK whose declared calls are present passes: the seed names no call, so nothing ties the calls "
            "to what the question asks (weak)"
        )
    if d.kind == "container_image":
        said = ["no SBOM or licence: `sbom_missing` or `licence_missing`, rejected"]
        if any(r.reproducible_build for r in recipes):
            said.append("no build: `build_missing`; a build that differs: `not_reproducible`")
        if d.commits:
            compiler = d.commits[0][0]
            said.append(
                f"no program `{compiler}` on the image's PATH (a link to one counts): `compiler_not_in_image`; a "
                "component missing from the SBOM: "
                f"`commit_missing`; one at another commit: `commit_mismatch` naming it"
            )
        elif d.sbom_components:
            said.append(
                "an SBOM naming no file: `sbom_no_files`; a component the image lacks, a file of another digest or "
                "a compiled file in no component: `sbom_mismatch` naming it; a component without a version: "
                "`sbom_unversioned`"
            )
        else:
            said.append("what the image holds is not checked against the question (weak)")
        return "; ".join(said)
    if d.kind == "onnx":
        return (
            f"another file: `hash_mismatch` quoting {d.sha256_prefix}… and the file's SHA-256; bytes that are no "
            "model: `not_onnx`; weights without the seed's model's shapes (M01-M04), whatever the hash: "
            "`not_the_seed_model` naming the fact"
        )
    if d.kind == "tool":
        return (
            "a checker accepting every file: `accepts_invalid_onnx` naming the model; one refusing the valid model: "
            "`refuses_valid_onnx`; a run ended by the sandbox: `checker_failed`"
        )
    if d.kind == "schema" and d.schema_of == "trace":
        return (
            "a schema refusing its own sample: `rejects_sample`; fields not declared or not in the sample: "
            "`fields_undeclared`, `fields_not_in_sample`; a converter that fails or writes no Chrome trace (no ts, "
            "a negative dur, a time unit not ms or ns): `converter_failed`, `not_chrome_trace`; events dropped, "
            "added or named otherwise: `trace_events_mismatch`; threads merged or split: `thread_mismatch`; the "
            "unit ignored or the clock hard-coded: `time_unit_mismatch`; all events shifted or made relative to "
            "the first: `clock_shifted`; one event's time off: `event_time_mismatch`; an event no longer inside "
            "its parent or overlapping the one it precedes: `nesting_mismatch`; an instant or a counter dropped, "
            "mis-timed or (a counter) its value changed: `instant_mismatch`, `counter_mismatch`; a canned trace "
            "whatever the input: `converter_ignores_input`"
        )
    if d.kind == "schema":
        said = f"{DEFECTS[d.schema_of]}: `accepts_defect`; one refusing the current {d.schema_of}: `rejects_current`"
        if d.asks:
            return f"{said}; {ASKED[d.asks][1]}"
        return said
    return "an item the PM does not tick: rejected, naming the item"


def table() -> str:
    lines = [
        "| question | deliverable | kind | capabilities | accepted when | what a wrong delivery gets |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for code, deliverables in QUESTION_DELIVERABLES.items():
        for d in deliverables:
            capabilities = ", ".join(f"`{c}`" for c in d.capabilities) or "—"
            others = [f"`{o.key}`" for o in deliverables if d.either and o.either == d.either and o is not d]
            alternative = f" (or {', '.join(others)}: either is enough)" if others else ""
            lines.append(
                f"| {code} | `{d.key}`: {d.title}{alternative} | {d.kind} | {capabilities} | {accepted_by(d)} | "
                f"{wrong_delivery(d)} |"
            )
    return "\n".join(lines)


def documented(text: str) -> str:
    """The table as the document has it, between the markers; ValueError when they are missing."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"docs/acceptance.md lacks the markers {BEGIN} ... {END}")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def rewritten(text: str) -> str:
    """The document with the table between its markers replaced by the data's."""
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return f"{before}{BEGIN}\n{table()}\n{END}{after}"
