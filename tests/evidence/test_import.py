import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from calculet.models import AuditEntry
from evidence.models import (
    Archive,
    Capability,
    ChecklistDocument,
    EvidenceItem,
    EvidenceTable,
    PathAlias,
    SourceReference,
)
from evidence.seed.capabilities import CAPABILITIES, QUESTION_CAPABILITIES
from evidence.seed.importer import ACTOR, checklist_import
from evidence.seed.parser import parse_checklist
from vendor.models import Answer, Organisation, Question, Section

from .conftest import add_rows_after, line_number, remove_row, replace_row, row_line, snapshot

pytestmark = pytest.mark.django_db

# Loading everything the document describes, plus the transaction's savepoint and the advisory lock.
NO_OP_QUERIES = 19


def run_command(*args) -> str:
    out = io.StringIO()
    call_command("import_checklist", *args, stdout=out)
    return out.getvalue()


def write(tmp_path, text: str):
    path = tmp_path / "checklist.md"
    path.write_text(text, encoding="utf-8")
    return path


def bigger_seed(text: str) -> str:
    """The seed with 20 more evidence rows and 9 more questions."""
    text = add_rows_after(
        text, "B08", [f"| B{n:02d} | 新增结论 {n} | `$SRC/src/x{n}.cpp:{n}` | E1/C0 |" for n in range(9, 29)]
    )
    return add_rows_after(text, "V60", [f"| V{n} | 新增问题 {n} | 新增答案 {n} |" for n in range(61, 70)])


def test_counts_on_the_real_seed(checklist):
    assert Section.objects.count() == 8
    assert Question.objects.count() == 60
    assert EvidenceItem.objects.count() == 91
    assert Archive.objects.count() == 3
    assert PathAlias.objects.count() == 6
    assert EvidenceTable.objects.count() == 8
    document = ChecklistDocument.objects.get()
    assert document.date == "2026-08-02"
    assert len(document.source_sha256) == 64
    assert "vendor claim -> versioned artifact" in document.acceptance_chain
    assert "0.7.6 多物理设备保持 C4" in document.closing_rule
    assert Question.objects.get(code="V18").section.code == "12.3"


def test_multi_status_rows_are_stored_with_their_qualifiers(checklist):
    r02 = EvidenceItem.objects.get(code="R02")
    assert [g.grade for g in r02.grades.all()] == ["E1"]
    assert sorted((s.status, s.qualifier) for s in r02.statuses.all()) == [("C0", ""), ("C4", "任意寄存器")]
    i06 = EvidenceItem.objects.get(code="I06")
    assert sorted((s.status, s.qualifier) for s in i06.statuses.all()) == [("C0", "infer"), ("C1", "fixed")]
    assert EvidenceItem.objects.get(code="A17").defect
    assert EvidenceItem.objects.get(code="K03").limitation


def test_sources_are_stored_resolved(checklist):
    r07 = SourceReference.objects.select_related("alias").get(item__code="R07")
    assert (r07.alias.name, r07.path, r07.lines, r07.line_ranges, r07.same_file) == (
        "$SRC",
        "src/llama-calrt.cpp",
        ":820-851",
        [[820, 851]],
        True,
    )
    i02 = list(SourceReference.objects.filter(item__code="I02").order_by("position"))
    assert [(s.alias.name if s.alias else "", s.path, s.line_ranges) for s in i02] == [
        ("$PDFTXT", "", [[230, 230], [475, 475]]),
        ("", "calrt_calbin.h", [[37, 37]]),
    ]


def test_capabilities_are_seeded_with_their_initial_status(checklist):
    capabilities = {c.slug: c for c in Capability.objects.all()}
    pinned = {slug: (c.status, c.pinned_status, c.scope) for slug, c in capabilities.items() if c.pinned}
    assert pinned == {
        "multi-board": ("C3", "C3", ""),
        "two-models-one-chiplet": ("C3", "C3", ""),
        "expert-parallel": ("C3", "C3", ""),
        "dynamic-resident-multi-model": ("C3", "C3", ""),
        "npu-sampling": ("C3", "C3", ""),
        "multi-physical-device-calrt-0-7-6": ("C4", "C4", "CalRT 0.7.6"),
    }
    # Every evidence row naming a C1 status has a capability at C1 linked to it.
    c1_rows = set(EvidenceItem.objects.filter(statuses__status="C1").values_list("code", flat=True))
    assert c1_rows == {"K05", "K07", "K08", "I06", "I07", "I08", "I11", "I12", "I13", "I14", "I15"}
    for code in c1_rows:
        assert Capability.objects.filter(evidence__code=code, status="C1").exists(), code
    assert capabilities["fixed-task-infer"].status == "C1"
    for slug in ["decode-batch-4", "decode-batch-8", "decode-batch-16"]:
        assert (capabilities[slug].status, capabilities[slug].pinned) == ("C3", False)
    linked = {q.code: {c.slug for c in q.capabilities.all()} for q in Question.objects.prefetch_related("capabilities")}
    assert {"decode-batch-4", "decode-batch-8", "decode-batch-16"} <= linked["V18"]
    assert "npu-sampling" in linked["V17"]
    assert "parallel-mode" in linked["V20"]
    assert {"single-chiplet", "two-models-one-chiplet"} <= linked["V30"]
    assert linked["V31"] == {"two-models-two-chiplets"}
    assert "dynamic-resident-multi-model" in linked["V35"]
    assert {"pipeline-parallel", "expert-parallel"} <= linked["V32"]
    assert linked["V36"] == set()  # a roadmap: a document, which moves no capability
    assert linked["V23"] == {"job-cancel-timeout"}
    assert {slug for slugs in QUESTION_CAPABILITIES.values() for slug in slugs} <= set(capabilities)


