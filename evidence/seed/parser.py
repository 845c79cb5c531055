"""Read the checklist document (Markdown) into plain data. No ORM here: the import compares this with the database.

The document is read whole before anything is written; every problem found is reported with its line.

Structure expected: `# title`, a `日期：` line, then `## 1.` … `## 13.` numbered one after the other
(`### 12.1` … under section 12, also consecutive). What each section holds:

- 1: the table of evidence grades, which must list exactly E0–E4;
- 2: a ```text block of path aliases, `$NAME = path` (a path may start with an alias defined above it);
- 3: the archives table (name, SHA-256 of 64 lower-case hex digits, description);
- 4–11: one evidence table each, columns ID / conclusion / sources / grade-status. Codes are a capital
  letter and two digits; one table holds one letter. A table whose last column is headed `解释` (section 11)
  keeps that cell as the explanation and reads grades/statuses from it if it names any; every other table
  must name at least one grade and one status in its last column. Text after the table is the table's note;
- 12.1–12.8: one question table each, columns # / question / acceptance, codes `V` and two digits;
- 13: the closing rule (its paragraphs) and the acceptance chain (its code block).

A table row with more or fewer cells than its header, a code seen twice, an unknown grade or status
(`E7`, `C9`) and a heading out of order are errors. Cells keep their Markdown as written (`\\|` unescaped).

Grade/status cells. The cell is cut into clauses at `；` `，` `、` and at a `+` with spaces around it
(`E2/C1 + 新 calbin C3`), each clause into parts at `/` and `+` (`E1+E4/C0`). A part holds at most one
grade (E0–E4) or status (C0–C4) token. Grades form a set; any text around a grade (`E4 推算`) is a remark
kept only in the raw text. A status's qualifier is the text around its token (`C0 infer`, `新 calbin C3`,
`C3 metadata 缺陷` -> `metadata`); a status part with no text of its own takes the text before the first
status of its clause (`debug C1/C4` -> both `debug`). `缺陷` anywhere sets the defect mark, `限制` the
limitation mark; neither word nor the connective `仍` (`任意寄存器仍 C4`) is part of a qualifier. Clauses
without a token (`尚缺全场景测试`, `并发阻断`) are remarks kept only in the raw text.

Source cells. The cell is cut into references at `；` `，` `、` and at a spaced `+`; every reference keeps
its raw text. In a reference, a path is an alias token (`$SRC/src/llama-calrt.cpp`, `$PDFTXT`) or an ASCII
token with a file extension (`llama-git-log-500.txt`, `*.profparts`); if there are several, the one
followed by line numbers wins, else the last (`X 输出 Y` names Y). Line numbers are every `:a-b,c` group
(`:820-851`, `:230,475`, `:19-32` 和 `:33-46`). A reference without a path takes a file:
- `同文件`, `同上`, `同 YAML`, `同 TSV` (the "same file" marks): the first file named in the row above
  (an error if that row names none);
- only line numbers (`encoder :1037-1038`, `:1174-1212`): the file of the reference before it in the same
  cell, if that one has a file; the first reference of a cell never guesses a file from another row.
Anything else is a description (`完整文件 inventory`, `nm -D`). Unknown aliases and ranges running
backwards are errors.
"""

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field

from evidence.grades import GRADES, STATUSES

EVIDENCE_SECTIONS = range(4, 12)
QUESTION_SECTION = 12
RULE_SECTION = 13
LAST_SECTION = 13

EXPLANATION_HEADER = "解释"
DEFECT_WORD = "缺陷"
LIMITATION_WORD = "限制"
CONNECTIVES = ("仍",)

