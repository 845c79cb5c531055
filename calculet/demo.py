"""The demo a newcomer clicks through, built only through the product's services and its REST API.

`demo_seed()` is idempotent: each step looks for what it would create and skips it when present. The
story: a vendor organisation answers V18 completely with a tiny decode-batch-8 simulator calbin uploaded
through the tus endpoint; the chain runs on the simulator target (a worker serving it runs the stages, and the
demo waits for them); "decode batch 8" is promoted to C1 and
a promotion to C0 is blocked for want of hardware runs. V17 is answered without a golden: the answer
shows what is missing and a promotion of the pinned "NPU sampling" capability is blocked. Two more people
work in the integration team; V17 and V18 are assigned with due dates, and the vendor writes in V18's
thread, mentioning the PM.
"""

import base64
import datetime
import hashlib
import json
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from acceptance import stages
from acceptance.models import PromotionAttempt, Run
from acceptance.services.targets import SIMULATOR_SLUG
from npu_sim.calbin import build_calbin
from npu_sim.errors import ErrorCode
from vendor.models import Answer, Artifact, Comment, Organisation, Question
from vendor.services.comments import comment_create
from vendor.services.organisations import api_user_create
from vendor.services.questions import question_update

PM_USERNAME = "pm"
DEMO_PASSWORD = "calculet-demo"
INTEGRATOR_SLUG = "integration-team"
VENDOR_SLUG = "acme-npu"
VENDOR_USERNAME = "acme-engineer"
CALBIN_VERSION = "0.1.0"
CREDENTIALS_FILE = "demo-credentials.json"
CHAIN_WAIT_SECONDS = 600

TEAM = [("lin", "pm"), ("omar", "operator")]  # colleagues of the demo PM, to assign questions to

COMPATIBILITY = {"calrt": ">=0.7.6,<0.8", "driver": ">=2.3", "firmware": ">=1.8", "chip": "calculet-2c"}
ERROR_PATHS = [
    {"scenario": "kv_apply_failure", "expect_code": int(ErrorCode.KV_APPLY_FAILED)},
    {"scenario": "core_exception", "expect_code": int(ErrorCode.CORE_EXCEPTION)},
    {"scenario": "timeout", "expect_code": int(ErrorCode.TIMEOUT)},
]


class DemoError(Exception):
    pass


@dataclass
class DemoReport:
    pm_username: str = PM_USERNAME
    password: str = DEMO_PASSWORD
    vendor_username: str = VENDOR_USERNAME
    vendor_token: str = ""
    steps: list[str] = field(default_factory=list)


def _credentials_path() -> Path:
    return settings.DATA_DIR / CREDENTIALS_FILE


def _create_login(username: str, org_slug: str, role: str, org_name: str):
    """A user who can log in to the browser with the demo password; returns (user, API key)."""
    user, key = api_user_create(username, org_slug, role, create_org=True, org_name=org_name, token_name="demo")
    user.set_password(DEMO_PASSWORD)
    user.save(update_fields=["password"])
    return user, key


def _ensure_users(report: DemoReport) -> tuple:
    """The PM login and the vendor engineer with an API token. The token is kept in the local data folder
    (it is stored hashed in the database) so that a second run can print it again."""
    users = get_user_model().objects
    pm = users.filter(username=PM_USERNAME).first()
    if pm is None:
        pm, _ = _create_login(PM_USERNAME, INTEGRATOR_SLUG, "pm", "NPU integration team")
        report.steps.append("created the PM login")
    credentials = _credentials_path()
    vendor = users.filter(username=VENDOR_USERNAME).first()
    if vendor is None:
        vendor, key = _create_login(VENDOR_USERNAME, VENDOR_SLUG, "vendor", "Acme NPU")
        credentials.parent.mkdir(parents=True, exist_ok=True)
        credentials.write_text(json.dumps({"vendor_token": key}))
        report.steps.append("created the vendor organisation, its engineer and an API token")
    if not credentials.exists():
        raise DemoError(f"the demo vendor exists but {credentials} is gone: its token cannot be shown again")
    report.vendor_token = json.loads(credentials.read_text())["vendor_token"]
    return pm, vendor


def _ensure_team(report: DemoReport) -> None:
    users = get_user_model().objects
    for username, role in TEAM:
        if not users.filter(username=username).exists():
            _create_login(username, INTEGRATOR_SLUG, role, "NPU integration team")
            report.steps.append(f"created {username}, {role} of the integration team")


