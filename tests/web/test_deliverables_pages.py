"""What is owed, shown exactly: the question page, the vendor's page, the dashboard, the reports and both
exports; V18 owing batch 4 and 16 once batch 8 is accepted."""

import csv
import io
import json

import pytest
from django.urls import reverse

from acceptance import stages
from calculet.actors import SYSTEM
from evidence.exporter import checklist_markdown
from tests.factories import make_chain, make_run, put_to
from vendor.models import Question
from vendor.services.deliverables import deliverable_accept

pytestmark = pytest.mark.django_db


@pytest.fixture
def v18_batch_8_accepted(pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18", ask=True)
    question = Question.objects.get(code="V18")
    deliverable_accept(question.deliverables.get(key="package-batch-8"), actor=SYSTEM, reason="chain passed")
    return question


def test_the_question_page_shows_4_and_16_owed_after_8_is_accepted(pm_client, v18_batch_8_accepted):
    body = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    assert "2 deliverables are still owed." in body
    for key, state in (("package-batch-4", "Owed"), ("package-batch-8", "Accepted"), ("package-batch-16", "Owed")):
        row = body[body.index(f'id="deliverable-{key}"') :]
        assert f">{state}</span>" in row[: row.index("</tr>")]


def test_calbin_progress_per_target_kind_follows_the_chains(pm_client, pm, acme, acme_engineer, checklist):
    put_to(pm, acme, "V18", ask=True)
    question = Question.objects.get(code="V18")
    capability = question.capabilities.get(slug="decode-batch-4")
    chain = make_chain(question, acme_engineer, capability=capability)
    assert chain.answer.deliverable.key == "package-batch-4"
    for stage in stages.CHAIN_STAGES:
        make_run(chain, stage, stages.PASSED)
    body = pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    row = body[body.index('id="deliverable-package-batch-4"') :]
    row = row[: row.index("</tr>")]
    # Its own list, not the run's fixed-height progress bar, which clipped every line after the first.
    assert '<ul class="target-progress"' in row and 'class="progress"' not in row
    assert '<li class="progress-passed">Simulator: passed</li>' in row
    assert '<li class="progress-none">Hardware: not run</li>' in row


def test_the_vendor_page_lists_what_it_still_owes(client, v18_batch_8_accepted, acme_engineer):
    client.force_login(acme_engineer)
    body = client.get(reverse("vendor-home")).content.decode()
    assert 'id="owed-V18-package-batch-4"' in body and 'id="owed-V18-package-batch-16"' in body
    assert 'id="owed-V18-package-batch-8"' not in body


def test_the_dashboard_counts_what_is_owed_and_links_to_the_filtered_list(pm_client, v18_batch_8_accepted):
    # Every other question is deferred: V18 is the only open one.
    Question.objects.exclude(code="V18").update(state="deferred", state_reason="not in this release")
    response = pm_client.get(reverse("dashboard"))
    counts = {kind: count for kind, _label, count in response.context["attention_counts"]}
    assert counts["owed"] == 2  # V18's batch 4 and 16
    assert counts["incomplete"] == 0 and counts["chain_failed"] == 0
    assert 'href="/questions/?attention=owed"' in response.content.decode()
    listed = pm_client.get(reverse("question-list") + "?attention=owed")
    assert [q.code for q in listed.context["page"]] == ["V18"]


def test_the_dashboard_counts_alternatives_still_owed_once(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V45", ask=True)
    Question.objects.exclude(code="V45").update(state="deferred", state_reason="not in this release")
    response = pm_client.get(reverse("dashboard"))
    counts = {kind: count for kind, _label, count in response.context["attention_counts"]}
    assert counts["owed"] == 1  # the SDK with both calls or the erratum: one of them is owed


def test_reports_and_both_exports_name_each_deliverable_owed(pm_client, v18_batch_8_accepted):
    body = pm_client.get(reverse("reports")).content.decode()
    assert 'id="report-owed-V18-package-batch-4"' in body and 'id="report-owed-V18-package-batch-8"' not in body
    exported = pm_client.get(reverse("report-checklist", args=["csv"])).content.decode("utf-8-sig")
    v18 = next(row for row in csv.DictReader(io.StringIO(exported)) if row["code"] == "V18")
    assert v18["deliverables_owed"] == (
        "package-batch-4 (calbin, owed; simulator: none, hardware: none); "
        "package-batch-16 (calbin, owed; simulator: none, hardware: none)"
    )
    markdown = pm_client.get(reverse("report-checklist", args=["md"])).content.decode()
    row = next(line for line in markdown.splitlines() if line.startswith("| V18 |"))
    owed = row.split(" | ")[-2]  # the last column says what every package's runs prove, the accepted one's too
    assert "package-batch-4 (calbin package, Owed; Simulator: not run, Hardware: not run)" in owed
    assert "package-batch-8" not in owed
    assert "| Deliverables owed |" in checklist_markdown()


PACKAGE = ("the vendor&#x27;s package on the simulator", "厂商的包在模拟器上")
INTEGRATION = (
    "calculet&#x27;s integration against the documented semantics (simulator)",
    "calculet 按文档语义的集成（模拟器）",
)


@pytest.mark.parametrize(
    ("code", "key", "proves", "said"),
    [("V18", "package-batch-4", "package", PACKAGE), ("V46", "error-code-runs", "integration", INTEGRATION)],
)
def test_the_question_page_says_what_a_packages_runs_prove_in_both_languages(
    pm_client, checklist, code, key, proves, said
):
    """The decode batch is the package's; the error codes are the simulator's own runtime (E4): only a board's runs
    test the vendor's runtime, whatever the package."""
    url = reverse("question-detail", args=[code])

    def row() -> str:
        body = pm_client.get(url).content.decode()
        found = body[body.index(f'id="deliverable-{key}"') :]
        return found[: found.index("</tr>")]

    english, chinese = said
    assert f'<li class="proves-{proves}">On the simulator: {english}</li>' in row()
    assert '<li class="proves-board">On an attested board: the board</li>' in row()
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    assert f'<li class="proves-{proves}">在模拟器上: {chinese}</li>' in row()
    assert '<li class="proves-board">在经证实的板卡上: 板卡</li>' in row()


def test_a_deliverable_no_runner_runs_says_nothing_of_runs(pm_client, checklist):
    body = pm_client.get(reverse("question-detail", args=["V47"])).content.decode()
    assert 'class="run-meaning"' not in body


def test_both_exports_give_what_the_runs_prove_as_a_code_and_a_label_in_the_reader_s_language(pm_client, checklist):
    exported = pm_client.get(reverse("report-checklist", args=["csv"])).content.decode("utf-8-sig")
    rows = {row["code"]: row for row in csv.DictReader(io.StringIO(exported))}
    assert rows["V46"]["runs_prove"] == (
        "error-code-runs: simulator integration (calculet's integration against the documented semantics "
        "(simulator)), hardware board (the board)"
    )
    assert rows["V18"]["runs_prove"].startswith(
        "package-batch-4: simulator package (the vendor's package on the simulator), hardware board (the board); "
    )
    assert rows["V47"]["runs_prove"] == ""  # a schema: no runner runs it
    data = json.loads(pm_client.get(reverse("report-checklist", args=["json"])).content)
    [v46] = [q for q in data["questions"] if q["code"] == "V46"]
    [runs] = [d["runs_prove"] for d in v46["deliverables"] if d["key"] == "error-code-runs"]
    assert runs == [
        {
            "target_kind": "simulator",
            "code": "integration",
            "label": "calculet's integration against the documented semantics (simulator)",
        },
        {"target_kind": "hardware", "code": "board", "label": "the board"},
    ]
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    data = json.loads(pm_client.get(reverse("report-checklist", args=["json"])).content)
    [v46] = [q for q in data["questions"] if q["code"] == "V46"]
    [runs] = [d["runs_prove"] for d in v46["deliverables"] if d["key"] == "error-code-runs"]
    assert [(r["code"], r["label"]) for r in runs] == [
        ("integration", "calculet 按文档语义的集成（模拟器）"),
        ("board", "板卡"),
    ]
    exported = pm_client.get(reverse("report-checklist", args=["csv"])).content.decode("utf-8-sig")
    # The Chinese CSV's headings are translated; the code comes first and runs_prove last.
    [v18] = [row for row in csv.reader(io.StringIO(exported)) if row[0] == "V18"]
    assert v18[-1].startswith("package-batch-4: simulator package (厂商的包在模拟器上), hardware board (板卡)")


def _row(body: str, key: str) -> str:
    found = body[body.index(f'id="deliverable-{key}"') :]
    return found[: found.index("</tr>")]


def test_the_question_page_marks_alternatives_either_or_and_counts_them_once(pm_client, pm, acme, checklist):
    """V45 closes on the SDK with both calls or on the erratum: each row names the other; V18's three packages,
    all owed, are no alternatives of each other."""
    put_to(pm, acme, "V45", ask=True)
    url = reverse("question-detail", args=["V45"])
    body = pm_client.get(url).content.decode()
    assert "1 deliverable is still owed." in body
    assert "Either this or relocation-erratum: one of them accepted is enough." in _row(body, "relocation-api")
    assert "Either this or relocation-api: one of them accepted is enough." in _row(body, "relocation-erratum")
    assert 'class="alternatives"' not in pm_client.get(reverse("question-detail", args=["V18"])).content.decode()
    deliverable_accept(
        Question.objects.get(code="V45").deliverables.get(key="relocation-erratum"), actor=SYSTEM, reason="reviewed"
    )
    assert "0 deliverables are still owed." in pm_client.get(url).content.decode()
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    assert "此项或 relocation-erratum 二者之一被接受即可。" in _row(
        pm_client.get(url).content.decode(), "relocation-api"
    )


def test_both_exports_and_the_api_give_alternatives_as_either_or(pm_client, pm, acme, checklist):
    put_to(pm, acme, "V45", ask=True)
    exported = pm_client.get(reverse("report-checklist", args=["csv"])).content.decode("utf-8-sig")
    rows = {row["code"]: row for row in csv.DictReader(io.StringIO(exported))}
    assert rows["V45"]["deliverables_owed"] == (
        "either relocation-api (sdk, owed) or relocation-erratum (document, owed)"
    )
    assert not rows["V18"]["deliverables_owed"].startswith("either")
    markdown = pm_client.get(reverse("report-checklist", args=["md"])).content.decode()
    assert "either relocation-api (SDK headers and library, Owed) or relocation-erratum (document, Owed)" in markdown
    data = json.loads(pm_client.get(reverse("report-checklist", args=["json"])).content)
    [v45] = [q for q in data["questions"] if q["code"] == "V45"]
    assert {d["key"]: d["alternatives"] for d in v45["deliverables"]} == {
        "relocation-api": ["relocation-erratum"],
        "relocation-erratum": ["relocation-api"],
    }
    [v18] = [q for q in data["questions"] if q["code"] == "V18"]
    assert all(d["alternatives"] == [] for d in v18["deliverables"])
    api = pm_client.get("/api/v1/questions/V45/deliverables/").json()
    assert {d["key"]: d["alternatives"] for d in api} == {
        "relocation-api": ["relocation-erratum"],
        "relocation-erratum": ["relocation-api"],
    }
    pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    markdown = pm_client.get(reverse("report-checklist", args=["md"])).content.decode()
    assert "relocation-api（SDK 头文件与库，待交付） 或 relocation-erratum（文档，待交付）（任选其一）" in markdown
    deliverable_accept(
        Question.objects.get(code="V45").deliverables.get(key="relocation-api"), actor=SYSTEM, reason="chain passed"
    )
    exported = pm_client.get(reverse("report-checklist", args=["csv"])).content.decode("utf-8-sig")
    [v45_row] = [row for row in csv.reader(io.StringIO(exported)) if row[0] == "V45"]
    assert v45_row[-2] == ""  # the SDK accepted: the erratum is owed no longer


def test_the_vendor_page_and_the_reports_mark_alternatives_still_owed(
    client, pm_client, pm, acme, acme_engineer, checklist
):
    put_to(pm, acme, "V45", ask=True)
    said = "Either this or relocation-erratum: one of them accepted is enough."
    reports = pm_client.get(reverse("reports")).content.decode()
    row = reports[reports.index('id="report-owed-V45-relocation-api"') :]
    assert said in row[: row.index("</li>")]
    client.force_login(acme_engineer)
    home = client.get(reverse("vendor-home")).content.decode()
    row = home[home.index('id="owed-V45-relocation-api"') :]
    assert said in row[: row.index("</tr>")]
