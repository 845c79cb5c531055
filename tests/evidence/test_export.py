import csv
import io
import json
import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import translation

from acceptance.selectors import checklist_download
from evidence.exporter import checklist_csv, checklist_export, checklist_json, checklist_markdown
from evidence.seed.importer import checklist_import
from vendor.models import Question

from .conftest import add_rows_after

pytestmark = pytest.mark.django_db


def plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def seed_tables(text: str) -> dict:
    """The seed's rows read the simplest way: every table line whose first cell is a code."""
    rows = {"evidence": {}, "questions": {}, "sections": [], "archives": [], "aliases": []}
    section = None
    for line in text.splitlines():
        if match := re.match(r"^### (12\.\d) (.+)$", line):
            section = match.group(1)
            rows["sections"].append({"code": match.group(1), "title": plain(match.group(2))})
        elif match := re.match(r"^(\$[A-Z]+)\s+= (\S+)$", line):
            rows["aliases"].append({"name": match.group(1), "path": match.group(2)})
        elif line.startswith("| `") and (sha := re.search(r"`([0-9a-f]{64})`", line)):
            rows["archives"].append({"name": line.split("`")[1], "sha256": sha.group(1)})
        elif line.startswith("| "):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if re.fullmatch(r"V\d\d", cells[0]):
                rows["questions"][cells[0]] = {"section": section, "question": cells[1], "acceptance": cells[2]}
            elif re.fullmatch(r"[A-Z]\d\d", cells[0]):
                rows["evidence"][cells[0]] = cells
    return rows


def test_json_matches_the_seed_row_for_row(checklist, seed_text):
    exported = json.loads(checklist_json())
    seed = seed_tables(seed_text)

    assert [{"code": s["code"], "title": s["title"]} for s in exported["sections"]] == seed["sections"]
    assert [{"name": a["name"], "path": a["path"]} for a in exported["aliases"]] == seed["aliases"]
    assert [{"name": a["name"], "sha256": a["sha256"]} for a in exported["archives"]] == seed["archives"]

    assert [q["code"] for q in exported["questions"]] == list(seed["questions"])
    for question in exported["questions"]:
        row = seed["questions"][question["code"]]
        assert question["section"] == row["section"]
        assert question["question"] == plain(row["question"])
        assert question["acceptance"] == plain(row["acceptance"])
        assert question["state"] == "new"

    assert [e["code"] for e in exported["evidence"]] == list(seed["evidence"])
    for item in exported["evidence"]:
        code, conclusion, sources, last = seed["evidence"][item["code"]]
        assert item["conclusion"] == plain(conclusion)
        assert item["source_text"] == plain(sources)
        assert item["grades"] == sorted(set(re.findall(r"E[0-4]", last)))
        assert item["statuses"] == sorted(set(re.findall(r"C[0-4]", last)))
        if code.startswith("P"):
            assert item["explanation"] == plain(last)
        else:
            assert item["grade_text"] == plain(last)
        assert item["sources"], code

    slugs = {c["slug"]: c for c in exported["capabilities"]}
    assert slugs["multi-physical-device-calrt-0-7-6"]["status"] == "C4"
    assert slugs["multi-physical-device-calrt-0-7-6"]["pinned"] is True
    assert (slugs["decode-batch-4"]["status"], slugs["decode-batch-4"]["pinned"]) == ("C3", False)


def test_json_keeps_grades_and_statuses_apart(checklist):
    evidence = {e["code"]: e for e in json.loads(checklist_json())["evidence"]}
    assert (evidence["I01"]["grades"], evidence["I01"]["statuses"]) == (["E2", "E3"], ["C0"])
    assert (evidence["K05"]["grades"], evidence["K05"]["statuses"]) == (["E1"], ["C0", "C1"])
    assert {"status": "C4", "qualifier": "任意寄存器"} in evidence["R02"]["status_qualifiers"]
    r07 = evidence["R07"]["sources"][0]
    assert (r07["alias"], r07["path"], r07["line_ranges"], r07["same_file"]) == (
        "$SRC",
        "src/llama-calrt.cpp",
        [[820, 851]],
        True,
    )


def test_markdown_regenerates_the_checklist_with_live_columns(checklist):
    Question.objects.filter(code="V18").update(state="asked", priority="p0")
    text = checklist_markdown()
    headings = re.findall(r"^### (12\.\d) ", text, flags=re.MULTILINE)
    assert headings == [f"12.{n}" for n in range(1, 9)]
    columns = "State | Priority | Owner | Due date | Capability statuses | Deliverables owed | What its runs prove"
    assert f"| # | 必须确认/交付 | 验收形式 | {columns} |" in text
    rows = [line for line in text.splitlines() if re.match(r"^\| V\d\d \|", line)]
    assert len(rows) == 60
    v18 = next(line for line in rows if line.startswith("| V18 |"))
    assert "| Asked | P0 |" in v18
    assert "decode-batch-4 C3" in v18
    assert "package-batch-4 (calbin package, Owed)" in v18  # no progress: the command cannot read the chains
    assert all(line.count(" | ") == 9 for line in rows)


