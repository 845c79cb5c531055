"""The reading rules of evidence.seed.parser, on the real seed document (no database)."""

import pytest

from evidence.seed.parser import ChecklistParseError, ParsedStatus, parse_checklist, parse_grade_cell

from .conftest import add_rows_after, line_number, replace_row, row_line


@pytest.fixture(scope="module")
def parsed(seed_text):
    return parse_checklist(seed_text)


@pytest.fixture(scope="module")
def items(parsed):
    return {item.code: item for item in parsed.items}


def statuses(item) -> set[tuple[str, str]]:
    return {(s.status, s.qualifier) for s in item.statuses}


def test_counts(parsed):
    assert len(parsed.sections) == 8
    assert len(parsed.questions) == 60
    assert len(parsed.items) == 91
    assert len(parsed.archives) == 3
    assert len(parsed.aliases) == 6
    assert [t.prefix for t in parsed.tables] == ["B", "R", "K", "M", "C", "A", "I", "P"]
    assert [q.code for q in parsed.questions] == [f"V{n:02d}" for n in range(1, 61)]


@pytest.mark.parametrize(
    ("code", "grades", "expected"),
    [
        ("R02", {"E1"}, {("C0", ""), ("C4", "任意寄存器")}),
        ("K05", {"E1"}, {("C0", ""), ("C1", "")}),
        ("K08", {"E2"}, {("C1", ""), ("C3", "新 calbin")}),
        ("M13", {"E1", "E4"}, {("C0", "判断")}),
        ("A11", {"E1", "E4"}, {("C0", "")}),
        ("I01", {"E2", "E3"}, {("C0", "")}),
        ("I02", {"E2", "E3"}, {("C0", "")}),
        ("I03", {"E2", "E3"}, {("C0", "")}),
        ("I04", {"E2", "E3"}, {("C0", "")}),
        ("I05", {"E2", "E3"}, {("C4", "")}),
        ("I06", {"E2"}, {("C0", "infer"), ("C1", "fixed")}),
        ("I14", {"E2"}, {("C0", "version"), ("C1", "debug"), ("C4", "debug")}),
        ("I15", {"E2"}, {("C1", ""), ("C2", "错误映射")}),
        ("A04", {"E4"}, {("C0", "")}),
        ("A17", {"E1"}, {("C3", "metadata")}),
        ("R10", {"E1"}, {("C0", "")}),
    ],
)
def test_rows_with_several_grades_or_statuses(items, seed_text, code, grades, expected):
    item = items[code]
    assert set(item.grades) == grades
    assert statuses(item) == expected
    assert item.grade_text == row_line(seed_text, code).split("|")[-2].strip()


def test_grade_text_is_kept_as_written(items):
    assert items["R02"].grade_text == "E1/C0；任意寄存器仍 C4"
    assert items["K08"].grade_text == "E2/C1 + 新 calbin C3"
    assert items["I14"].grade_text == "E2；version C0，debug C1/C4"


@pytest.mark.parametrize(
    ("code", "defect", "limitation"),
    [("A17", True, False), ("R05", True, False), ("R14", True, False), ("K03", False, True), ("R10", False, False)],
)
def test_defect_and_limitation_marks(items, code, defect, limitation):
    assert (items[code].defect, items[code].limitation) == (defect, limitation)


def test_grades_and_statuses_are_separate_scales(parsed):
    for item in parsed.items:
        assert all(g.startswith("E") for g in item.grades)
        assert all(s.status.startswith("C") for s in item.statuses)


def test_performance_table_reads_its_last_column(items):
    assert set(items["P01"].grades) == {"E1"}
    assert items["P01"].statuses == ()
    assert items["P01"].explanation == "E1；原始记录可保留"
    for code in ["P02", "P03", "P04", "P05"]:
        assert items[code].grades == frozenset()
        assert items[code].grade_text == ""
    assert items["P02"].explanation == "标签不可信"
    assert items["P04"].explanation == "只作为趋势，不作为正式基线"
    assert items["R01"].explanation == ""


def test_same_file_takes_the_file_of_the_row_above(items):
    (source,) = items["R05"].sources
    assert (source.alias, source.path, source.lines, source.same_file) == (
        "$SRC",
        "src/llama-calrt.cpp",
        ":171-177",
        True,
    )
    assert source.raw == "同文件 `:171-177`"
    (r07,) = items["R07"].sources
    assert (r07.path, r07.line_ranges) == ("src/llama-calrt.cpp", ((820, 851),))
    (r18,) = items["R18"].sources
    assert (r18.alias, r18.path) == ("$SRC", "tools/server/server.cpp")
    (b02,) = items["B02"].sources
    assert (b02.alias, b02.path) == ("$BASE", "environment/container-image-inspect.json")
    (m07,) = items["M07"].sources  # 同 YAML
    assert (m07.alias, m07.path, m07.same_file) == ("$MODEL", "*.yaml", True)


