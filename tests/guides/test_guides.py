"""The guides' examples run against a live server: docs/vendor-guide.md as the vendor, then section 9 of
docs/pm-guide.md as a PM, each as one shell session; then the database is checked for what they should
have left behind. Run twice: with no worker serving the simulator, and with tasks run in-process."""

import datetime
import os
import shlex
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from acceptance import stages
from acceptance.models import PromotionAttempt, Run
from calculet.celery import app as celery_app
from evidence.models import Capability
from tests.guides.examples import Example, MarkerError, examples
from vendor.models import Answer, ApiToken, Artifact, Comment, NotificationPreference, Question, Upload
from vendor.services.organisations import api_user_create
from vendor.services.questions import question_update
from vendor.storage import blob_local_path, file_sha256

ROOT = Path(__file__).resolve().parents[2]
VENDOR_GUIDE = ROOT / "docs" / "vendor-guide.md"
PM_GUIDE = ROOT / "docs" / "pm-guide.md"
TOOLS = ["curl", "jq", "openssl", "sha256sum", "base64", "split", "stat", "tar", "cmp", "awk"]
BLOCK_TIMEOUT_SECONDS = 300
FIRST_ANSWER_MISSING = ["executable_asset", "minimal_example", "error_path", "golden", "compatibility_range"]