def test_the_capability_data_names_real_rows_and_statuses(seed_text):
    parsed = parse_checklist(seed_text)
    items = {item.code: item for item in parsed.items}
    questions = {q.code for q in parsed.questions}
    slugs = [seed.slug for seed in CAPABILITIES]
    assert len(slugs) == len(set(slugs))
    for seed in CAPABILITIES:
        assert set(seed.evidence) <= set(items), seed.slug
        if seed.status_from:
            code, qualifier = seed.status_from
            assert (seed.status, qualifier) in {(s.status, s.qualifier) for s in items[code].statuses}, seed.slug
    assert set(QUESTION_CAPABILITIES) <= questions


def test_an_evidence_row_sets_a_new_capability_s_status(db, seed_text):
    text = seed_text.replace("| E2/C0 infer、C1 fixed |", "| E2/C0 infer、C2 fixed |")
    checklist_import(text)
    assert Capability.objects.get(slug="fixed-task-infer").status == "C2"


def test_import_writes_audit_rows(checklist):
    entries = AuditEntry.objects.filter(actor_label=ACTOR)
    assert entries.filter(action="checklist.add", object_type="vendor.question").count() == 60
    assert entries.filter(action="checklist.add", object_type="evidence.evidenceitem").count() == 91
    assert entries.filter(action="checklist.add", object_type="evidence.capability").count() == len(CAPABILITIES)
    call_command("verify_audit", stdout=io.StringIO())


def test_second_import_changes_nothing(checklist, seed_text, django_assert_num_queries):
    before = snapshot()
    with django_assert_num_queries(NO_OP_QUERIES) as captured:
        report = checklist_import(seed_text)
    writes = [q["sql"] for q in captured.captured_queries if q["sql"].split()[0] in {"INSERT", "UPDATE", "DELETE"}]
    assert writes == []
    assert not report.has_changes
    assert report.lines() == []
    assert snapshot() == before


def test_second_import_costs_the_same_queries_for_a_bigger_document(db, seed_text, django_assert_num_queries):
    text = bigger_seed(seed_text)
    checklist_import(text)
    assert EvidenceItem.objects.count() == 111
    assert Question.objects.count() == 69
    with django_assert_num_queries(NO_OP_QUERIES):
        report = checklist_import(text)
    assert not report.has_changes


def test_command_reports_an_up_to_date_database(checklist):
    assert "already up to date, nothing changed" in run_command()


def test_changed_document_is_applied_without_losing_local_work(checklist, seed_text, tmp_path):
    user = get_user_model().objects.create_user("pm1")
    Question.objects.filter(code__in=["V07", "V12"]).update(assignee=user)
    old_v12 = row_line(seed_text, "V12")
    text = replace_row(
        seed_text, "V12", "| V12 | 自定义 op/kernel SDK 如何使用（含调试） | 示例、ABI、调试器、性能计数器 |"
    )
    text = add_rows_after(text, "V60", ["| V61 | 新问题 | 新答案 |"])
    text = remove_row(text, "V05")
    text = remove_row(text, "V07")
    text = add_rows_after(text, "B08", ["| B09 | 新结论 | `$SRC/CMakeLists.txt:1` | E1/C0 |"])
    text = remove_row(text, "R05")
    text = text.replace("| E2/C0 infer、C1 fixed |", "| E2/C0 infer、C0 fixed |")
    audit_before = AuditEntry.objects.count()

    output = run_command(str(write(tmp_path, text)))

    assert "added 1 questions: V61" in output
    assert "changed question V12: question" in output
    assert "removed 1 questions: V05" in output
    assert "kept question V07: no longer in the document, has local work (assignee)" in output
    assert "added 1 evidence items: B09" in output
    assert "removed 1 evidence items: R05" in output
    assert "changed evidence item I06: statuses" in output
    assert "capability fixed-task-infer: the document implies C0, its status stays C1" in output

    v12 = Question.objects.get(code="V12")
    assert v12.question == "自定义 op/kernel SDK 如何使用（含调试）"
    assert v12.assignee == user
    assert Question.objects.get(code="V07").assignee == user
    assert not Question.objects.filter(code="V05").exists()
    assert Question.objects.get(code="V61").section.code == "12.8"
    assert not EvidenceItem.objects.filter(code="R05").exists()
    assert EvidenceItem.objects.get(code="B09").sources.get().path == "CMakeLists.txt"
    assert Capability.objects.get(slug="fixed-task-infer").status == "C1"

    audit = AuditEntry.objects.order_by("id")[audit_before:]
    recorded = {(e.action, e.object_repr) for e in audit}
    assert {("checklist.add", "V61"), ("checklist.change", "V12"), ("checklist.remove", "V05")} <= recorded
    assert all(e.actor_label == ACTOR for e in audit)
    change = next(e for e in audit if e.object_repr == "V12")
    assert change.before == {"question": old_v12.split("|")[2].strip()}

    # The same document again: only the standing notes, nothing written.
    before = snapshot()
    output = run_command(str(write(tmp_path, text)))
    assert "already up to date, nothing changed" in output
    assert "kept question V07" in output
    assert snapshot() == before


