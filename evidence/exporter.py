"""The checklist as JSON, Markdown or CSV, with live question states and capability statuses.

`checklist_export(fmt, progress)` returns the text; `EXPORT_FORMATS` gives each format's content type and
file extension (for the reports page). Each question lists what it owes: its deliverables not yet accepted,
with their state and, for calbin deliverables when `progress` is given (deliverable id -> {target kind:
state}, from `acceptance.selectors.deliverables_progress`), where their chains stand per target kind.
JSON and CSV text fields hold the document's text with Markdown backticks removed and whitespace
collapsed; the Markdown keeps the document's own Markdown and writes its own words (column headings,
states, deliverables' kinds and states) in the active language; the CSV's headings are in the active
language (in English, the columns' codes) over cells of codes. The CSV starts with a UTF-8 byte order
mark. A fixed number of queries whatever the number of rows.
"""

import csv
import io
import json
from collections.abc import Mapping

from django.db.models import Prefetch
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from calculet import labels
from evidence.models import Archive, Capability, ChecklistDocument, EvidenceItem, PathAlias, SourceReference
from vendor.models import Deliverable, Question, Section, deliverables_still_owed

Progress = Mapping[int, Mapping[str, str]]
# Deliverable id -> what its runs prove per target kind: (target kind, where, code, what), `where` and `what` in
# the active language (from acceptance.selectors.deliverable_runs_prove).
Proves = Mapping[int, list[tuple[str, str, str, str]]]

EXPORT_FORMATS = {
    "json": ("application/json", "json"),
    "md": ("text/markdown; charset=utf-8", "md"),
    "csv": ("text/csv; charset=utf-8", "csv"),
}
# The CSV's columns: in English each heading is the column's code; in Chinese its translation. The cells
# hold codes (states, priorities, kinds) in either language, for a spreadsheet's filters and scripts alike.
CSV_COLUMNS = [
    pgettext_lazy("CSV column", "code"),
    pgettext_lazy("CSV column", "section"),
    pgettext_lazy("CSV column", "question"),
    pgettext_lazy("CSV column", "acceptance"),
    pgettext_lazy("CSV column", "state"),
    pgettext_lazy("CSV column", "priority"),
    pgettext_lazy("CSV column", "organisation"),
    pgettext_lazy("CSV column", "assignee"),
    pgettext_lazy("CSV column", "due_date"),
    pgettext_lazy("CSV column", "capabilities"),
    pgettext_lazy("CSV column", "deliverables_owed"),
    pgettext_lazy("CSV column", "runs_prove"),
]


def plain(text: str) -> str:
    """Text without Markdown backticks, whitespace collapsed."""
    return " ".join(text.replace("`", "").split())


def _questions():
    return (
        Question.objects.select_related("section", "organisation", "assignee")
        .prefetch_related(
            Prefetch("capabilities", queryset=Capability.objects.order_by("position", "slug")),
            Prefetch("deliverables", queryset=Deliverable.objects.order_by("position", "key")),
        )
        .order_by("number")
    )


def _owed(question) -> list[Deliverable]:
    return deliverables_still_owed(list(question.deliverables.all()))


def _alternatives(deliverable: Deliverable, deliverables: list[Deliverable]) -> list[str]:
    """The keys of the other deliverables of its question with the same `either`: it or one of them is enough."""
    return [o.key for o in deliverables if deliverable.either and o.either == deliverable.either and o != deliverable]


def _owed_groups(question) -> list[list[Deliverable]]:
    """The deliverables still owed, alternatives of each other (the same `either`) together."""
    groups: dict[tuple[str, str], list[Deliverable]] = {}  # ("either", its either) or ("key", its key)
    for deliverable in _owed(question):
        group = ("either", deliverable.either) if deliverable.either else ("key", deliverable.key)
        groups.setdefault(group, []).append(deliverable)
    return list(groups.values())


def _owed_codes(question, progress: Progress | None) -> str:
    """The CSV's cell: each deliverable still owed in codes, alternatives as `either A (…) or B (…)`."""
    cells = []
    for group in _owed_groups(question):
        labels = [_owed_label(deliverable, progress) for deliverable in group]
        cells.append(labels[0] if len(labels) == 1 else "either " + " or ".join(labels))
    return "; ".join(cells)


def _owed_sentence(question, progress: Progress | None) -> str:
    """The Markdown's cell: the same in the active language."""
    cells = []
    for group in _owed_groups(question):
        labels = [_owed_words(deliverable, progress) for deliverable in group]
        cells.append(labels[0] if len(labels) == 1 else _("either %(choices)s") % {"choices": _(" or ").join(labels)})
    return "；".join(cells)


