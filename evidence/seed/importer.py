"""Bring the database in line with the checklist document, in one transaction, with an audit row per change.

Everything the document describes is loaded in a fixed number of queries and compared in memory, so a
run that finds nothing to do writes nothing and costs the same whatever the document's size.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from calculet.audit import audit_record_many
from calculet.db import lock_rows
from evidence.grades import status_rank
from evidence.models import (
    Archive,
    Capability,
    ChecklistDocument,
    EvidenceGrade,
    EvidenceItem,
    EvidenceStatus,
    EvidenceTable,
    PathAlias,
    SourceReference,
)
from evidence.seed.capabilities import CAPABILITIES, QUESTION_CAPABILITIES, CapabilitySeed
from evidence.seed.deliverables import QUESTION_DELIVERABLES
from evidence.seed.parser import ParsedChecklist, ParsedItem, parse_checklist
from vendor import states
from vendor.models import Deliverable, Question, Section

ACTOR = "import_checklist"
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "checklist.md"
# Serialises concurrent imports (two processes starting at once) on PostgreSQL.
ADVISORY_LOCK_ID = 7_346_001
# Section numbers above this are never a document's: a table waits there while tables trade numbers.
PARKED_SECTION = 10_000

ALIAS_FIELDS = ["path", "expanded_path", "position"]
ARCHIVE_FIELDS = ["sha256", "description", "position"]
TABLE_FIELDS = ["section", "title", "note"]
ITEM_CHILDREN = ["grades", "statuses", "sources"]


class ChecklistImportError(Exception):
    """The document parses but cannot be applied to this database; nothing was written."""


@dataclass
class ImportReport:
    added: list[tuple[str, str]] = field(default_factory=list)
    changed: list[tuple[str, str, list[str]]] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    kept: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def lines(self) -> list[str]:
        lines = []
        for verb, entries in (("added", self.added), ("removed", self.removed)):
            by_kind = defaultdict(list)
            for kind, label in entries:
                by_kind[kind].append(label)
            lines += [f"{verb} {len(labels)} {kind}: {', '.join(labels)}" for kind, labels in by_kind.items()]
        lines += [f"changed {kind} {label}: {', '.join(fields)}" for kind, label, fields in self.changed]
        lines += [f"kept {kind} {label}: {reason}" for kind, label, reason in self.kept]
        return lines + self.notes


def checklist_import(text: str) -> ImportReport:
    """Make the database hold what the document `text` says, and report what that took.

    The document is parsed whole before anything is written (ChecklistParseError: nothing written).
    Then, in one transaction:
    - seed text is added, updated and removed to match the document; a run with nothing to do writes nothing;
    - local work is never deleted: a question (or evidence item) the document dropped that has local work
      (assignee, organisation, due date, priority or state moved, answers, or any other row pointing at it)
      is kept and reported;
    - capabilities are created with their initial status; an existing capability's status is never
      changed (the promotion gate owns it): a difference is reported instead; links are added, never removed;
    - each question's deliverables are created and updated from the seed data; one the data dropped is removed
      while still owed and unanswered, kept and reported otherwise; its capability links are added, never removed;
    - every addition, change and removal is audited with the actor label "import_checklist".
    """
    parsed = parse_checklist(text)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_ID])
        return _Import(parsed).run()


def _changed_fields(obj, wanted: dict) -> list[str]:
    return [name for name, value in wanted.items() if getattr(obj, name) != value]


def _values(obj, names: list[str]) -> dict:
    return {name: getattr(obj, name) for name in names}


def initial_status(seed: CapabilitySeed, items: dict[str, ParsedItem]) -> str:
    """The status a capability is created with (rule: evidence.seed.capabilities)."""
    if seed.status_from is None:
        return seed.status
    code, qualifier = seed.status_from
    item = items.get(code)
    named = {s.status for s in item.statuses if s.qualifier == qualifier} if item else set()
    if not named or seed.status in named:
        return seed.status
    return max(named, key=status_rank)


def _local_work_annotations(model, skip_models: tuple) -> dict:
    """An Exists() per row type that points at `model`, except the rows the import itself makes."""
    annotations = {}
    for relation in model._meta.related_objects:
        if relation.related_model in skip_models:
            continue
        rows = relation.related_model._base_manager.filter(**{relation.field.name: OuterRef("pk")})
        annotations[f"has_{relation.get_accessor_name()}"] = Exists(rows)
    return annotations


class _Import:
    def __init__(self, parsed: ParsedChecklist):
        self.parsed = parsed
        self.report = ImportReport()
        self.parsed_items = {item.code: item for item in parsed.items}
        self.audit_rows: list[dict] = []

    def run(self) -> ImportReport:
        self.load()
        self.sync_document()
        self.sync_aliases()
        self.sync_archives()
        self.sync_tables()
        self.sync_items()
        self.remove_unused_tables()
        self.remove_unused_aliases()
        self.sync_sections()
        self.sync_questions()
        self.remove_unused_sections()
        self.sync_capabilities()
        self.sync_deliverables()
        audit_record_many(self.audit_rows)
        return self.report

    # Loading: a fixed number of queries whatever the number of rows.

    def load(self) -> None:
        self.document = ChecklistDocument.objects.order_by("pk").first()
        self.aliases = {a.name: a for a in PathAlias.objects.all()}
        self.alias_names = {a.pk: a.name for a in self.aliases.values()}
        self.archives = {a.name: a for a in Archive.objects.all()}
        self.tables = {t.prefix: t for t in EvidenceTable.objects.all()}
        self.items = {i.code: i for i in EvidenceItem.objects.all()}
        self.grades = defaultdict(list)
        for item_id, grade in EvidenceGrade.objects.values_list("item_id", "grade"):
            self.grades[item_id].append(grade)
        self.statuses = defaultdict(list)
        for item_id, status, qualifier in EvidenceStatus.objects.values_list("item_id", "status", "qualifier"):
            self.statuses[item_id].append((status, qualifier))
        self.sources = defaultdict(list)
        for source in SourceReference.objects.all():
            self.sources[source.item_id].append(source)
        self.sections = {s.code: s for s in Section.objects.all()}
        self.questions = {q.code: q for q in Question.objects.all()}
        self.capabilities = {c.slug: c for c in Capability.objects.all()}
        evidence_through = Capability.evidence.through
        self.evidence_links = set(evidence_through.objects.values_list("capability_id", "evidenceitem_id"))
        question_through = Capability.questions.through
        self.question_links = set(question_through.objects.values_list("capability_id", "question_id"))
        self.deliverables = {(d.question_id, d.key): d for d in Deliverable.objects.all()}
        self.answered_deliverables = set(
            Deliverable.objects.filter(answers__isnull=False).values_list("pk", flat=True).distinct()
        )
        deliverable_through = Capability.deliverables.through
        self.deliverable_links = set(deliverable_through.objects.values_list("capability_id", "deliverable_id"))

    # Audit and report: audit rows are collected and written together at the end of the transaction.

    def audit(self, **record) -> None:
        self.audit_rows.append({"actor": ACTOR, **record})

    def added(self, kind: str, obj, label: str, after: dict) -> None:
        self.report.added.append((kind, label))
        self.audit(action="checklist.add", obj=obj, after=after)

    def changed(self, kind: str, obj, label: str, before: dict, after: dict) -> None:
        self.report.changed.append((kind, label, list(after)))
        self.audit(action="checklist.change", obj=obj, before=before, after=after)

    def removed(self, kind: str, obj, label: str, before: dict) -> None:
        self.report.removed.append((kind, label))
        self.audit(action="checklist.remove", obj=obj, before=before)

    def update(self, kind: str, obj, label: str, wanted: dict, stored: dict | None = None) -> None:
        """Save the fields of `obj` that differ from `wanted`; `stored` gives values it held before this import."""
        names = _changed_fields(obj, wanted)
        if not names:
            return
        before = {**_values(obj, names), **{k: v for k, v in (stored or {}).items() if k in names}}
        for name in names:
            setattr(obj, name, wanted[name])
        update_fields = [n.removesuffix("_id") for n in names]
        if any(f.name == "updated_at" for f in obj._meta.fields):
            update_fields.append("updated_at")
        obj.save(update_fields=update_fields)
        self.changed(kind, obj, label, before, {name: wanted[name] for name in names})

    def create(self, kind: str, model, rows: list[tuple[str, dict]]) -> list:
        created = model.objects.bulk_create([model(**values) for _, values in rows])
        for (label, values), obj in zip(rows, created, strict=True):
            self.added(kind, obj, label, values)
        return created

    # The document's parts, in an order that respects the foreign keys.

    def sync_document(self) -> None:
        wanted = {
            "title": self.parsed.title,
            "date": self.parsed.date,
            "source_sha256": self.parsed.sha256,
            "closing_rule": self.parsed.closing_rule,
            "acceptance_chain": self.parsed.acceptance_chain,
        }
        if self.document is None:
            self.document = self.create("checklist document", ChecklistDocument, [(self.parsed.title, wanted)])[0]
        else:
            self.update("checklist document", self.document, self.parsed.title, wanted)

    def sync_aliases(self) -> None:
        new = []
        for alias in self.parsed.aliases:
            wanted = {"path": alias.path, "expanded_path": alias.expanded_path, "position": alias.position}
            if alias.name in self.aliases:
                self.update("path alias", self.aliases[alias.name], alias.name, wanted)
            else:
                new.append((alias.name, {"name": alias.name, **wanted}))
        for obj in self.create("path aliases", PathAlias, new):
            self.aliases[obj.name] = obj

    def sync_archives(self) -> None:
        new = []
        for archive in self.parsed.archives:
            wanted = {"sha256": archive.sha256, "description": archive.description, "position": archive.position}
            if archive.name in self.archives:
                self.update("archive", self.archives[archive.name], archive.name, wanted)
            else:
                new.append((archive.name, {"name": archive.name, **wanted}))
        self.create("archives", Archive, new)
        listed = {a.name for a in self.parsed.archives}
        for name, obj in self.archives.items():
            if name not in listed:
                before = _values(obj, ["name", *ARCHIVE_FIELDS])
                obj.delete()
                self.removed("archives", obj, name, before)

    def sync_tables(self) -> None:
        stored_sections = {prefix: obj.section for prefix, obj in self.tables.items()}
        self.park_tables({t.prefix: t.section for t in self.parsed.tables})
        new = []
        for table in self.parsed.tables:
            wanted = {"section": table.section, "title": table.title, "note": table.note}
            if table.prefix in self.tables:
                stored = {"section": stored_sections[table.prefix]}
                self.update("evidence table", self.tables[table.prefix], table.prefix, wanted, stored)
            else:
                new.append((table.prefix, {"prefix": table.prefix, **wanted}))
        for obj in self.create("evidence tables", EvidenceTable, new):
            self.tables[obj.prefix] = obj

    def park_tables(self, wanted_sections: dict[str, int]) -> None:
        """A table's section number is unique: before tables trade numbers (sections reordered), each table
        whose number changes, or that left the document holding a number another table wants, moves to a
        number no section uses."""
        wanted_numbers = set(wanted_sections.values())
        for prefix, obj in self.tables.items():
            target = wanted_sections.get(prefix)
            if (target is not None and target != obj.section) or (target is None and obj.section in wanted_numbers):
                obj.section = PARKED_SECTION + obj.pk
                obj.save(update_fields=["section"])

    def item_fields(self, item: ParsedItem) -> dict:
        return {
            "table_id": self.tables[item.table].pk,
            "position": item.position,
            "conclusion": item.conclusion,
            "source_text": item.source_text,
            "grade_text": item.grade_text,
            "explanation": item.explanation,
            "defect": item.defect,
            "limitation": item.limitation,
        }

    @staticmethod
    def parsed_children(item: ParsedItem) -> dict:
        return {
            "grades": sorted(item.grades),
            "statuses": sorted((s.status, s.qualifier) for s in item.statuses),
            "sources": [
                [s.position, s.raw, s.alias, s.path, s.lines, [list(r) for r in s.line_ranges], s.same_file]
                for s in item.sources
            ],
        }

    def stored_children(self, obj: EvidenceItem) -> dict:
        names = self.alias_names
        sources = sorted(self.sources[obj.pk], key=lambda s: s.position)
        return {
            "grades": sorted(self.grades[obj.pk]),
            "statuses": sorted(self.statuses[obj.pk]),
            "sources": [
                [s.position, s.raw, names.get(s.alias_id, ""), s.path, s.lines, s.line_ranges, s.same_file]
                for s in sources
            ],
        }

    def sync_items(self) -> None:
        new, rewrite = [], []
        for item in self.parsed.items:
            wanted = self.item_fields(item)
            children = self.parsed_children(item)
            obj = self.items.get(item.code)
            if obj is None:
                new.append((item.code, {"code": item.code, "origin": EvidenceItem.SEED, **wanted}))
                continue
            if obj.origin != EvidenceItem.SEED:
                raise ChecklistImportError(
                    f"line {item.line}: evidence code {item.code} is already used by an evidence item of a run"
                )
            stored = self.stored_children(obj)
            changed_children = [name for name in ITEM_CHILDREN if stored[name] != children[name]]
            if changed_children:
                rewrite.append(obj)
                self.report.changed.append(("evidence item", item.code, changed_children))
                self.audit(
                    action="checklist.change",
                    obj=obj,
                    before={name: stored[name] for name in changed_children},
                    after={name: children[name] for name in changed_children},
                )
            self.update("evidence item", obj, item.code, wanted)
        created = EvidenceItem.objects.bulk_create([EvidenceItem(**values) for _, values in new])
        for obj in created:
            self.items[obj.code] = obj
            self.added("evidence items", obj, obj.code, self.added_item_summary(self.parsed_items[obj.code]))
        self.write_children(created + rewrite)
        self.remove_items()

    @staticmethod
    def added_item_summary(item: ParsedItem) -> dict:
        return {
            "conclusion": item.conclusion,
            "grade_text": item.grade_text,
            "grades": sorted(item.grades),
            "statuses": sorted([s.status, s.qualifier] for s in item.statuses),
            "sources": [s.raw for s in item.sources],
        }

    def write_children(self, objs: list[EvidenceItem]) -> None:
        if not objs:
            return
        ids = [obj.pk for obj in objs]
        EvidenceGrade.objects.filter(item_id__in=ids).delete()
        EvidenceStatus.objects.filter(item_id__in=ids).delete()
        SourceReference.objects.filter(item_id__in=ids).delete()
        grades, statuses, sources = [], [], []
        for obj in objs:
            item = self.parsed_items[obj.code]
            grades += [EvidenceGrade(item=obj, grade=grade) for grade in sorted(item.grades)]
            statuses += [EvidenceStatus(item=obj, status=s.status, qualifier=s.qualifier) for s in item.statuses]
            sources += [
                SourceReference(
                    item=obj,
                    position=s.position,
                    raw=s.raw,
                    alias=self.aliases[s.alias] if s.alias else None,
                    path=s.path,
                    lines=s.lines,
                    line_ranges=[list(r) for r in s.line_ranges],
                    same_file=s.same_file,
                )
                for s in item.sources
            ]
            self.sources[obj.pk] = []
        EvidenceGrade.objects.bulk_create(grades)
        EvidenceStatus.objects.bulk_create(statuses)
        created_sources = SourceReference.objects.bulk_create(sources)
        for source in created_sources:
            self.sources[source.item_id].append(source)

    def remove_items(self) -> None:
        gone = [
            obj for code, obj in self.items.items() if obj.origin == EvidenceItem.SEED and code not in self.parsed_items
        ]
        if not gone:
            return
        annotations = _local_work_annotations(
            EvidenceItem, (EvidenceGrade, EvidenceStatus, SourceReference, Capability)
        )
        flagged = lock_rows(EvidenceItem.objects).filter(pk__in=[o.pk for o in gone]).annotate(**annotations)
        for obj in flagged:
            reasons = [name.removeprefix("has_") for name in annotations if getattr(obj, name)]
            if reasons:
                self.report.kept.append(
                    ("evidence item", obj.code, f"no longer in the document, referenced by {', '.join(reasons)}")
                )
                continue
            before = {"conclusion": obj.conclusion, "grade_text": obj.grade_text, "source_text": obj.source_text}
            obj.delete()
            del self.items[obj.code]
            self.sources.pop(obj.pk, None)
            self.removed("evidence items", obj, obj.code, before)

    def remove_unused_tables(self) -> None:
        listed = {t.prefix for t in self.parsed.tables}
        used = {obj.table_id for obj in self.items.values()}
        for prefix, obj in list(self.tables.items()):
            if prefix in listed:
                continue
            if obj.pk in used:
                self.report.kept.append(("evidence table", prefix, "no longer in the document, still holds kept items"))
                continue
            before = _values(obj, ["prefix", *TABLE_FIELDS])
            obj.delete()
            del self.tables[prefix]
            self.removed("evidence tables", obj, prefix, before)

    def remove_unused_aliases(self) -> None:
        listed = {a.name for a in self.parsed.aliases}
        used = {s.alias_id for sources in self.sources.values() for s in sources}
        for name, obj in list(self.aliases.items()):
            if name in listed:
                continue
            if obj.pk in used:
                self.report.kept.append(("path alias", name, "no longer in the document, still used by kept items"))
                continue
            before = _values(obj, ["name", *ALIAS_FIELDS])
            obj.delete()
            del self.aliases[name]
            self.removed("path aliases", obj, name, before)

    def sync_sections(self) -> None:
        new = []
        for section in self.parsed.sections:
            wanted = {
                "position": section.position,
                "title": section.title,
                "theme": section.theme,
                "blocks": section.blocks,
                "question_header": section.question_header,
                "acceptance_header": section.acceptance_header,
            }
            if section.code in self.sections:
                self.update("section", self.sections[section.code], section.code, wanted)
            else:
                new.append((section.code, {"code": section.code, **wanted}))
        for obj in self.create("sections", Section, new):
            self.sections[obj.code] = obj

    def sync_questions(self) -> None:
        new = []
        for question in self.parsed.questions:
            wanted = {
                "number": question.number,
                "section_id": self.sections[question.section].pk,
                "question": question.question,
                "acceptance": question.acceptance,
            }
            if question.code in self.questions:
                self.update("question", self.questions[question.code], question.code, wanted)
            else:
                new.append((question.code, {"code": question.code, **wanted}))
        for obj in self.create("questions", Question, new):
            self.questions[obj.code] = obj
        self.remove_questions()

    def remove_questions(self) -> None:
        listed = {q.code for q in self.parsed.questions}
        gone = [obj for code, obj in self.questions.items() if code not in listed]
        if not gone:
            return
        annotations = _local_work_annotations(Question, (Capability, Deliverable))
        default_priority = Question._meta.get_field("priority").default
        # Locked, so an assignment made while this runs either shows here or waits for the removal.
        flagged = lock_rows(Question.objects).filter(pk__in=[o.pk for o in gone]).annotate(**annotations)
        for obj in flagged:
            reasons = [name.removeprefix("has_") for name in annotations if getattr(obj, name)]
            if obj.assignee_id is not None:
                reasons.append("assignee")
            if obj.organisation_id is not None:
                reasons.append("organisation")
            if obj.due_date is not None:
                reasons.append("due_date")
            if obj.state != states.NEW:
                reasons.append(f"state {obj.state}")
            if obj.priority != default_priority:
                reasons.append(f"priority {obj.priority}")
            if any(d.state != Deliverable.OWED for d in self.deliverables_of(obj)):
                reasons.append("deliverables decided")
            if reasons:
                self.report.kept.append(
                    ("question", obj.code, f"no longer in the document, has local work ({', '.join(reasons)})")
                )
                continue
            before = _values(obj, ["code", "question", "acceptance"])
            for deliverable in self.deliverables_of(obj):
                del self.deliverables[(obj.pk, deliverable.key)]
                deliverable.delete()
            obj.delete()
            del self.questions[obj.code]
            self.removed("questions", obj, obj.code, before)

    def deliverables_of(self, question: Question) -> list[Deliverable]:
        return [d for (question_id, _), d in self.deliverables.items() if question_id == question.pk]

    def remove_unused_sections(self) -> None:
        listed = {s.code for s in self.parsed.sections}
        used = {q.section_id for q in self.questions.values()}
        for code, obj in list(self.sections.items()):
            if code in listed:
                continue
            if obj.pk in used:
                self.report.kept.append(("section", code, "no longer in the document, still holds kept questions"))
                continue
            before = _values(obj, ["code", "title"])
            obj.delete()
            del self.sections[code]
            self.removed("sections", obj, code, before)

    def sync_capabilities(self) -> None:
        new = []
        for position, seed in enumerate(CAPABILITIES, start=1):
            wanted = {"title": seed.title, "description": seed.description, "scope": seed.scope, "position": position}
            status = initial_status(seed, self.parsed_items)
            obj = self.capabilities.get(seed.slug)
            if obj is None:
                pinned_status = seed.status if seed.pinned else ""
                new.append(
                    (
                        seed,
                        {
                            "slug": seed.slug,
                            "status": status,
                            "pinned": seed.pinned,
                            "pinned_status": pinned_status,
                            **wanted,
                        },
                    )
                )
                continue
            self.update("capability", obj, seed.slug, wanted)
            if obj.status != status and not seed.pinned:
                self.report.notes.append(
                    f"capability {seed.slug}: the document implies {status}, its status stays {obj.status} "
                    "(only the promotion gate changes a status)"
                )
            if (obj.pinned, obj.pinned_status) != (seed.pinned, seed.status if seed.pinned else ""):
                self.report.notes.append(
                    f"capability {seed.slug}: the seed data pins it at {seed.status if seed.pinned else 'nothing'}, "
                    f"the database at {obj.pinned_status or 'nothing'}; left unchanged"
                )
        created = Capability.objects.bulk_create([Capability(**values) for _, values in new])
        created_values = {}
        for (seed, values), obj in zip(new, created, strict=True):
            self.capabilities[seed.slug] = obj
            created_values[seed.slug] = values
        self.link_capabilities(created_values)

    def link_capabilities(self, created_values: dict[str, dict]) -> None:
        """Add the links the seed data names (never remove one: a link may have been made by hand)."""
        question_codes = defaultdict(list)
        for code, slugs in QUESTION_CAPABILITIES.items():
            for slug in slugs:
                question_codes[slug].append(code)
        evidence_rows, question_rows = [], []
        for seed in CAPABILITIES:
            obj = self.capabilities[seed.slug]
            wanted_evidence, wanted_questions = list(seed.evidence), question_codes[seed.slug]
            missing = [c for c in wanted_evidence if c not in self.items]
            missing += [c for c in wanted_questions if c not in self.questions]
            if missing:
                self.report.notes.append(f"capability {seed.slug}: not linked to {', '.join(missing)} (not imported)")
            new_evidence = [
                c for c in wanted_evidence if c in self.items and (obj.pk, self.items[c].pk) not in self.evidence_links
            ]
            new_questions = [
                c
                for c in wanted_questions
                if c in self.questions and (obj.pk, self.questions[c].pk) not in self.question_links
            ]
            evidence_rows += [(obj.pk, self.items[c].pk) for c in new_evidence]
            question_rows += [(obj.pk, self.questions[c].pk) for c in new_questions]
            links = {"evidence": new_evidence, "questions": new_questions}
            if seed.slug in created_values:
                self.added("capabilities", obj, seed.slug, {**created_values[seed.slug], **links})
            elif new_evidence or new_questions:
                self.report.changed.append(("capability", seed.slug, [f"linked {n}" for n, c in links.items() if c]))
                self.audit(action="checklist.link", obj=obj, after=links)
        evidence_through = Capability.evidence.through
        evidence_through.objects.bulk_create(
            [evidence_through(capability_id=c, evidenceitem_id=i) for c, i in evidence_rows]
        )
        question_through = Capability.questions.through
        question_through.objects.bulk_create(
            [question_through(capability_id=c, question_id=q) for c, q in question_rows]
        )

    def sync_deliverables(self) -> None:
        new = []
        for code, seeds in QUESTION_DELIVERABLES.items():
            question = self.questions.get(code)
            if question is None:
                self.report.notes.append(f"deliverables of {code}: the question is not imported")
                continue
            for position, seed in enumerate(seeds, start=1):
                wanted = {
                    "kind": seed.kind,
                    "title": seed.title,
                    "position": position,
                    "checklist": list(seed.checklist),
                    "schema_of": seed.schema_of,
                    "either": seed.either,
                    "schema_asks": seed.asks,
                    "image_sbom_components": seed.sbom_components,
                    "image_commits": [list(pair) for pair in seed.commits],
                    "sha256_prefix": seed.sha256_prefix,
                    "tool_runs_on": seed.runs_on,
                }
                obj = self.deliverables.get((question.pk, seed.key))
                if obj is None:
                    new.append((f"{code} {seed.key}", {"question_id": question.pk, "key": seed.key, **wanted}))
                else:
                    self.update("deliverable", obj, f"{code} {seed.key}", wanted)
        for obj in self.create("deliverables", Deliverable, new):
            self.deliverables[(obj.question_id, obj.key)] = obj
        self.remove_deliverables()
        self.link_deliverables()

    def remove_deliverables(self) -> None:
        listed = {
            (self.questions[code].pk, seed.key)
            for code, seeds in QUESTION_DELIVERABLES.items()
            if code in self.questions
            for seed in seeds
        }
        for ref, obj in list(self.deliverables.items()):
            if ref in listed:
                continue
            label = f"{obj.question.code} {obj.key}"
            if obj.state != Deliverable.OWED or obj.pk in self.answered_deliverables or obj.evidence_items.exists():
                self.report.kept.append(
                    ("deliverable", label, "no longer in the seed data, already answered or decided")
                )
                continue
            before = _values(obj, ["key", "kind", "title"])
            obj.delete()
            del self.deliverables[ref]
            self.removed("deliverables", obj, label, before)

    def link_deliverables(self) -> None:
        """Link each deliverable to the capabilities it proves (never unlinking one linked by hand)."""
        rows = []
        for code, seeds in QUESTION_DELIVERABLES.items():
            if code not in self.questions:
                continue
            for seed in seeds:
                obj = self.deliverables[(self.questions[code].pk, seed.key)]
                for slug in seed.capabilities:
                    capability = self.capabilities.get(slug)
                    if capability is None:
                        self.report.notes.append(f"deliverable {code} {seed.key}: unknown capability {slug}")
                    elif (capability.pk, obj.pk) not in self.deliverable_links:
                        rows.append((capability.pk, obj.pk))
                        self.audit(
                            action="checklist.link", obj=obj, after={"capability": slug, "deliverable": seed.key}
                        )
        through = Capability.deliverables.through
        through.objects.bulk_create([through(capability_id=c, deliverable_id=d) for c, d in rows])