def test_a_question_with_answers_is_kept(checklist, seed_text):
    organisation = Organisation.objects.create(slug="calculet-vendor", name="Vendor", kind=Organisation.VENDOR)
    Answer.objects.create(question=Question.objects.get(code="V09"), organisation=organisation, revision=1)
    report = checklist_import(remove_row(seed_text, "V09"))
    assert ("question", "V09", "no longer in the document, has local work (answers)") in report.kept
    assert Question.objects.filter(code="V09").exists()


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda t: replace_row(t, "R05", "| R05 | KV Apply 失败无限忙等 | E1/C0 缺陷 |"), "row has 3 cells"),
        (lambda t: replace_row(t, "R06", row_line(t, "R06").replace("R06", "R05")), "code R05 appears twice"),
        (lambda t: replace_row(t, "B04", row_line(t, "B04").replace("E1/C0", "E7/C0")), "unknown evidence grade E7"),
        (lambda t: replace_row(t, "V18", row_line(t, "V18").replace("V18", "V1")), "question code 'V1' is not"),
    ],
    ids=["missing-column", "duplicate-code", "grade-E7", "bad-code"],
)
def test_malformed_rows_are_rejected_naming_the_line(checklist, seed_text, tmp_path, edit, problem):
    text = edit(seed_text)
    changed_line = next(
        n for n, (a, b) in enumerate(zip(seed_text.splitlines(), text.splitlines(), strict=True), start=1) if a != b
    )
    before = snapshot()
    with pytest.raises(CommandError) as error:
        run_command(str(write(tmp_path, text)))
    assert error.value.returncode != 0
    assert "nothing changed" in str(error.value)
    assert f"line {changed_line}: " in str(error.value)
    assert problem in str(error.value)
    assert snapshot() == before


def test_a_section_heading_out_of_order_is_rejected(checklist, seed_text, tmp_path):
    text = seed_text.replace("## 5. 当前执行链证据", "## 6. 当前执行链证据").replace(
        "## 6. KV adapter", "## 5. KV adapter"
    )
    before = snapshot()
    with pytest.raises(CommandError) as error:
        run_command(str(write(tmp_path, text)))
    line = line_number(text, "## 6. 当前执行链证据")
    assert f"line {line}: section 6 is out of order: section 5 expected" in str(error.value)
    assert snapshot() == before


def test_a_failure_while_writing_rolls_everything_back(checklist, seed_text, tmp_path):
    EvidenceItem.objects.create(code="B09", origin=EvidenceItem.RUN, conclusion="from a run")
    text = replace_row(seed_text, "V12", "| V12 | 改过的问题 | 改过的答案 |")
    text = add_rows_after(text, "B08", ["| B09 | 新结论 | 无 | E1/C0 |"])
    before = snapshot()
    with pytest.raises(CommandError, match="B09 is already used by an evidence item of a run"):
        run_command(str(write(tmp_path, text)))
    assert snapshot() == before


def test_a_missing_file_is_an_error():
    with pytest.raises(CommandError, match="cannot read"):
        run_command("/nonexistent/checklist.md")


def test_evidence_sections_can_trade_places(checklist, seed_text):
    start = seed_text.index("## 5. 当前执行链证据")
    middle = seed_text.index("## 6. KV adapter 证据")
    end = seed_text.index("## 7. 模型结构")
    r_section, k_section = seed_text[start:middle], seed_text[middle:end]
    swapped = (
        seed_text[:start]
        + k_section.replace("## 6. KV adapter 证据", "## 5. KV adapter 证据")
        + r_section.replace("## 5. 当前执行链证据", "## 6. 当前执行链证据")
        + seed_text[end:]
    )
    report = checklist_import(swapped)
    assert ("evidence table", "R", ["section"]) in report.changed
    assert EvidenceTable.objects.get(prefix="K").section == 5
    assert EvidenceTable.objects.get(prefix="R").section == 6
    change = AuditEntry.objects.filter(action="checklist.change", object_repr__startswith="6.").get()
    assert (change.before, change.after) == ({"section": 5}, {"section": 6})


def test_the_database_refuses_what_the_document_rules_out(checklist):
    item = EvidenceItem.objects.get(code="R07")
    with pytest.raises(IntegrityError), transaction.atomic():
        SourceReference.objects.create(item=item, position=9, raw="同文件 :1", same_file=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        EvidenceItem.objects.create(code="R7", table=item.table, conclusion="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        item.grades.create(grade="C1")
    with pytest.raises(IntegrityError), transaction.atomic():
        item.statuses.create(status="E1")
