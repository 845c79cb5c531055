"""The documents the acceptance side reads name every finding code and every probe the code has."""

import re
from pathlib import Path

from npu_sim.probes import catalogue

ROOT = Path(__file__).resolve().parents[2]


def section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_findings_table_lists_exactly_the_codes_validation_produces(produced_finding_codes):
    table = section((ROOT / "docs" / "calbin-format.md").read_text(), "## Findings")
    documented = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            documented |= set(re.findall(r"`([a-z0-9_]+)`", line.split(" | ")[0]))
    certainly_produced = {"memory_exceeds_device", "smodel_type_mismatch", "io_size_mismatch", "legacy_manifest"}
    assert certainly_produced <= produced_finding_codes
    assert produced_finding_codes == documented


def test_every_probe_has_its_section_naming_its_parameters_and_thresholds():
    doc = (ROOT / "docs" / "runner-protocol.md").read_text()
    for probe in catalogue()["probes"]:
        heading = f"### `{probe['name']}`"
        assert heading in doc, probe["name"]
        text = doc.split(heading + "\n", 1)[1].split("\n### ", 1)[0]
        for entry in probe["params"] + probe["thresholds"]:
            assert f"| `{entry['name']}` |" in text, (probe["name"], entry["name"])
