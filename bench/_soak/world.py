"""What the soak starts from: its own database (dropped and created again), migrated and holding the imported
checklist; vendor organisations with a user and a token and questions put to them, PM users — all made
through the product's services —, and one simulator calbin per vendor with its golden file beside it."""

import io
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from django.core.management import call_command

from _soak.processes import ROOT
from _soak.traffic import Package, PmPlan, VendorPlan
from acceptance.services import target_ensure_simulator
from evidence.models import Capability
from vendor.inputs import QuestionChanges, member_draft
from vendor.models import Question
from vendor.services.organisations import api_user_create
from vendor.services.questions import question_update

PASSWORD = "soak-password-not-secret"
# Questions put to the vendors, each with the capability its answers are about (linked by the import).
QUESTIONS = [
    ("V18", "decode-batch-8"),
    ("V19", "prefill-batch-dynamic-shape"),
    ("V01", "reproducible-compile"),
    ("V10", "custom-kernel-sdk"),
    ("V55", "enginecore"),
    ("V25", "s8-v-cache-calbin"),
    ("V33", "calbin-metadata-schema"),
    ("V32", "pipeline-parallel"),
    ("V30", "single-chiplet"),
]
PINNED = "npu-sampling"


def _admin_connection(url: str):
    split = urlsplit(url)
    return psycopg.connect(
        host=split.hostname,
        port=split.port or 5432,
        user=split.username or "postgres",
        password=split.password,
        dbname="postgres",
        autocommit=True,
    )


def database_recreate(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with _admin_connection(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def database_drop(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with _admin_connection(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_prepare() -> None:
    call_command("migrate", verbosity=0)
    call_command("import_checklist", stdout=io.StringIO())


def build_package(work: Path, seed: int) -> Package:
    """`python -m npu_sim build-calbin --preset tiny --decode-batch 8 --tar --golden-out FILE`: the package and
    its golden file."""
    calbin = work / f"qwen3-tiny-b8-seed{seed}.tar"
    golden = work / f"qwen3-tiny-b8-seed{seed}.golden.npz"
    subprocess.run(
        [sys.executable, "-m", "npu_sim", "build-calbin", "--preset", "tiny", "--decode-batch", "8",
         "--seed", str(seed), "--out", str(calbin), "--tar", "--golden-out", str(golden)],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return Package(calbin=calbin.read_bytes(), goldens=golden.read_bytes())


def seed(*, vendors: int, questions_per_vendor: int, pms: int, work: Path) -> tuple[list[VendorPlan], list[PmPlan]]:
    if vendors * questions_per_vendor > len(QUESTIONS):
        raise SystemExit(f"at most {len(QUESTIONS)} questions can be put to vendors")
    pm_users = []
    for number in range(1, pms + 1):
        user, key = api_user_create(
            member_draft(
                f"soak-pm-{number}", "soak-integration", "pm", create_org=True, org_name="Soak integration team"
            )
        )
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
        pm_users.append((user, key))
    asker = pm_users[0][0]
    target_ensure_simulator()
    vendor_plans = []
    for number in range(1, vendors + 1):
        slug = f"soak-vendor-{number}"
        user, key = api_user_create(
            member_draft(slug, slug, "vendor", create_org=True, org_name=f"Soak vendor {number}")
        )
        organisation = user.membership.organisation
        start = (number - 1) * questions_per_vendor
        assigned = dict(QUESTIONS[start : start + questions_per_vendor])
        for code, capability in assigned.items():
            question = Question.objects.get(code=code)
            if not question.capabilities.filter(slug=capability).exists():
                raise SystemExit(f"{code} is not linked to {capability}: the soak's question list is out of date")
            question_update(
                actor=asker,
                question=question,
                changes=QuestionChanges(organisation=organisation, state="asked", priority="p1"),
            )
        vendor_plans.append(
            VendorPlan(organisation=organisation.slug, key=key, questions=assigned, package=build_package(work, number))
        )
    if not Capability.objects.filter(slug=PINNED, pinned=True).exists():
        raise SystemExit(f"{PINNED} is not a pinned capability: the soak's capability list is out of date")
    codes = [code for plan in vendor_plans for code in plan.questions]
    capabilities = [slug for plan in vendor_plans for slug in plan.questions.values()]
    pm_plans = [
        PmPlan(
            username=user.get_username(),
            password=PASSWORD,
            key=key,
            questions=codes,
            capabilities=capabilities,
            pinned=PINNED,
        )
        for user, key in pm_users
    ]
    return vendor_plans, pm_plans
