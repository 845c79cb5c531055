"""docs/acceptance.md's table of deliverables is the data's: regenerate it with
`python manage.py deliverables_table --write`."""

import io

from django.core.management import call_command

from acceptance.deliverables_doc import DOC, documented, table, wrong_delivery
from evidence.seed.deliverables import QUESTION_DELIVERABLES


def test_the_doc_s_table_is_the_data_s():
    assert documented(DOC.read_text(encoding="utf-8")) == table(), (
        "regenerate with: python manage.py deliverables_table --write"
    )


def test_every_question_is_in_the_table():
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table().splitlines()[2:]]
    assert sorted(set(rows)) == [f"V{n:02d}" for n in range(1, 61)]


def test_the_command_prints_the_table_and_writes_it_between_the_markers(tmp_path, monkeypatch):
    out = io.StringIO()
    call_command("deliverables_table", stdout=out)
    assert out.getvalue().strip() == table()
    stale = tmp_path / "acceptance.md"
    text = DOC.read_text(encoding="utf-8")
    stale.write_text(text.replace(table(), "| an old table |"), encoding="utf-8")
    monkeypatch.setattr("acceptance.deliverables_doc.DOC", stale)
    call_command("deliverables_table", "--write", stdout=io.StringIO())
    assert stale.read_text(encoding="utf-8") == text


def by_key(key: str):
    return next(d for ds in QUESTION_DELIVERABLES.values() for d in ds if d.key == key)


def test_a_wrong_delivery_is_named_and_weak_checks_say_so():
    assert "`sampling`" in wrong_delivery(by_key("sampling-package"))
    assert "another decode batch" in wrong_delivery(by_key("package-batch-16"))
    assert "`second_calbin_missing`" in wrong_delivery(by_key("resident-packages"))
    assert "the simulator's runtime" in wrong_delivery(by_key("error-code-runs"))
    assert "still owed" in wrong_delivery(by_key("overlap-runs"))
    assert "`entry_point_not_defined`" in wrong_delivery(by_key("parallel-mode-sdk"))
    assert "(weak)" in wrong_delivery(by_key("counters-sdk"))
    assert "`build_missing`" in wrong_delivery(by_key("compile-script"))
    assert "`accepts_defect`" in wrong_delivery(by_key("field-units-schema"))
    assert "placing no op on the CPU: `cpu_fallback` `not_exercised`" in wrong_delivery(by_key("cpu-fallback-package"))
