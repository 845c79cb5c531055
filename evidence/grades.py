"""The two scales of the source document. E says how strong evidence is; C how mature a capability is.

They are never the same field. No ORM here.
"""

from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

GRADES = ["E0", "E1", "E2", "E3", "E4"]
GRADE_MEANINGS = {
    "E0": _("measured on the current prototype"),
    "E1": _("current image, binaries, source and model artifacts"),
    "E2": _("CalRT 0.7.6 headers and same-version dynamic symbols"),
    "E3": _("PDF or non-production git history"),
    "E4": _("engineering inference or proposal"),
}

STATUSES = ["C0", "C1", "C2", "C3", "C4"]
STATUS_MEANINGS = {
    "C0": _("confirmed now"),
    "C1": _("in the SDK but not integrated"),
    "C2": _("can be engineered by us"),
    "C3": _("depends on the vendor toolchain"),
    "C4": _("unsupported or must not be opened"),
}

GRADE_CHOICES = [(g, format_lazy("{} — {}", g, GRADE_MEANINGS[g])) for g in GRADES]
STATUS_CHOICES = [(s, format_lazy("{} — {}", s, STATUS_MEANINGS[s])) for s in STATUSES]


def status_rank(status: str) -> int:
    """Lower is more mature: C0 ranks 0."""
    return STATUSES.index(status)
