"""docs/acceptance.md's table of deliverables is the data's: regenerate it with
`python -m tests.evidence.test_deliverables_doc` and paste it between the markers."""

from pathlib import Path

from acceptance.recipes import recipe_for
from evidence.seed.deliverables import QUESTION_DELIVERABLES, DeliverableSeed

DOC = Path(__file__).resolve().parents[2] / "docs" / "acceptance.md"
BEGIN = "<!-- deliverables table: generated from evidence/seed/deliverables.py -->"
END = "<!-- end of deliverables table -->"
REJECTED = {
    "package-metadata": "rejects A16 (16777216 MB) and A17 (a prefill labelled llm_decode)",
    "trace": "rejects an impossible time unit and events without time or with a negative duration",
}


def _probe(name: str, params: dict) -> str:
    return f"`{name}`" + (f" ({', '.join(f'{k} {v}' for k, v in params.items())})" if name == "decode_batch" else "")


def accepted_by(d: DeliverableSeed) -> str:
    if d.kind == "calbin":
        probes = dict.fromkeys(_probe(p.name, dict(p.params)) for c in d.capabilities for p in recipe_for(c).probes)
        return f"{', '.join(probes)} pass runner, golden, failure, integration and soak"
    if d.kind == "sdk":
        calls = dict.fromkeys(f"`{e}`" for c in d.capabilities for e in recipe_for(c).sdk_entry_points)
        named = ", ".join(calls) if calls else "the entry points the answer declares"
        return f"{named} in the headers and the library's dynamic symbols, same version; the example builds"
    if d.kind == "container_image":
        return "OCI layout and digests verify offline; SBOM and licence; a build command gives the same bytes twice"
    if d.kind == "schema":
        return f"valid JSON Schema; accepts the current {d.schema_of}; {REJECTED[d.schema_of]}"
    return "PM review: " + "; ".join(d.checklist)


def table() -> str:
    lines = ["| question | deliverable | kind | capabilities | accepted when |", "| --- | --- | --- | --- | --- |"]
    for code, deliverables in QUESTION_DELIVERABLES.items():
        for d in deliverables:
            capabilities = ", ".join(f"`{c}`" for c in d.capabilities) or "—"
            lines.append(f"| {code} | `{d.key}`: {d.title} | {d.kind} | {capabilities} | {accepted_by(d)} |")
    return "\n".join(lines)


def test_the_doc_s_table_is_the_data_s():
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"docs/acceptance.md lacks the markers {BEGIN} ... {END}"
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert documented == table(), "regenerate with: python -m tests.evidence.test_deliverables_doc"


def test_every_question_is_in_the_table():
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table().splitlines()[2:]]
    assert sorted(set(rows)) == [f"V{n:02d}" for n in range(1, 61)]


if __name__ == "__main__":
    print(table())
