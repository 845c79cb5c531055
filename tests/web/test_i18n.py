"""The two catalogues are complete, compiled, and used by the pages."""

import datetime
import gettext
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from django.utils.translation.template import templatize

from acceptance.models import PromotionAttempt, Target
from acceptance.services.targets import targets_refresh_health
from evidence.models import Capability

LOCALE = Path(settings.BASE_DIR) / "locale"


def catalogue_entries(language: str) -> list[dict]:
    """The entries of a .po file: msgctxt, msgid, msgid_plural, msgstr values and flags."""
    text = (LOCALE / language / "LC_MESSAGES" / "django.po").read_text(encoding="utf-8")
    entries = []
    for block in text.split("\n\n")[1:]:
        fields: dict = {"flags": re.findall(r"^#, (.*)$", block, re.M), "msgstr": []}
        key = None
        for line in block.splitlines():
            if match := re.match(r'^(msgctxt|msgid|msgid_plural|msgstr(?:\[\d\])?) "(.*)"$', line):
                key = match.group(1)
                value = match.group(2).encode().decode("unicode_escape").encode("latin-1").decode()
                if key.startswith("msgstr"):
                    fields["msgstr"].append(value)
                else:
                    fields[key] = value
            elif line.startswith('"') and key:
                value = line[1:-1].encode().decode("unicode_escape").encode("latin-1").decode()
                if key.startswith("msgstr"):
                    fields["msgstr"][-1] += value
                else:
                    fields[key] += value
        if "msgid" in fields and not block.lstrip().startswith("#~"):
            entries.append(fields)
    return entries


@pytest.mark.parametrize("language", ["zh_Hans", "en"])
def test_catalogue_is_complete_and_compiled(language):
    entries = catalogue_entries(language)
    assert len(entries) > 200
    with open(LOCALE / language / "LC_MESSAGES" / "django.mo", "rb") as mo:
        compiled = gettext.GNUTranslations(mo)
    for entry in entries:
        assert "fuzzy" not in entry["flags"], entry["msgid"]
        assert entry["msgstr"] and all(entry["msgstr"]), f"untranslated: {entry['msgid']}"
        if "msgid_plural" in entry:
            assert compiled.ngettext(entry["msgid"], entry["msgid_plural"], 5) == entry["msgstr"][-1]
        elif "msgctxt" in entry:
            assert compiled.pgettext(entry["msgctxt"], entry["msgid"]) == entry["msgstr"][0]
        else:
            assert compiled.gettext(entry["msgid"]) == entry["msgstr"][0], f"stale .mo for {entry['msgid']}"


def test_every_chinese_entry_keeps_its_placeholders():
    for entry in catalogue_entries("zh_Hans"):
        wanted = sorted(re.findall(r"%\(\w+\)[sd]", entry["msgid"]))
        for translation in entry["msgstr"]:
            assert sorted(re.findall(r"%\(\w+\)[sd]", translation)) == wanted, entry["msgid"]


@pytest.mark.django_db
def test_pages_speak_chinese_after_the_switch_and_keep_the_seed_text(pm_client, checklist):
    response = pm_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/questions/?section=12.7"})
    assert response["Location"] == "/questions/?section=12.7"
    body = pm_client.get("/questions/?section=12.7").content.decode()
    assert '<html lang="zh-hans">' in body
    assert "厂商问题" in body and "仪表盘" in body and "已提问" in body
    assert "Vendor questions" not in body
    assert "CCU exception 后 KV/DRAM 是否可信" in body
    pm_client.post(reverse("set_language"), {"language": "en", "next": "/"})
    assert "Vendor questions" in pm_client.get("/questions/").content.decode()