EVIDENCE_CODE = re.compile(r"^[A-Z][0-9]{2}$")
QUESTION_CODE = re.compile(r"^V[0-9]{2}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
ALIAS_LINE = re.compile(r"^(\$[A-Z][A-Z0-9_]*)\s*=\s*(\S+)$")
TOKEN = re.compile(r"(?<![A-Za-z0-9])([EC])([0-9]+)(?![A-Za-z0-9])")
CELL_SEPARATOR = re.compile(r"[；，、]|\s\+\s")
PART_SEPARATOR = re.compile(r"[/+]")
ALIAS_PATH = re.compile(r"\$[A-Z][A-Z0-9_]*(?:/[A-Za-z0-9_*.\-/]*)?")
ASCII_TOKEN = re.compile(r"[A-Za-z0-9_*.\-/]+")
HAS_EXTENSION = re.compile(r"[A-Za-z0-9_*\-]\.[A-Za-z]")
LINES = re.compile(r":([0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*)(?![0-9])")
SAME_FILE = re.compile(r"同(?:文件|上|\s*[A-Z]{2,})")
HEADING = re.compile(r"^(#{1,3})\s+(.*?)\s*$")
SECTION_HEADING = re.compile(r"^([0-9]+)\.\s+(.+)$")
SUBSECTION_HEADING = re.compile(r"^([0-9]+)\.([0-9]+)\s+(.+)$")
PARENTHESIS = re.compile(r"^(.*?)\s*（(.+)）$")
DATE_LINE = re.compile(r"^日期[：:]\s*(.+?)\s*$")


@dataclass(frozen=True)
class Problem:
    line: int
    message: str

    def __str__(self):
        return f"line {self.line}: {self.message}"


class ChecklistParseError(Exception):
    """The document cannot be imported; `problems` names each line and what is wrong there."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: p.line)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class ParsedStatus:
    status: str
    qualifier: str = ""


@dataclass(frozen=True)
class GradeCell:
    grades: frozenset[str]
    statuses: tuple[ParsedStatus, ...]
    defect: bool
    limitation: bool


@dataclass(frozen=True)
class ParsedSource:
    position: int
    raw: str
    alias: str = ""
    path: str = ""
    lines: str = ""
    line_ranges: tuple[tuple[int, int], ...] = ()
    same_file: bool = False

    @property
    def has_file(self) -> bool:
        return bool(self.alias or self.path)


UNRESOLVED = ParsedSource(0, "", path="(unresolved)")


@dataclass(frozen=True)
class ParsedAlias:
    name: str
    path: str
    expanded_path: str
    position: int
    line: int


@dataclass(frozen=True)
class ParsedArchive:
    name: str
    sha256: str
    description: str
    position: int
    line: int


@dataclass
class ParsedTable:
    prefix: str
    section: int
    title: str
    line: int
    note: str = ""


@dataclass(frozen=True)
class ParsedItem:
    code: str
    table: str
    position: int
    conclusion: str
    source_text: str
    grade_text: str
    explanation: str
    grades: frozenset[str]
    statuses: tuple[ParsedStatus, ...]
    defect: bool
    limitation: bool
    sources: tuple[ParsedSource, ...]
    line: int


@dataclass(frozen=True)
class ParsedSection:
    code: str
    position: int
    title: str
    theme: str
    blocks: str
    question_header: str
    acceptance_header: str
    line: int


@dataclass(frozen=True)
class ParsedQuestion:
    code: str
    number: int
    section: str
    question: str
    acceptance: str
    line: int


@dataclass
class ParsedChecklist:
    title: str = ""
    date: str = ""
    sha256: str = ""
    closing_rule: str = ""
    acceptance_chain: str = ""
    aliases: list[ParsedAlias] = field(default_factory=list)
    archives: list[ParsedArchive] = field(default_factory=list)
    tables: list[ParsedTable] = field(default_factory=list)
    items: list[ParsedItem] = field(default_factory=list)
    sections: list[ParsedSection] = field(default_factory=list)
    questions: list[ParsedQuestion] = field(default_factory=list)


class _Invalid(Exception):
    """One problem in one cell; the row is skipped and parsing goes on to find the others."""


def collapse(text: str) -> str:
    return " ".join(text.split())


def split_row(line: str) -> list[str]:
    body = line.strip()
    body = body[1:-1] if body.endswith("|") and len(body) > 1 else body[1:]
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body)]


def _plain(text: str) -> str:
    return collapse(text.replace("`", " "))


def _clean_qualifier(text: str) -> str:
    text = collapse(text.replace(DEFECT_WORD, " ").replace(LIMITATION_WORD, " "))
    for word in CONNECTIVES:
        text = text.removeprefix(word).removesuffix(word).strip()
    return text


def _tokens(text: str) -> list[re.Match]:
    """The grade and status tokens of `text`; one outside the scales is an error."""
    found = list(TOKEN.finditer(text))
    for match in found:
        code = match.group(0)
        if code.startswith("E") and code not in GRADES:
            raise _Invalid(f"unknown evidence grade {code} (the scale is E0–E4)")
        if code.startswith("C") and code not in STATUSES:
            raise _Invalid(f"unknown capability status {code} (the scale is C0–C4)")
    return found


def parse_grade_cell(text: str) -> GradeCell:
    """Grades, statuses with qualifiers, and the defect/limitation marks of one cell (rule: module docstring)."""
    plain = _plain(text)
    grades: set[str] = set()
    statuses: list[ParsedStatus] = []
    for clause in CELL_SEPARATOR.split(plain):
        clause_lead = None
        for part in PART_SEPARATOR.split(clause):
            tokens = _tokens(part)
            if not tokens:
                continue
            if len(tokens) > 1:
                raise _Invalid(f"cannot read {part.strip()!r}: one grade or status per part, separated by '/'")
            match = tokens[0]
            code, lead, trail = match.group(0), part[: match.start()], part[match.end() :]
            if code.startswith("E"):
                grades.add(code)
                continue
            if clause_lead is None:
                clause_lead = lead
            qualifier = _clean_qualifier(lead + " " + trail) or _clean_qualifier(clause_lead)
            status = ParsedStatus(code, qualifier)
            if status not in statuses:
                statuses.append(status)
    return GradeCell(
        grades=frozenset(grades),
        statuses=tuple(statuses),
        defect=DEFECT_WORD in plain,
        limitation=LIMITATION_WORD in plain,
    )


def _line_ranges(text: str) -> tuple[list[str], tuple[tuple[int, int], ...]]:
    groups = LINES.findall(text)
    ranges = []
    for group in groups:
        for piece in group.split(","):
            first, _, last = piece.partition("-")
            start, end = int(first), int(last or first)
            if end < start:
                raise _Invalid(f"line range {piece} runs backwards")
            ranges.append((start, end))
    return [":" + g for g in groups], tuple(ranges)


def _find_path(plain: str, aliases: set[str]) -> tuple[str, str] | None:
    """(alias, path) of the reference's file, or None when it names none."""
    candidates = []
    for match in ALIAS_PATH.finditer(plain):
        candidates.append((match.start(), match.end(), match.group(0)))
    alias_spans = [(start, end) for start, end, _ in candidates]
    for match in ASCII_TOKEN.finditer(plain):
        inside_alias = any(start <= match.start() < end for start, end in alias_spans)
        if not inside_alias and HAS_EXTENSION.search(match.group(0)):
            candidates.append((match.start(), match.end(), match.group(0)))
    if not candidates:
        return None
    candidates.sort()
    followed_by_lines = [c for c in candidates if re.match(r"\s*:[0-9]", plain[c[1] :])]
    token = followed_by_lines[0][2] if followed_by_lines else candidates[-1][2]
    if token.startswith("$"):
        alias, _, path = token.partition("/")
        if alias not in aliases:
            raise _Invalid(f"unknown path alias {alias} (section 2 defines {', '.join(sorted(aliases))})")
        return alias, path
    return "", token


def parse_source_cell(text: str, *, aliases: set[str], file_above: ParsedSource | None) -> tuple[ParsedSource, ...]:
    """The references of one source cell, resolved by the rule in the module docstring."""
    sources: list[ParsedSource] = []
    for position, raw in enumerate((r.strip() for r in CELL_SEPARATOR.split(text) if r.strip()), start=1):
        plain = _plain(raw)
        line_groups, ranges = _line_ranges(plain)
        lines = " ".join(line_groups)
        found = _find_path(plain, aliases)
        previous = sources[-1] if sources and sources[-1].has_file else None
        if found:
            alias, path = found
            source = ParsedSource(position, raw, alias, path, lines, ranges)
        elif SAME_FILE.search(plain):
            if file_above is None:
                raise _Invalid(f"{raw!r} refers to the file of the row above, which names no file")
            source = ParsedSource(position, raw, file_above.alias, file_above.path, lines, ranges, same_file=True)
        elif ranges and previous is not None:
            source = ParsedSource(position, raw, previous.alias, previous.path, lines, ranges, same_file=True)
        else:
            source = ParsedSource(position, raw, lines=lines, line_ranges=ranges)
        sources.append(source)
    return tuple(sources)


@dataclass
class _Block:
    kind: str  # heading | table | code | paragraph
    line: int
    text: str = ""
    level: int = 0
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _blocks(text: str, problems: list[Problem]) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index]
        stripped = line.strip()
        if stripped.startswith("```"):
            block = _Block("code", number, text=stripped[3:].strip())
            index += 1
            while index < len(lines) and not lines[index].strip().startswith("```"):
                block.lines.append(lines[index])
                index += 1
            if index == len(lines):
                problems.append(Problem(number, "code block is never closed"))
            blocks.append(block)
        elif stripped.startswith("|"):
            block = _Block("table", number)
            while index < len(lines) and lines[index].strip().startswith("|"):
                block.rows.append((index + 1, split_row(lines[index])))
                index += 1
            blocks.append(block)
            continue
        elif heading := HEADING.match(stripped):
            blocks.append(_Block("heading", number, text=heading.group(2), level=len(heading.group(1))))
        elif stripped:
            block = _Block("paragraph", number)
            while index < len(lines) and _continues_paragraph(lines[index]):
                block.lines.append(lines[index].strip())
                index += 1
            block.text = "\n".join(block.lines)
            blocks.append(block)
            continue
        index += 1
    return blocks