def _owed_label(deliverable: Deliverable, progress: Progress | None) -> str:
    """`package-batch-4 (calbin, owed; simulator: none, hardware: none)`: the codes, for the CSV."""
    parts = [deliverable.kind, deliverable.state]
    where = (progress or {}).get(deliverable.pk)
    if where:
        parts[-1] += "; " + ", ".join(f"{kind}: {state}" for kind, state in where.items())
    return f"{deliverable.key} ({', '.join(parts)})"


def _owed_words(deliverable: Deliverable, progress: Progress | None) -> str:
    """`package-batch-4 (Model package, Owed; Simulator: not run, Hardware: not run)` in the active language,
    for the Markdown a person reads."""
    said = _("%(kind)s, %(state)s") % {
        "kind": labels.label("deliverable_kind", deliverable.kind),
        "state": labels.label("deliverable_state", deliverable.state),
    }
    where = (progress or {}).get(deliverable.pk)
    if where:
        per_kind = [
            _("%(kind)s: %(state)s")
            % {"kind": labels.label("target_kind", kind), "state": labels.label("deliverable_progress", state)}
            for kind, state in where.items()
        ]
        said = _("%(said)s; %(per_kind)s") % {"said": said, "per_kind": labels.listed(per_kind)}
    return _("%(key)s (%(said)s)") % {"key": deliverable.key, "said": said}


def _deliverable_data(
    deliverable: Deliverable, deliverables: list[Deliverable], progress: Progress | None, proves: Proves | None
) -> dict:
    return {
        "key": deliverable.key,
        "kind": deliverable.kind,
        "state": deliverable.state,
        "alternatives": _alternatives(deliverable, deliverables),
        "reason": plain(deliverable.reason),
        "progress": dict((progress or {}).get(deliverable.pk, {})),
        "runs_prove": [
            {"target_kind": kind, "code": code, "label": what}
            for kind, _where, code, what in (proves or {}).get(deliverable.pk, [])
        ],
    }


def _runs_prove_label(question, proves: Proves | None) -> str:
    """`package-batch-4: simulator package (the vendor's package on the simulator), hardware board (the board)`
    for each calbin deliverable of the question."""
    labels = []
    for deliverable in question.deliverables.all():
        rows = (proves or {}).get(deliverable.pk, [])
        if rows:
            said = ", ".join(f"{kind} {code} ({what})" for kind, _where, code, what in rows)
            labels.append(f"{deliverable.key}: {said}")
    return "; ".join(labels)


def _capability_labels(question) -> list[str]:
    return [f"{c.slug} {c.status}" for c in question.capabilities.all()]


def checklist_data(progress: Progress | None = None, proves: Proves | None = None) -> dict:
    document = ChecklistDocument.objects.order_by("pk").first()
    items = (
        EvidenceItem.objects.filter(origin=EvidenceItem.SEED)
        .select_related("table")
        .prefetch_related(
            "grades",
            "statuses",
            Prefetch("sources", queryset=SourceReference.objects.select_related("alias").order_by("position")),
        )
    )
    capabilities = Capability.objects.prefetch_related(
        Prefetch("evidence", queryset=EvidenceItem.objects.only("code").order_by("code")),
        Prefetch("questions", queryset=Question.objects.only("code").order_by("number")),
    )
    return {
        "document": {
            "title": plain(document.title),
            "date": document.date,
            "sha256": document.source_sha256,
            "closing_rule": plain(document.closing_rule),
            "acceptance_chain": plain(document.acceptance_chain),
        }
        if document
        else None,
        "aliases": [
            {"name": a.name, "path": a.path, "expanded_path": a.expanded_path} for a in PathAlias.objects.all()
        ],
        "archives": [
            {"name": a.name, "sha256": a.sha256, "description": plain(a.description)} for a in Archive.objects.all()
        ],
        "evidence": [
            {
                "code": item.code,
                # A seed item always has its table (the constraint evidence_seed_item_has_table).
                "table": item.table.prefix,  # type: ignore[union-attr]
                "section": item.table.section,  # type: ignore[union-attr]
                "conclusion": plain(item.conclusion),
                "grades": sorted(g.grade for g in item.grades.all()),
                "statuses": sorted({s.status for s in item.statuses.all()}),
                "status_qualifiers": [
                    {"status": s.status, "qualifier": plain(s.qualifier)}
                    for s in sorted(item.statuses.all(), key=lambda s: (s.status, s.qualifier))
                ],
                "grade_text": plain(item.grade_text),
                "explanation": plain(item.explanation),
                "defect": item.defect,
                "limitation": item.limitation,
                "source_text": plain(item.source_text),
                "sources": [
                    {
                        "raw": plain(s.raw),
                        "alias": s.alias.name if s.alias else "",
                        "path": s.path,
                        "lines": s.lines,
                        "line_ranges": s.line_ranges,
                        "same_file": s.same_file,
                    }
                    for s in item.sources.all()
                ],
            }
            for item in items
        ],
        "sections": [
            {"code": s.code, "title": plain(s.title), "theme": plain(s.theme), "blocks": plain(s.blocks)}
            for s in Section.objects.all()
        ],
        "questions": [
            {
                "code": q.code,
                "section": q.section.code,
                "question": plain(q.question),
                "acceptance": plain(q.acceptance),
                "state": q.state,
                "priority": q.priority,
                "organisation": q.organisation.slug if q.organisation else None,
                "assignee": q.assignee.get_username() if q.assignee else None,
                "due_date": q.due_date.isoformat() if q.due_date else None,
                "capabilities": [c.slug for c in q.capabilities.all()],
                "deliverables": [
                    _deliverable_data(d, list(q.deliverables.all()), progress, proves) for d in q.deliverables.all()
                ],
            }
            for q in _questions()
        ],
        "capabilities": [
            {
                "slug": c.slug,
                "title": plain(c.title),
                "status": c.status,
                "pinned": c.pinned,
                "pinned_status": c.pinned_status,
                "scope": c.scope,
                "evidence": [e.code for e in c.evidence.all()],
                "questions": [q.code for q in c.questions.all()],
            }
            for c in capabilities
        ],
    }