@pytest.mark.django_db
def test_a_targets_health_reason_is_shown_in_chinese(pm_client, checklist):
    board = Target.objects.create(
        slug="board", name="board", kind=Target.HARDWARE, queue="board", runner_command="/opt/board/runner",
        calrt_version="0.7.6", driver_version="2.3.0", firmware_version="1.8.0", chip="calculet-2c",
        last_heartbeat_at=timezone.now() - datetime.timedelta(seconds=600),
    )  # fmt: skip
    targets_refresh_health()
    board.refresh_from_db()
    assert re.fullmatch(r"no worker heartbeat for \d+ s", board.health_reason)
    seconds = board.health_reason.split()[-2]
    chinese = pm_client.get(reverse("dashboard"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert f"已 {seconds} 秒没有 worker 心跳" in chinese and board.health_reason not in chinese
    english = pm_client.get(reverse("dashboard"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert board.health_reason in english


def _extracted_messages(tmp_path) -> set[tuple[str, str]]:
    """(context, msgid) of every string the code and templates mark for translation, extracted as
    `makemessages` does: templates through Django's templatize, then xgettext with Django's keywords."""
    root = Path(settings.BASE_DIR)
    sources = [
        path
        for app in ("calculet", "vendor", "evidence", "acceptance")
        for path in sorted((root / app).rglob("*.py"))
        if "migrations" not in path.parts
    ]
    for index, template in enumerate(sorted((root / "templates").rglob("*.*"))):
        converted = tmp_path / f"template_{index}.py"
        converted.write_text(templatize(template.read_text(encoding="utf-8"), origin=str(template)), encoding="utf-8")
        sources.append(converted)
    pot = tmp_path / "messages.pot"
    keywords = ["gettext_noop", "gettext_lazy", "ngettext_lazy:1,2", "pgettext:1c,2", "npgettext:1c,2,3"]
    keywords += ["pgettext_lazy:1c,2", "npgettext_lazy:1c,2,3"]
    subprocess.run(
        ["xgettext", "--language=Python", "--from-code=UTF-8", "--no-wrap", "-o", str(pot)]
        + [f"--keyword={keyword}" for keyword in keywords]
        + [str(path) for path in sources],
        check=True,
    )
    found = set()
    for block in pot.read_text(encoding="utf-8").split("\n\n")[1:]:
        context = re.search(r'^msgctxt "(.*)"$', block, re.M)
        msgid = re.search(r'^msgid "(.*)"$', block, re.M)
        if msgid:
            found.add(
                (
                    context.group(1) if context else "",
                    msgid.group(1).encode().decode("unicode_escape").encode("latin-1").decode(),
                )
            )
    return found


@pytest.mark.parametrize("language", ["zh_Hans", "en"])
def test_every_marked_string_is_in_the_catalogue(tmp_path, language):
    """Every word the pages, e-mails and exports mark for translation has an entry, and every entry is used."""
    catalogued = {(entry.get("msgctxt", ""), entry["msgid"]) for entry in catalogue_entries(language)}
    marked = _extracted_messages(tmp_path)
    missing = sorted(marked - catalogued)
    assert not missing, f"{len(missing)} strings without a {language} entry: {missing[:20]}"
    unused = sorted(catalogued - marked)
    assert not unused, f"{len(unused)} {language} entries no code uses: {unused[:20]}"


@pytest.mark.django_db
def test_a_refusal_is_shown_in_the_readers_language_and_the_api_keeps_english(pm_client, checklist):
    """A service's refusal is a template and its parameters: the page renders it in the reader's language,
    with labels for the states it names, while the API says the English sentence whatever the language."""
    edit = reverse("question-edit", args=["V10"])
    form = {"state": "closed", "priority": "p1", "assignee": ""}
    chinese = pm_client.post(edit, form, HTTP_HX_REQUEST="true", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "问题不能从“新建”变为“已关闭”" in chinese and "cannot move" not in chinese
    english = pm_client.post(edit, form, HTTP_HX_REQUEST="true", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "A question cannot move from New to Closed" in english
    api = pm_client.patch(
        "/api/v1/questions/V10/", {"state": "closed"}, content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert api.status_code == 400
    assert api.json()["errors"][0]["message"].startswith("A question cannot move from New to Closed")


@pytest.mark.django_db
def test_a_gate_refusal_asked_in_chinese_reads_in_english_for_an_english_reader(pm_client, checklist):
    """The gate stores its reasons as templates: who asked does not decide the language of the history."""
    slug = Capability.objects.filter(status="C3", pinned=False).values_list("slug", flat=True).first()
    pm_client.post(reverse("capability-promote", args=[slug]), {"to": "C2"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    attempt = PromotionAttempt.objects.get(capability__slug=slug)
    assert not attempt.allowed and attempt.reasons[0]["code"] == "no_answer"
    assert attempt.reasons[0]["message"] == "No complete answer names this capability: nothing has run."
    page = reverse("capability-detail", args=[slug])
    english = pm_client.get(page, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "No complete answer names this capability: nothing has run." in english
    chinese = pm_client.get(page, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "没有完整的回答指向该能力：尚未运行任何验收。" in chinese and "nothing has run" not in chinese
    api = pm_client.get(f"/api/v1/capabilities/{slug}/promotions/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert api["results"][0]["reasons"] == [
        {"code": "no_answer", "message": "No complete answer names this capability: nothing has run."}
    ]
