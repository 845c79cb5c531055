"""The two scales of the source document. E says how strong evidence is; C how mature a capability is.

They are never the same field. No ORM here.
"""

GRADES = ["E0", "E1", "E2", "E3", "E4"]
GRADE_MEANINGS = {
    "E0": "measured on the current prototype",
    "E1": "current image, binaries, source and model artifacts",
    "E2": "CalRT 0.7.6 headers and same-version dynamic symbols",
    "E3": "PDF or non-production git history",
    "E4": "engineering inference or proposal",
}

STATUSES = ["C0", "C1", "C2", "C3", "C4"]
STATUS_MEANINGS = {
    "C0": "confirmed now",
    "C1": "in the SDK but not integrated",
    "C2": "can be engineered by us",
    "C3": "depends on the vendor toolchain",
    "C4": "unsupported or must not be opened",
}

GRADE_CHOICES = [(g, f"{g} — {GRADE_MEANINGS[g]}") for g in GRADES]
STATUS_CHOICES = [(s, f"{s} — {STATUS_MEANINGS[s]}") for s in STATUSES]


def status_rank(status: str) -> int:
    """Lower is more mature: C0 ranks 0."""
    return STATUSES.index(status)