def _triage(pm, vendor, report: DemoReport) -> None:
    """V18 to a colleague, V17 to the vendor's engineer, each with a due date, once."""
    today = timezone.localdate()
    colleague = get_user_model().objects.get(username=TEAM[0][0])
    for code, assignee, days in (("V18", colleague, 10), ("V17", vendor, 3)):
        question = Question.objects.get(code=code)
        if question.assignee_id is None:
            due = today + datetime.timedelta(days=days)
            question_update(actor=pm, question=question, assignee=assignee, due_date=due)
            report.steps.append(f"assigned {code} to {assignee.username}, due {due.isoformat()}")


def _discuss_v18(pm, vendor, report: DemoReport) -> None:
    question = Question.objects.get(code="V18")
    if Comment.objects.filter(question=question).exists():
        return
    comment_create(
        actor=pm,
        question=question,
        body="Batch 8 runs on the simulator. The checklist asks for **4, 8 and 16**: when do 4 and 16 land?",
    )
    comment_create(
        actor=vendor,
        question=question,
        body=f"Batch 4 and 16 follow with the next toolchain drop. @{PM_USERNAME}, the batch-8 calbin is linked.",
        artifact_ids=list(
            Artifact.objects.filter(organisation__slug=VENDOR_SLUG, kind=Artifact.CALBIN).values_list("pk", flat=True)[
                :1
            ]
        ),
    )
    report.steps.append("started V18's discussion: the PM asks for batch 4 and 16, the vendor answers")


def _put_to_vendor(pm, code: str, report: DemoReport) -> Question:
    question = Question.objects.get(code=code)
    if question.organisation_id is None:
        vendor_org = Organisation.objects.get(slug=VENDOR_SLUG)
        question = question_update(actor=pm, question=question, organisation=vendor_org, state="asked", priority="p0")
        report.steps.append(f"put {code} to {VENDOR_SLUG}")
    return question


def _api(client: Client, method: str, path: str, token: str, expect: set[int], **kwargs):
    response = client.generic(method, path, HTTP_AUTHORIZATION=f"Token {token}", **kwargs)
    if response.status_code not in expect:
        raise DemoError(f"{method} {path} answered {response.status_code}: {response.content[:500]!r}")
    return response


def _tus_upload(client: Client, token: str, path: Path, *, kind: str, version: str) -> int:
    """Upload a file through the tus endpoint in two chunks; return the artifact id."""
    payload = path.read_bytes()
    metadata = {"kind": kind, "version": version, "filename": path.name, "sha256": hashlib.sha256(payload).hexdigest()}
    header = ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in metadata.items())
    created = _api(
        client,
        "POST",
        "/api/v1/uploads/",
        token,
        {201},
        HTTP_TUS_RESUMABLE="1.0.0",
        HTTP_UPLOAD_LENGTH=str(len(payload)),
        HTTP_UPLOAD_METADATA=header,
    )
    location = created["Location"].split("testserver", 1)[-1]
    half = len(payload) // 2
    for offset, chunk in ((0, payload[:half]), (half, payload[half:])):
        _api(
            client,
            "PATCH",
            location,
            token,
            {204},
            data=chunk,
            content_type="application/offset+octet-stream",
            HTTP_TUS_RESUMABLE="1.0.0",
            HTTP_UPLOAD_OFFSET=str(offset),
        )
    upload = _api(client, "GET", location, token, {200}).json()
    if upload["artifact_state"] != Artifact.VERIFIED:
        raise DemoError(f"the uploaded calbin was not verified: {upload}")
    return upload["artifact"]


def _tar(directory: Path, out: Path) -> Path:
    """The directory's contents at the root of a tar, as the calbin validator expects them."""
    with tarfile.open(out, "w") as archive:
        for child in sorted(directory.iterdir()):
            archive.add(child, arcname=child.name)
    return out