def test_several_references_in_one_cell(items):
    b03 = items["B03"].sources
    assert [(s.alias, s.path, s.lines, s.same_file) for s in b03] == [
        ("$BASE", "environment/container-image-inspect.json", ":220", True),
        ("$SRC", "build/CMakeCache.txt", ":690", False),
    ]
    r10 = items["R10"].sources  # 、 and a bare line range: same file as the reference before it
    assert [(s.path, s.line_ranges) for s in r10] == [
        ("src/llama-calrt.cpp", ((909, 924),)),
        ("src/llama-calrt.cpp", ((1174, 1212),)),
    ]
    i07 = items["I07"].sources  # + between a path and a description
    assert [(s.raw, s.alias, s.path) for s in i07] == [
        ("`$SDK/include/calrt/calrt_buffer.h:115-145`", "$SDK", "include/calrt/calrt_buffer.h"),
        ("符号", "", ""),
    ]
    assert [s.raw for s in items["C06"].sources] == ["完整文件 inventory", "OCI history"]
    assert all(not s.has_file and not s.lines for s in items["C06"].sources)


def test_line_lists_and_paths_without_alias(items):
    pdf = items["I02"].sources[0]
    assert (pdf.alias, pdf.path, pdf.lines, pdf.line_ranges) == ("$PDFTXT", "", ":230,475", ((230, 230), (475, 475)))
    assert items["I05"].sources[0].line_ranges == ((423, 425), (512, 512))
    git_log = items["B08"].sources[0]
    assert (git_log.alias, git_log.path, git_log.line_ranges) == ("", "llama-git-log-500.txt", ((1, 1), (7, 27)))
    client = items["P02"].sources[0]
    assert (client.alias, client.path, client.line_ranges) == ("", "client_new.py", ((183, 183),))
    assert items["A07"].sources[0].line_ranges == ((19, 32), (33, 46))


def test_first_reference_of_a_cell_never_guesses_a_file_from_another_row(items):
    first, second = items["R19"].sources
    assert (first.path, first.alias, first.line_ranges) == ("", "", ((2409, 2411),))
    assert (second.path, second.line_ranges) == ("", ((4351, 4361),))


def test_aliases_expand_through_each_other(parsed):
    aliases = {a.name: a for a in parsed.aliases}
    assert aliases["$SRC"].path == "$ROOT/llama.cpp-full/llama.cpp"
    assert aliases["$SRC"].expanded_path == (
        "outputs/Calculet-NPU-analysis-bundle-20260801/remote-export/extracted/llama.cpp-full/llama.cpp"
    )
    assert aliases["$PDFTXT"].expanded_path == "tmp/pdfs/runtime-api.txt"


def test_sections_and_document(parsed):
    first = parsed.sections[0]
    assert (first.code, first.theme, first.blocks) == ("12.1", "编译器与可复现供应链", "阻断新模型")
    assert (first.question_header, first.acceptance_header) == ("必须确认/交付", "验收形式")
    assert parsed.sections[3].blocks == ""
    assert parsed.date == "2026-08-02"
    assert parsed.acceptance_chain.startswith("vendor claim -> versioned artifact")
    assert parsed.acceptance_chain.endswith("service integration -> load/soak/perf")
    assert "版本、可执行资产、最小示例、错误路径、golden 和兼容范围" in parsed.closing_rule


def test_grade_cell_rule_on_its_own():
    cell = parse_grade_cell("E2/C1 + 新 calbin C3")
    assert cell.grades == frozenset({"E2"})
    assert cell.statuses == (ParsedStatus("C1", ""), ParsedStatus("C3", "新 calbin"))


def problems_of(text: str) -> list[str]:
    with pytest.raises(ChecklistParseError) as error:
        parse_checklist(text)
    return [str(p) for p in error.value.problems]


def test_same_file_on_a_table_s_first_row_is_an_error(seed_text):
    broken = replace_row(seed_text, "R01", "| R01 | 创建 | 同文件 `:41-44` | E1/C0 |")
    line = line_number(broken, row_line(broken, "R01"))
    assert problems_of(broken) == [
        f"line {line}: R01: '同文件 `:41-44`' refers to the file of the row above, which names no file"
    ]


def test_unknown_alias_and_backward_range_are_errors(seed_text):
    broken = add_rows_after(
        seed_text, "B08", ["| B09 | x | `$NOPE/a.txt:1` | E1/C0 |", "| B10 | y | `a.txt:9-3` | E1/C0 |"]
    )
    problems = problems_of(broken)
    assert len(problems) == 2
    assert "B09: unknown path alias $NOPE" in problems[0]
    assert "B10: line range 9-3 runs backwards" in problems[1]


def test_every_problem_is_reported_at_once(seed_text):
    broken = replace_row(seed_text, "B04", "| B04 | x | y | E7/C0 |")
    broken = replace_row(broken, "V10", "| V10 | 只有两列 |")
    problems = problems_of(broken)
    assert len(problems) == 2
    assert "unknown evidence grade E7" in problems[0]
    assert "row has 2 cells" in problems[1]