def checklist_json(progress: Progress | None = None, proves: Proves | None = None) -> str:
    return json.dumps(checklist_data(progress, proves), ensure_ascii=False, indent=2) + "\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") or "—"


def checklist_markdown(progress: Progress | None = None, proves: Proves | None = None) -> str:
    document = ChecklistDocument.objects.order_by("pk").first()
    title = document.title if document else "Checklist"
    lines = [f"# {title}", ""]
    if document:
        date_label = _("Date")
        lines += [f"{date_label}: {document.date}  ", f"SHA-256: `{document.source_sha256}`", ""]
    lines += ["## 12. 厂商确认清单", ""]
    by_section: dict[int, list] = {}
    for question in _questions():
        by_section.setdefault(question.section_id, []).append(question)
    for section in Section.objects.all():
        ours = [_("State"), _("Priority"), _("Owner"), _("Due date"), _("Capability statuses"), _("Deliverables owed")]
        ours.append(_("What its runs prove"))
        header = ["#", section.question_header, section.acceptance_header, *ours]
        lines += [f"### {section.code} {section.title}", "", "| " + " | ".join(header) + " |"]
        lines.append("| " + " | ".join("---" for _ in header) + " |")
        for q in by_section.get(section.pk, []):
            owner = q.assignee.get_username() if q.assignee else (q.organisation.slug if q.organisation else "")
            row = [
                q.code,
                q.question,
                q.acceptance,
                q.get_state_display(),
                q.priority.upper(),
                owner,
                q.due_date.isoformat() if q.due_date else "",
                labels.listed(_capability_labels(q)),
                _owed_sentence(q, progress),
                _runs_prove_label(q, proves),
            ]
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        lines.append("")
    header = [_("Capability"), _("Status"), _("Pinned"), _("Scope")]
    lines += ["## " + _("Capability statuses"), "", "| " + " | ".join(header) + " |", "| --- | --- | --- | --- |"]
    for capability in Capability.objects.all():
        pinned = capability.pinned_status if capability.pinned else ""
        row = [f"{capability.title} (`{capability.slug}`)", capability.status, pinned, capability.scope]
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


CSV_BOM = "\ufeff"


def checklist_csv(progress: Progress | None = None, proves: Proves | None = None) -> str:
    """Starts with a UTF-8 byte order mark, without which Excel reads the Chinese text as another encoding."""
    out = io.StringIO()
    out.write(CSV_BOM)
    writer = csv.writer(out)
    writer.writerow([str(heading) for heading in CSV_COLUMNS])
    for q in _questions():
        writer.writerow(
            [
                q.code,
                q.section.code,
                plain(q.question),
                plain(q.acceptance),
                q.state,
                q.priority,
                q.organisation.slug if q.organisation else "",
                q.assignee.get_username() if q.assignee else "",
                q.due_date.isoformat() if q.due_date else "",
                "; ".join(_capability_labels(q)),
                _owed_codes(q, progress),
                _runs_prove_label(q, proves),
            ]
        )
    return out.getvalue()


EXPORTERS = {"json": checklist_json, "md": checklist_markdown, "csv": checklist_csv}


def checklist_export(fmt: str, progress: Progress | None = None, proves: Proves | None = None) -> str:
    """The checklist in `fmt` (json, md or csv); `progress` adds where calbin deliverables stand per target kind,
    `proves` what their runs prove there (JSON's `runs_prove` of each deliverable, the CSV's `runs_prove`)."""
    if fmt not in EXPORTERS:
        raise ValueError(f"unknown export format {fmt!r}: one of {', '.join(EXPORTERS)}")
    return EXPORTERS[fmt](progress, proves)
