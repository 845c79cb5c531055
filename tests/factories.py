"""Rows the tests build on, made the way the product makes them: users through the organisations service,
artifact bytes hashed and stored content-addressed, calbin packages built by the simulator."""

import io
import json
import tarfile
from pathlib import Path

from django.utils import timezone

from evidence.models import Capability
from npu_sim.calbin import build_calbin
from vendor.models import Artifact, Deliverable, Question, Section
from vendor.services.organisations import api_user_create
from vendor.storage import blob_store_file, file_sha256

_CALBIN_CACHE: dict[tuple[str, int, tuple[str, ...]], tuple[bytes, bytes]] = {}


def make_user(username: str, org_slug: str, role: str):
    user, _key = api_user_create(username, org_slug, role, create_org=True)
    return user


def make_question(
    code: str, *, organisation=None, state: str = "asked", deliverable: str | None = "package"
) -> Question:
    section, _ = Section.objects.get_or_create(
        code="12.3",
        defaults={
            "position": 3,
            "title": "Batch, concurrency and KV",
            "theme": "performance main line",
            "question_header": "问题",
            "acceptance_header": "需要的答案",
        },
    )
    question = Question.objects.create(
        code=code,
        number=int(code[1:]),
        section=section,
        question=f"Question {code}",
        acceptance="artifacts, golden, capacity and performance",
        organisation=organisation,
        state=state,
    )
    # Every imported question owes at least one deliverable; by default this one owes a model package.
    if deliverable is not None:
        Deliverable.objects.create(question=question, key=deliverable, kind=Deliverable.CALBIN, title="Model package")
    return question


def make_deliverable(
    question: Question,
    key: str,
    *,
    kind: str = Deliverable.CALBIN,
    capabilities=(),
    checklist=(),
    schema_of: str = "",
    position: int = 0,
) -> Deliverable:
    """A deliverable as the import makes it: owed, linked to the capabilities it proves."""
    if kind == Deliverable.SCHEMA and not schema_of:
        schema_of = "package-metadata"
    deliverable = Deliverable.objects.create(
        question=question,
        key=key,
        kind=kind,
        title=key.replace("-", " "),
        position=position,
        checklist=list(checklist),
        schema_of=schema_of,
    )
    for capability in capabilities:
        capability.deliverables.add(deliverable)
    return deliverable


def make_capability(slug: str, *, status: str = "C3", questions=(), pinned_status: str = "") -> Capability:
    capability = Capability.objects.create(
        slug=slug,
        title=slug.replace("-", " "),
        status=status,
        pinned=bool(pinned_status),
        pinned_status=pinned_status,
    )
    capability.questions.add(*questions)
    return capability


def tiny_package_bytes(
    tmp_dir: Path, *, decode_batch: int = 8, preset: str = "tiny", features: tuple[str, ...] = ()
) -> tuple[bytes, bytes]:
    """A calbin tar built by the simulator and the golden file a vendor delivers with it (cached per process:
    the same options give the same bytes)."""
    key = (preset, decode_batch, tuple(sorted(features)))
    if key not in _CALBIN_CACHE:
        name = f"{preset}-b{decode_batch}-{'-'.join(key[2]) or 'plain'}"
        golden = Path(tmp_dir) / f"{name}-golden.npz"
        path = build_calbin(
            Path(tmp_dir) / f"{name}.tar",
            preset=preset,
            decode_batch=decode_batch,
            features=features,
            golden_out=golden,
        )
        _CALBIN_CACHE[key] = (path.read_bytes(), golden.read_bytes())
    return _CALBIN_CACHE[key]


def tiny_calbin_bytes(tmp_dir: Path, *, decode_batch: int = 8, preset: str = "tiny") -> bytes:
    """A calbin tar built by the simulator (cached per process: the same preset gives the same bytes)."""
    return tiny_package_bytes(tmp_dir, decode_batch=decode_batch, preset=preset)[0]


def tiny_golden_bytes(tmp_dir: Path, *, decode_batch: int = 8, preset: str = "tiny") -> bytes:
    """The golden file the vendor delivers with `tiny_calbin_bytes`' package."""
    return tiny_package_bytes(tmp_dir, decode_batch=decode_batch, preset=preset)[1]


def tar_bytes(members: dict[str, bytes], *, modes: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = (modes or {}).get(name, 0o644)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def runner_bundle_bytes(script: str, *, command=("python3", "run.py")) -> bytes:
    """A vendor runner bundle: runner.json naming the command, and the script it runs."""
    manifest = json.dumps({"schema_version": 1, "command": list(command)}).encode()
    return tar_bytes({"runner.json": manifest, "run.py": script.encode()})


def make_artifact(
    organisation, data: bytes, *, kind: str, version: str, file_name: str, tmp_dir: Path, uploaded_by=None
) -> Artifact:
    """A verified artifact: the bytes hashed, stored once by digest, and the row pointing at them."""
    path = Path(tmp_dir) / f"artifact-{kind}-{version}-{file_name}"
    path.write_bytes(data)
    sha256, size = file_sha256(path)
    blob = blob_store_file(path, sha256=sha256, size=size)
    return Artifact.objects.create(
        organisation=organisation,
        kind=kind,
        version=version,
        file_name=file_name,
        declared_size=size,
        declared_sha256=sha256,
        blob=blob,
        state=Artifact.VERIFIED,
        uploaded_by=uploaded_by,
        verified_at=timezone.now(),
    )


def complete_answer_data(*, capability, calbin, golden, extra_assets=(), **overrides) -> dict:
    """The payload of a complete answer (all six elements of section 13) for `answer_submit`."""
    data = {
        "capability": capability.slug if capability else None,
        "version": "0.7.6",
        "summary": "decode batch 8 on the tiny preset",
        "executable_assets": [calbin.pk, *[a.pk for a in extra_assets]],
        "minimal_example": {"command": "npu-run --batch 8", "description": "decode eight sequences"},
        "error_paths": [{"scenario": "kv_apply_failure", "expect_code": 15}],
        "golden": {"artifacts": [golden.pk], "tolerances": {}},
        "compatibility": {"calrt": ">=0.7.6,<0.8", "driver": ">=2.3,<3", "firmware": ">=1.8,<2", "chip": "calculet-2c"},
        "thresholds": {"soak_requests": 8, "soak_concurrency": 4},
    }
    data.update(overrides)
    return data
