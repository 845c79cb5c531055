import pytest
from django.apps import apps

from evidence.seed.importer import DEFAULT_PATH

SNAPSHOT_MODELS = [
    "evidence.ChecklistDocument",
    "evidence.PathAlias",
    "evidence.Archive",
    "evidence.EvidenceTable",
    "evidence.EvidenceItem",
    "evidence.EvidenceGrade",
    "evidence.EvidenceStatus",
    "evidence.SourceReference",
    "evidence.Capability",
    "evidence.Capability_evidence",
    "evidence.Capability_questions",
    "vendor.Section",
    "vendor.Question",
    "calculet.AuditEntry",
    "calculet.AuditHead",
]


@pytest.fixture(scope="session")
def seed_text() -> str:
    return DEFAULT_PATH.read_text(encoding="utf-8")


def snapshot() -> dict:
    """Every row the import may touch, timestamps included, so any write shows as a difference."""
    return {label: list(apps.get_model(label).objects.order_by("pk").values()) for label in SNAPSHOT_MODELS}


def row_line(text: str, code: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {code} |"))


def line_number(text: str, line: str) -> int:
    return text.splitlines().index(line) + 1


def replace_row(text: str, code: str, new_line: str) -> str:
    return text.replace(row_line(text, code) + "\n", new_line + "\n", 1)


def remove_row(text: str, code: str) -> str:
    return text.replace(row_line(text, code) + "\n", "", 1)


def add_rows_after(text: str, code: str, lines: list[str]) -> str:
    old = row_line(text, code) + "\n"
    return text.replace(old, old + "".join(line + "\n" for line in lines), 1)