def _answer_v18(client: Client, token: str, report: DemoReport) -> None:
    if Answer.objects.filter(question__code="V18", organisation__slug=VENDOR_SLUG).exists():
        return
    with tempfile.TemporaryDirectory(prefix="calculet-demo-") as tmp:
        golden = Path(tmp) / "qwen3-moe-tiny-decode-b8.golden.npz"
        package = Path(
            build_calbin(Path(tmp) / "qwen3-moe-tiny-decode-b8", preset="tiny", decode_batch=8, golden_out=golden)
        )
        calbin_tar = _tar(package, Path(tmp) / "qwen3-moe-tiny-decode-b8.calbin.tar")
        artifact_id = _tus_upload(client, token, calbin_tar, kind=Artifact.CALBIN, version=CALBIN_VERSION)
        golden_id = _tus_upload(client, token, golden, kind=Artifact.GOLDEN, version=CALBIN_VERSION)
    report.steps.append(f"uploaded the decode-batch-8 calbin and its goldens through tus ({artifact_id}, {golden_id})")
    answer = {
        "deliverable": "package-batch-8",
        "summary": "Decode batch 8 calbin for Qwen3-MoE (tiny preset), with goldens from the reference model.",
        "capability": "decode-batch-8",
        "version": CALBIN_VERSION,
        "executable_assets": [artifact_id],
        "minimal_example": {"artifact": artifact_id, "description": "prefill a short prompt, decode 8 lanes"},
        "error_paths": ERROR_PATHS,
        "golden": {"artifacts": [golden_id], "tolerances": {"cosine_min": 0.9999, "top1_min": 0.99}},
        "compatibility": COMPATIBILITY,
    }
    _api(
        client,
        "POST",
        "/api/v1/questions/V18/answers/",
        token,
        {201},
        data=json.dumps(answer),
        content_type="application/json",
    )
    report.steps.append("answered V18 completely; the seven stages ran on the simulator target")


def _answer_v17(client: Client, token: str, report: DemoReport) -> None:
    if Answer.objects.filter(question__code="V17", organisation__slug=VENDOR_SLUG).exists():
        return
    calbin_id = (
        Artifact.objects.filter(organisation__slug=VENDOR_SLUG, kind=Artifact.CALBIN)
        .values_list("id", flat=True)
        .first()
    )
    answer = {
        "deliverable": "sampling-package",
        "summary": "Sampling runs on the NPU; no golden yet.",
        "capability": "npu-sampling",
        "version": CALBIN_VERSION,
        "executable_assets": [calbin_id],
        "minimal_example": {"command": "python -m npu_sim run --job sampling.json --result out.json"},
        "error_paths": ERROR_PATHS[:1],
        "compatibility": COMPATIBILITY,
    }
    _api(
        client,
        "POST",
        "/api/v1/questions/V17/answers/",
        token,
        {201},
        data=json.dumps(answer),
        content_type="application/json",
    )
    report.steps.append("answered V17 without a golden: the answer lists golden as missing")


def _wait_for_chain(code: str) -> None:
    """The promotions need the chain's verdicts: wait until its runs on the simulator have settled. A verdict
    and the next stage's run are written together, so no run waiting or running means the chain stopped."""
    runs = Run.objects.filter(chain__question__code=code, chain__target__slug=SIMULATOR_SLUG)
    deadline = time.monotonic() + CHAIN_WAIT_SECONDS
    while not runs.exists() or runs.filter(state__in=stages.ACTIVE_STATES).exists():
        if time.monotonic() > deadline:
            raise DemoError(
                f"the {code} chain did not finish within {CHAIN_WAIT_SECONDS} s: is a worker serving the simulator "
                "target (python manage.py serve_target simulator)?"
            )
        time.sleep(1)


def _promote(pm_client: Client, slug: str, to_status: str, reason: str, report: DemoReport) -> None:
    if PromotionAttempt.objects.filter(capability__slug=slug, to_status=to_status).exists():
        return
    path = f"/api/v1/capabilities/{slug}/promotions/"
    response = pm_client.post(
        path, data=json.dumps({"to": to_status, "reason": reason}), content_type="application/json"
    )
    if response.status_code not in {201, 409}:
        raise DemoError(f"POST {path} answered {response.status_code}: {response.content[:500]!r}")
    if response.status_code == 201:
        report.steps.append(f"promoted {slug} to {to_status}")
    else:
        reasons = "; ".join(r["message"] for r in response.json().get("reasons", []))
        report.steps.append(f"promotion of {slug} to {to_status} blocked: {reasons}")


def demo_seed() -> DemoReport:
    report = DemoReport()
    pm, vendor = _ensure_users(report)
    _ensure_team(report)
    for code in ("V18", "V17"):
        _put_to_vendor(pm, code, report)
    _triage(pm, vendor, report)
    vendor_client = Client()
    _answer_v18(vendor_client, report.vendor_token, report)
    _answer_v17(vendor_client, report.vendor_token, report)
    _wait_for_chain("V18")
    _discuss_v18(pm, vendor, report)
    pm_client = Client()
    pm_client.force_login(pm)  # the PM acts through the API with a browser session
    _promote(pm_client, "decode-batch-8", "C1", "runner and golden passed on the simulator", report)
    _promote(pm_client, "decode-batch-8", "C0", "asked for C0 with simulator runs only", report)
    _promote(pm_client, "npu-sampling", "C2", "vendor says sampling runs on the NPU", report)
    return report
