"""The two catalogues are complete, compiled, and used by the pages."""

import ast
import datetime
import gettext
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import get_resolver, reverse
from django.utils import timezone
from django.utils.translation.template import templatize

from acceptance.models import PromotionAttempt, Target
from acceptance.services.targets import targets_refresh_health
from calculet.errors import DomainError
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
def test_a_refusal_is_shown_in_the_readers_language_on_pages_and_api(pm_client, checklist):
    """A service's refusal is a template and its parameters: the page renders it in the reader's language,
    with labels for the states it names; the API renders it in the client's Accept-Language (English when it
    asks for none), with the same field and code."""
    edit = reverse("question-edit", args=["V10"])
    form = {"state": "closed", "priority": "p1", "assignee": ""}
    chinese = pm_client.post(edit, form, HTTP_HX_REQUEST="true", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "问题不能从“新建”变为“已关闭”" in chinese and "cannot move" not in chinese
    english = pm_client.post(edit, form, HTTP_HX_REQUEST="true", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "A question cannot move from New to Closed" in english
    url = "/api/v1/questions/V10/"
    asked = {"data": {"state": "closed"}, "content_type": "application/json"}
    api = pm_client.patch(url, HTTP_ACCEPT_LANGUAGE="zh-hans", **asked)
    assert api.status_code == 400
    [error] = api.json()["errors"]
    assert error["field"] == "state" and error["code"] == "invalid"
    assert error["message"].startswith("问题不能从“新建”变为“已关闭”")
    for plain in (pm_client.patch(url, **asked), pm_client.patch(url, HTTP_ACCEPT_LANGUAGE="en", **asked)):
        assert plain.json()["errors"][0]["message"].startswith("A question cannot move from New to Closed")


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


def _domain_errors() -> set[str]:
    """The names of calculet.errors.DomainError and every subclass the apps define (all imported by now:
    the URL configuration loads every view and service)."""
    assert get_resolver().url_patterns
    found, pending = set(), [DomainError]
    while pending:
        cls = pending.pop()
        found.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return found - {"FieldErrors"}  # built from sentences, each made with a marked template


def _refusals_not_marked(source: str, errors: set[str]) -> list[tuple[int, str]]:
    """(line, first argument) of each construction of a DomainError whose sentence is no marked template:
    a literal, an f-string, a formatted or concatenated string would reach every reader in English."""
    unmarked = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        message = node.args[0]
        marked = isinstance(message, ast.Call) and getattr(message.func, "id", None) == "gettext_noop"
        text = isinstance(message, ast.Constant | ast.JoinedStr | ast.BinOp) or (
            isinstance(message, ast.Call) and getattr(message.func, "attr", None) == "format"
        )
        if name in errors and text and not marked:
            unmarked.append((node.lineno, ast.unparse(message)[:80]))
    return unmarked


def test_every_refusal_the_apps_raise_is_a_marked_template():
    """A rule's refusal reaches pages and API bodies: each is an English template marked for the catalogue
    (with its parameters by name), so the reader's language decides how it reads."""
    errors = _domain_errors()
    assert {"DomainError", "ConflictError", "ForbiddenError", "ArtifactRejectedError", "AgentRefusedError"} <= errors
    root = Path(settings.BASE_DIR)
    unmarked = {
        str(path.relative_to(root)): found
        for app in ("calculet", "vendor", "evidence", "acceptance")
        for path in sorted((root / app).rglob("*.py"))
        if "migrations" not in path.parts and (found := _refusals_not_marked(path.read_text(encoding="utf-8"), errors))
    }
    assert not unmarked, unmarked


def test_the_refusal_check_catches_plain_english():
    """The check above names a literal, an f-string and a concatenation, and lets a marked template pass."""
    source = (
        "raise DomainError('A plain sentence.')\n"
        "raise ConflictError(f'Run {run.pk} is busy.', field='run')\n"
        "raise ForbiddenError('Only ' + role)\n"
        "raise DomainError(gettext_noop('Run %(run)s is busy.'), params={'run': 1})\n"
    )
    assert [line for line, _ in _refusals_not_marked(source, {"DomainError", "ConflictError", "ForbiddenError"})] == [
        1,
        2,
        3,
    ]