def _continues_paragraph(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("```", "|")) and not HEADING.match(stripped)


def _table_rows(block: _Block, problems: list[Problem], expected_header: int | None = None):
    """The header and the data rows of a table; rows with the wrong number of cells are reported and skipped."""
    if len(block.rows) < 2 or not all(re.fullmatch(r":?-{3,}:?", c) for c in block.rows[1][1]):
        problems.append(Problem(block.line, "table has no header separator line (| --- | --- |)"))
        return [], []
    header = block.rows[0][1]
    if expected_header is not None and len(header) != expected_header:
        problems.append(Problem(block.line, f"table header has {len(header)} columns, expected {expected_header}"))
        return header, []
    rows = []
    for number, cells in block.rows[2:]:
        if len(cells) != len(header):
            problems.append(
                Problem(number, f"row has {len(cells)} cells but the table's header has {len(header)} columns")
            )
            continue
        rows.append((number, cells))
    return header, rows


class _Reader:
    def __init__(self, text: str):
        self.problems: list[Problem] = []
        self.result = ParsedChecklist(sha256=hashlib.sha256(text.encode()).hexdigest())
        self.codes: dict[str, int] = {}
        self.section = 0
        self.section_title = ""
        self.subsection: ParsedSection | None = None
        self.subsection_number = 0
        self.sections_seen: set[int] = set()
        self.current_table: ParsedTable | None = None
        self.tables_in_section = 0
        self.rule_paragraphs: list[str] = []
        self.blocks = _blocks(text, self.problems)

    def problem(self, line: int, message: str) -> None:
        self.problems.append(Problem(line, message))

    def claim_code(self, code: str, line: int) -> bool:
        if code in self.codes:
            self.problem(line, f"code {code} appears twice (first at line {self.codes[code]})")
            return False
        self.codes[code] = line
        return True

    def read(self) -> ParsedChecklist:
        for block in self.blocks:
            if block.kind == "heading":
                self.heading(block)
            elif block.kind == "table":
                self.table(block)
            elif block.kind == "code":
                self.code(block)
            else:
                self.paragraph(block)
        self.finish()
        if self.problems:
            raise ChecklistParseError(self.problems)
        return self.result

    def heading(self, block: _Block) -> None:
        if block.level == 1:
            if self.result.title:
                self.problem(block.line, "a second document title")
            self.result.title = block.text
            return
        if block.level == 2:
            self.end_section(block.line)
            match = SECTION_HEADING.match(block.text)
            if not match:
                self.problem(block.line, f"section heading {block.text!r} has no number ('## 4. title')")
                return
            number = int(match.group(1))
            if number != self.section + 1:
                self.problem(block.line, f"section {number} is out of order: section {self.section + 1} expected")
            self.section, self.section_title = number, match.group(2)
            self.sections_seen.add(number)
            self.subsection, self.subsection_number, self.tables_in_section = None, 0, 0
            self.current_table = None
            return
        match = SUBSECTION_HEADING.match(block.text)
        if not match:
            self.problem(block.line, f"subsection heading {block.text!r} has no number ('### 12.1 title')")
            return
        major, minor, title = int(match.group(1)), int(match.group(2)), match.group(3)
        if major != self.section or minor != self.subsection_number + 1:
            self.problem(
                block.line,
                f"subsection {major}.{minor} is out of order: {self.section}.{self.subsection_number + 1} expected",
            )
        self.subsection_number = minor
        self.subsection = None
        if self.section == QUESTION_SECTION:
            theme, blocks = title, ""
            if parenthesis := PARENTHESIS.match(title):
                theme, blocks = parenthesis.group(1), parenthesis.group(2)
            self.subsection = ParsedSection(
                code=f"{major}.{minor}",
                position=minor,
                title=title,
                theme=theme,
                blocks=blocks,
                question_header="",
                acceptance_header="",
                line=block.line,
            )

    def end_section(self, line: int) -> None:
        if self.section in EVIDENCE_SECTIONS and self.tables_in_section == 0:
            self.problem(line, f"section {self.section} has no evidence table")

    def table(self, block: _Block) -> None:
        if self.section == 1:
            self.grade_table(block)
        elif self.section == 3:
            self.archive_table(block)
        elif self.section in EVIDENCE_SECTIONS:
            self.evidence_table(block)
        elif self.section == QUESTION_SECTION and self.subsection is not None:
            self.question_table(block)
        else:
            self.problem(block.line, f"unexpected table in section {self.section}")

    def grade_table(self, block: _Block) -> None:
        _, rows = _table_rows(block, self.problems)
        listed = [cells[0] for _, cells in rows]
        if sorted(listed) != GRADES:
            self.problem(block.line, f"the grade table lists {', '.join(listed)}; the scale is E0–E4")

    def archive_table(self, block: _Block) -> None:
        _, rows = _table_rows(block, self.problems, expected_header=3)
        for number, cells in rows:
            name, sha256 = _plain(cells[0]), _plain(cells[1])
            if not SHA256.match(sha256):
                self.problem(number, f"archive {name}: SHA-256 must be 64 lower-case hex digits, got {sha256!r}")
                continue
            if any(a.name == name for a in self.result.archives):
                self.problem(number, f"archive {name} appears twice")
                continue
            position = len(self.result.archives) + 1
            self.result.archives.append(ParsedArchive(name, sha256, cells[2], position, number))

    def evidence_table(self, block: _Block) -> None:
        self.tables_in_section += 1
        if self.tables_in_section > 1:
            self.problem(block.line, f"section {self.section} has a second evidence table")
            return
        header, rows = _table_rows(block, self.problems, expected_header=4)
        if not header:
            return
        explained = header[3] == EXPLANATION_HEADER
        aliases = {a.name for a in self.result.aliases}
        table: ParsedTable | None = None
        position = 0
        file_above: ParsedSource | None = None
        for number, cells in rows:
            code = _plain(cells[0])
            if not EVIDENCE_CODE.match(code):
                self.problem(number, f"evidence code {code!r} is not a capital letter and two digits")
                continue
            if table is None:
                if any(t.prefix == code[0] for t in self.result.tables):
                    self.problem(number, f"a second table of {code[0]} codes")
                    return
                table = ParsedTable(code[0], self.section, self.section_title, block.line)
                self.result.tables.append(table)
                self.current_table = table
            elif code[0] != table.prefix:
                self.problem(number, f"code {code} in the table of {table.prefix} codes")
                continue
            if not self.claim_code(code, number):
                continue
            try:
                cell = parse_grade_cell(cells[3])
                if not explained and not cell.grades:
                    raise _Invalid(f"no evidence grade (E0–E4) in {cells[3]!r}")
                if not explained and not cell.statuses:
                    raise _Invalid(f"no capability status (C0–C4) in {cells[3]!r}")
                sources = parse_source_cell(cells[2], aliases=aliases, file_above=file_above)
            except _Invalid as invalid:
                self.problem(number, f"{code}: {invalid}")
                # The document is rejected already; don't report the next row's `同文件` as well.
                file_above = UNRESOLVED
                continue
            file_above = next((s for s in sources if s.has_file), None)
            position += 1
            has_grade = bool(cell.grades or cell.statuses)
            self.result.items.append(
                ParsedItem(
                    code=code,
                    table=table.prefix,
                    position=position,
                    conclusion=cells[1],
                    source_text=cells[2],
                    grade_text=cells[3] if (has_grade or not explained) else "",
                    explanation=cells[3] if explained else "",
                    grades=cell.grades,
                    statuses=cell.statuses,
                    defect=cell.defect,
                    limitation=cell.limitation,
                    sources=sources,
                    line=number,
                )
            )

    def question_table(self, block: _Block) -> None:
        section = self.subsection
        assert section is not None
        if any(s.code == section.code for s in self.result.sections):
            self.problem(block.line, f"section {section.code} has a second question table")
            return
        header, rows = _table_rows(block, self.problems, expected_header=3)
        if not header:
            return
        self.result.sections.append(
            dataclasses.replace(section, question_header=header[1], acceptance_header=header[2])
        )
        for number, cells in rows:
            code = _plain(cells[0])
            if not QUESTION_CODE.match(code):
                self.problem(number, f"question code {code!r} is not V and two digits")
                continue
            if not self.claim_code(code, number):
                continue
            self.result.questions.append(ParsedQuestion(code, int(code[1:]), section.code, cells[1], cells[2], number))

    def code(self, block: _Block) -> None:
        if self.section == 2 and block.text == "text":
            for offset, line in enumerate(block.lines, start=1):
                self.alias_line(block.line + offset, line)
        elif self.section == RULE_SECTION:
            self.result.acceptance_chain = collapse(" ".join(block.lines))

    def alias_line(self, number: int, line: str) -> None:
        if not line.strip():
            return
        match = ALIAS_LINE.match(line.strip())
        if not match:
            self.problem(number, f"cannot read path alias {line.strip()!r} ('$NAME = path')")
            return
        name, path = match.groups()
        known = {a.name: a for a in self.result.aliases}
        if name in known:
            self.problem(number, f"path alias {name} is defined twice")
            return
        expanded = path
        if path.startswith("$"):
            base, _, rest = path.partition("/")
            if base not in known:
                self.problem(number, f"path alias {name} uses {base}, which is not defined above it")
                return
            expanded = known[base].expanded_path + ("/" + rest if rest else "")
        self.result.aliases.append(ParsedAlias(name, path, expanded, len(known) + 1, number))

    def paragraph(self, block: _Block) -> None:
        dates = [m.group(1) for m in map(DATE_LINE.match, block.lines) if m]
        if dates and not self.result.date:
            self.result.date = dates[0]
        elif self.section == RULE_SECTION:
            self.rule_paragraphs.append(block.text)
        elif self.current_table is not None and self.section in EVIDENCE_SECTIONS:
            note = self.current_table.note
            self.current_table.note = f"{note}\n\n{block.text}" if note else block.text

    def finish(self) -> None:
        last_line = max((b.line for b in self.blocks), default=1)
        self.end_section(last_line)
        if not self.result.title:
            self.problem(1, "the document has no title ('# title')")
        if not self.result.date:
            self.problem(1, "the document has no date line ('日期：2026-08-02')")
        missing = [n for n in range(1, LAST_SECTION + 1) if n not in self.sections_seen]
        if missing:
            self.problem(last_line, f"section(s) {', '.join(map(str, missing))} missing")
        if RULE_SECTION in self.sections_seen and not (self.rule_paragraphs and self.result.acceptance_chain):
            self.problem(last_line, "section 13 needs the closing rule and the acceptance chain block")
        self.result.closing_rule = "\n\n".join(self.rule_paragraphs)


def parse_checklist(text: str) -> ParsedChecklist:
    """Parse the whole document; raise ChecklistParseError listing every problem (line and what is wrong)."""
    return _Reader(text).read()