def test_csv_is_one_row_per_question(checklist):
    text = checklist_csv()
    assert text.startswith("\ufeffcode,")  # the byte order mark Excel needs to read UTF-8
    rows = list(csv.DictReader(io.StringIO(text.removeprefix("\ufeff"))))
    assert [r["code"] for r in rows] == [f"V{n:02d}" for n in range(1, 61)]
    v02 = rows[1]
    assert v02["question"] == "calcc 575c2d... 和 TVM 7aebd1... 是否可发布"
    assert (v02["section"], v02["state"], v02["priority"]) == ("12.1", "new", "p2")
    assert "decode-batch-16 C3" in rows[17]["capabilities"]


def test_the_csv_headings_are_in_the_readers_language_over_cells_of_codes(checklist):
    english = checklist_csv().removeprefix("\ufeff").splitlines()
    with translation.override("zh-hans"):
        chinese = checklist_csv().removeprefix("\ufeff").splitlines()
    assert english[0].startswith("code,section,question,acceptance,state,priority,")
    assert chinese[0] == "编号,小节,问题,验收形式,状态,优先级,组织,负责人,截止日期,能力,待交付物,运行证明"
    assert chinese[1:] == english[1:]  # the same cells: codes, and the document's own text


def test_export_command_writes_stdout_or_a_file(checklist, tmp_path):
    out = io.StringIO()
    call_command("export_checklist", "--format", "json", stdout=out)
    assert len(json.loads(out.getvalue())["questions"]) == 60
    target = tmp_path / "checklist.csv"
    call_command("export_checklist", "--format", "csv", "--out", str(target), stderr=io.StringIO())
    assert target.read_bytes().decode() == checklist_download("csv")


def test_the_export_command_says_what_the_runs_prove_and_where_the_chains_stand(checklist):
    """The command writes what the reports page's download writes: evidence alone (`checklist_export` without
    acceptance's facts) leaves `runs_prove` and the progress empty."""
    out = io.StringIO()
    call_command("export_checklist", "--format", "csv", stdout=out)
    rows = {row["code"]: row for row in csv.DictReader(io.StringIO(out.getvalue().lstrip("\ufeff")))}
    assert rows["V46"]["runs_prove"] == (
        "error-code-runs: simulator integration (calculet's integration against the documented semantics "
        "(simulator)), hardware board (the board)"
    )
    assert "package-batch-4 (calbin, owed; simulator: none, hardware: none)" in rows["V18"]["deliverables_owed"]
    bare = {row["code"]: row for row in csv.DictReader(io.StringIO(checklist_export("csv").lstrip("\ufeff")))}
    assert bare["V46"]["runs_prove"] == "" and "simulator:" not in bare["V18"]["deliverables_owed"]


def test_json_export_query_count_does_not_grow_with_rows(db, seed_text, django_assert_num_queries):
    checklist_import(seed_text)
    with CaptureQueriesContext(connection) as seed_queries:
        checklist_json()
    checklist_import(add_rows_after(seed_text, "V60", [f"| V{n} | 问 {n} | 答 {n} |" for n in range(61, 80)]))
    with django_assert_num_queries(len(seed_queries)):
        checklist_json()


def test_markdown_speaks_the_readers_language_and_keeps_the_documents_text(checklist, tmp_path):
    Question.objects.filter(code="V18").update(state="asked", priority="p0")
    with translation.override("zh-hans"):
        text = checklist_markdown()
    assert "| # | 必须确认/交付 | 验收形式 | 状态 | 优先级 | 负责 | 截止日期 | 能力状态 |" in text
    v18 = next(line for line in text.splitlines() if line.startswith("| V18 |"))
    assert "| 已提问 | P0 |" in v18
    assert "package-batch-4（calbin 包，待交付）" in v18 and "(calbin, owed)" not in v18
    assert "## 能力状态" in text and "| 能力 | 状态 | 固定 | 范围 |" in text
    assert not re.search(r"\b(Asked|New|State|Priority|Capability)\b", text)
    target = tmp_path / "checklist.md"
    call_command(
        "export_checklist", "--format", "md", "--language", "zh-hans", "--out", str(target), stderr=io.StringIO()
    )
    with translation.override("zh-hans"):
        assert target.read_text(encoding="utf-8") == checklist_download("md")