class ShellSession:
    """Runs examples the way a reader does in one terminal: in the same directory, in order, with the
    variables one block exports visible to the next."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        workdir.mkdir()
        self.workdir = workdir
        self.env = env
        self.env_file = workdir.parent / f"{workdir.name}.env"

    def run(self, example: Example) -> subprocess.CompletedProcess:
        if example.language == "python":
            command = [sys.executable, "-"]
            stdin = example.code
        else:
            # After the block, hand its exported variables to the next one.
            script = f"{example.code}\nenv -0 > {shlex.quote(str(self.env_file))}\n"
            command = ["bash", "-euo", "pipefail", "-c", script]
            stdin = ""
        result = subprocess.run(
            command,
            input=stdin,
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_SECONDS,
        )
        if example.language == "bash" and result.returncode == 0:
            entries = self.env_file.read_bytes().split(b"\0")
            self.env = dict(entry.decode().split("=", 1) for entry in entries if entry)
        return result

    def run_guide(self, guide: Path) -> None:
        tested = [example for example in examples(guide) if example.tested]
        assert tested, f"{guide.name} has no tested example"
        for example in tested:
            result = self.run(example)
            assert result.returncode == 0, (
                f"{guide.name}:{example.line}: the {example.language} example exited {result.returncode}\n"
                f"--- example\n{example.code}--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
            )


def session_env(base_url: str, token: str, home: Path) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),  # no ~/.curlrc or other personal settings
        "LANG": "C.UTF-8",
        "CALCULET_URL": base_url,
        "CALCULET_TOKEN": token,
    }


@pytest.fixture
def chain_not_run(settings):
    """No worker serves the simulator's queue: the chain's first run waits, pending."""
    previous = celery_app.conf.task_always_eager
    settings.CELERY_TASK_ALWAYS_EAGER = False
    celery_app.conf.task_always_eager = False
    yield "not run"
    celery_app.conf.task_always_eager = previous


@pytest.fixture(params=["chain_not_run", "chain_in_process"])
def chain_mode(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def keys(db):
    """The checklist imported, a PM and a vendor engineer with tokens, and V18 put to the vendor."""
    call_command("import_checklist", stdout=StringIO())
    pm, pm_key = api_user_create("pat", "team", "pm", create_org=True)
    vendor, vendor_key = api_user_create("alice", "acme", "vendor", create_org=True, org_name="Acme NPU")
    question_update(
        actor=pm,
        question=Question.objects.get(code="V18"),
        organisation=vendor.membership.organisation,
        state="asked",
    )
    return {"pm": pm_key, "vendor": vendor_key}


def test_every_example_in_the_guides_is_marked():
    for guide in (VENDOR_GUIDE, PM_GUIDE):
        languages = {example.language for example in examples(guide) if example.tested}
        assert languages, f"{guide.name} has no tested example"
    assert {example.language for example in examples(VENDOR_GUIDE) if example.tested} == {"bash", "python"}


@pytest.mark.django_db(transaction=True)
def test_the_guides_work_against_a_live_server(live_server, keys, chain_mode, tmp_path):
    missing_tools = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert not missing_tools, f"the guides' examples need {', '.join(missing_tools)}"

    vendor = ShellSession(tmp_path / "vendor", session_env(live_server.url, keys["vendor"], tmp_path / "vendor"))
    vendor.run_guide(VENDOR_GUIDE)

    comment = Comment.objects.get(question__code="V18")
    assert (comment.author.username, comment.revision, comment.revisions.count()) == ("alice", 2, 2)
    assert [artifact.file_name for artifact in comment.artifacts.all()] == ["qwen3-tiny-b8.tar"]
    assert "<strong>linked</strong>" in comment.body_html
    preference = NotificationPreference.objects.get(user__username="alice")
    assert (preference.muted, preference.user.email) == (["answered"], "engineer@acme.example")

    ci_token = ApiToken.objects.get(name="ci uploader")
    assert ci_token.user.username == "alice"
    assert ci_token.revoked_at is not None

    artifacts = {
        artifact.file_name: artifact
        for artifact in Artifact.objects.filter(organisation__slug="acme").select_related("blob")
    }
    assert sorted(artifacts) == ["golden-b8.npz", "qwen3-tiny-b16.tar", "qwen3-tiny-b8.tar"]
    assert {(a.kind, a.version, a.state) for a in artifacts.values()} == {
        ("golden", "1.0.0", "verified"),
        ("calbin", "1.0.0", "verified"),
    }
    for name, artifact in artifacts.items():
        sha256, size = file_sha256(vendor.workdir / name)
        with blob_local_path(artifact.blob) as stored:
            assert file_sha256(stored) == (sha256, size) == (artifact.declared_sha256, artifact.declared_size)
    uploads = Upload.objects.filter(organisation__slug="acme").select_related("artifact")
    assert sorted(upload.artifact.file_name for upload in uploads) == ["qwen3-tiny-b16.tar", "qwen3-tiny-b8.tar"]
    assert all(upload.offset == upload.length for upload in uploads)

    first, second = Answer.objects.filter(question__code="V18").order_by("revision")
    assert (first.revision, first.complete, first.missing) == (1, False, FIRST_ANSWER_MISSING)
    assert (second.revision, second.complete, second.missing) == (2, True, [])
    assert second.claim.capability.slug == "decode-batch-8"
    assert list(second.executable_assets.all()) == [artifacts["qwen3-tiny-b8.tar"]]
    assert list(second.golden_artifacts.all()) == [artifacts["golden-b8.npz"]]
    assert [path["scenario"] for path in second.error_paths] == ["kv_apply_failure", "core_exception"]

    runs = list(Run.objects.filter(answer=second).order_by("pk").values_list("stage", "state", "target__slug"))
    if chain_mode == "not run":
        assert runs == [(stages.CLAIM, stages.PENDING, "simulator")]
        assert Question.objects.get(code="V18").state == "verifying"
    else:
        assert runs == [(stage, stages.PASSED, "simulator") for stage in stages.CHAIN_STAGES]
        assert Question.objects.get(code="V18").state == "verifying"  # batch 4 and 16 are still owed

    pm = ShellSession(tmp_path / "pm", session_env(live_server.url, keys["pm"], tmp_path / "pm"))
    pm.run_guide(PM_GUIDE)

    v17 = Question.objects.select_related("organisation", "assignee").get(code="V17")
    assert (v17.organisation.slug, v17.state, v17.priority, v17.assignee.username, str(v17.due_date)) == (
        "acme",
        "asked",
        "p1",
        "pat",
        (datetime.datetime.now(datetime.UTC).date() + datetime.timedelta(days=30)).isoformat(),
    )
    attempts = [
        (attempt.to_status, attempt.allowed, {reason["code"] for reason in attempt.reasons})
        for attempt in PromotionAttempt.objects.filter(capability__slug="decode-batch-8").order_by("pk")
    ]
    if chain_mode == "not run":
        assert attempts == [
            ("C2", False, {"stage_not_passed"}),
            ("C0", False, {"stage_not_passed", "no_sdk_evidence", "no_hardware_runs"}),
        ]
        assert Capability.objects.get(slug="decode-batch-8").status == "C3"
    else:
        assert attempts == [("C2", True, set()), ("C0", False, {"no_sdk_evidence", "no_hardware_runs"})]
        assert Capability.objects.get(slug="decode-batch-8").status == "C2"
    sampling = PromotionAttempt.objects.get(capability__slug="npu-sampling")
    assert (sampling.to_status, sampling.allowed) == ("C2", False)
    assert "pinned_needs_full_proof" in {reason["code"] for reason in sampling.reasons}
    assert Capability.objects.get(slug="npu-sampling").status == "C3"


def test_an_unmarked_example_is_refused(tmp_path):
    guide = tmp_path / "guide.md"
    guide.write_text("<!-- tested -->\n```bash\necho one\n```\n\n<!-- not tested: needs a board -->\n```python\n```\n")
    assert [(e.language, e.code, e.line, e.tested) for e in examples(guide)] == [
        ("bash", "echo one\n", 2, True),
        ("python", "\n", 7, False),
    ]
    guide.write_text("Run this:\n\n```bash\necho two\n```\n")
    with pytest.raises(MarkerError, match="guide.md:3"):
        examples(guide)
