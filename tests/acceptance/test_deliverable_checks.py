"""Static checks of an answer's sdk, container_image and schema deliverables: real inputs (a shared library
built with g++, an OCI archive, JSON Schemas), evidence of the right grade, and the deliverable decided; a
check whose message was lost is sent again, and a check run twice decides once."""

import copy
import importlib
import json
from dataclasses import replace
from datetime import timedelta

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation
from kombu.exceptions import OperationalError

from acceptance.inputs import PromotionRequest
from acceptance.recipes import DECODE_CALLS, KV_MANAGER_CALLS
from acceptance.selectors import question_deliverables
from acceptance.services import answer_submit, capability_promote, deliverable_checks, dispatch
from acceptance.services.deliverable_checks import (
    CHECK_RESEND_AFTER,
    deliverable_check_answer,
    deliverable_checks_resend,
)
from calculet.models import AuditEntry
from evidence.models import EvidenceItem
from evidence.services import evidence_record
from npu_sim.calbin.build import build_calbin
from npu_sim.calbin.layout import CHECKSUMS
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_account,
    make_artifact,
    make_capability,
    make_deliverable,
    make_question,
    make_user,
    sha256,
)
from tests.inspection_builders import (
    COMPILER_COMMITS,
    COMPONENT_FILES,
    PACKAGE_METADATA_SCHEMA,
    TRACE_CONVERTER,
    add_model,
    build_project,
    build_sdk,
    c02_onnx,
    compiler_sbom,
    component_sbom,
    example_source,
    oci_image_files,
    only_manifest,
    onnx_checker,
    tar_bytes,
    trace_delivery,
)
from vendor import states
from vendor.models import Deliverable, Organisation

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer(db):
    return make_user("ann", "acme", "vendor")


@pytest.fixture
def acme(engineer):
    return Organisation.objects.get(slug="acme")


@pytest.fixture
def golden(engineer):
    return make_artifact(engineer, b"golden", kind="golden", version="1.0", file_name="golden.npz")


def sdk_archive(tmp_path, *, calls=KV_MANAGER_CALLS, undefined=(), declared=None) -> bytes:
    headers, library = build_sdk(tmp_path / "sdk", list(calls), undefined=undefined)
    files = {f"include/calrt/{p.name}": p.read_bytes() for p in (headers / "calrt").iterdir()}
    files[f"lib/{library.name}"] = library.read_bytes()
    files["example/example.cpp"] = example_source(list(calls)).encode()
    if declared is not None:
        files["entry_points.txt"] = "".join(f"{call}\n" for call in declared).encode()
    return tar_bytes(files)


def answer_with(
    engineer,
    acme,
    golden,
    tmp_path,
    *,
    code,
    kind,
    artifact_kind,
    data: bytes,
    capability_slug,
    answer=None,
    extra_assets=(),
    **extra,
):
    """A complete answer delivering `data` (as an artifact of `artifact_kind`, beside `extra_assets`) for the
    question's deliverable; `answer` overrides fields of the answer."""
    question = make_question(code, organisation=acme, state="asked", deliverable=None)
    capability = make_capability(capability_slug, questions=[question])
    deliverable = make_deliverable(question, "delivery", kind=kind, capabilities=[capability], **extra)
    artifact = make_artifact(engineer, data, kind=artifact_kind, version="0.7.6", file_name=f"delivery-{kind}")
    answer_data = complete_answer_data(
        capability=capability, calbin=artifact, golden=golden, deliverable="delivery", extra_assets=extra_assets
    )
    answer_data.update(answer or {})
    stored = answer_submit(actor=engineer, question=question, draft=answer_draft(answer_data))
    return stored, deliverable, capability


def build_delivered(engineer, tmp_path, *, reproducible=True, writes="image", package=None) -> dict:
    """The answer's minimal example as its build (V03): `sh build.sh` writing `out/`, which outputs.txt names.
    What it writes: the layout of the image `answer_with_image` delivers (`image`), the same as a tar of other
    bytes (`image-tar`), or a compiled kernel (`other`: a build of something else); with `package` (path ->
    bytes), those files too. When not `reproducible`, the time it ran as well."""
    project = tmp_path / "build-context"
    if writes == "other":
        build_project(project, reproducible=reproducible)
    else:
        for name, data in oci_image_files().items():
            (project / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            (project / "src" / name).write_bytes(data)
        pack = (
            "tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf out/image.tar -C src ."
            if writes == "image-tar"
            else "cp -R src/. out/"
        )
        stamp = "" if reproducible else "date +%s%N > out/built-at\n"
        (project / "build.sh").write_text(f"set -e\nmkdir -p out\n{pack}\n{stamp}")
    for name, data in (package or {}).items():
        (project / "package" / name).parent.mkdir(parents=True, exist_ok=True)
        (project / "package" / name).write_bytes(data)
    if package:
        with (project / "build.sh").open("a") as script:
            script.write("cp -R package/. out/\n")
    (project / "outputs.txt").write_text("out\n")
    files = {str(path.relative_to(project)): path.read_bytes() for path in project.rglob("*") if path.is_file()}
    context = make_artifact(engineer, tar_bytes(files), kind="sdk", version="0.7.6", file_name="build-context.tar")
    return {"minimal_example": {"artifact": context.pk, "command": "sh build.sh", "description": "the one-step build"}}


@pytest.fixture
def answer_with_sdk(engineer, acme, golden, tmp_path):
    """`answer_with` for an SDK archive, delivered for the KV manager's question unless told otherwise."""

    def answer(data: bytes, *, code="V26", capability_slug="kv-manager-api"):
        return answer_with(
            engineer,
            acme,
            golden,
            tmp_path,
            code=code,
            kind="sdk",
            artifact_kind="sdk",
            data=data,
            capability_slug=capability_slug,
        )

    return answer


@pytest.fixture
def answer_with_image(engineer, acme, golden, tmp_path):
    """`answer_with` for an OCI image (with SBOM and licence unless `data` says otherwise), delivered for V03's
    reproducible compile unless told otherwise; `answer` overrides fields of the answer (its build)."""

    def answer(*, data=None, code="V03", capability_slug="reproducible-compile", answer=None, extra_assets=()):
        return answer_with(
            engineer,
            acme,
            golden,
            tmp_path,
            code=code,
            kind="container_image",
            artifact_kind="container_image",
            data=tar_bytes(oci_image_files()) if data is None else data,
            capability_slug=capability_slug,
            answer=answer,
            extra_assets=extra_assets,
        )

    return answer


def test_an_sdk_with_every_entry_point_is_accepted_with_e2_evidence(answer_with_sdk, tmp_path):
    answer, deliverable, capability = answer_with_sdk(sdk_archive(tmp_path))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.ACCEPTED, decided.reason
    item = EvidenceItem.objects.get(deliverable=deliverable)
    assert (item.origin, item.grade_text, item.versions) == ("check", "E2", {"calrt": "0.7.6"})
    assert list(capability.evidence.all()) == [item]
    findings = item.detail
    assert findings["checked"]["report"]["checked"]["entry_points"] == list(KV_MANAGER_CALLS)
    # The minimal example was built against the headers and the library.
    assert findings["checked"]["build"]["passed"] is True


@pytest.mark.parametrize(("left_out", "proves_decode"), [((), True), (("infer",), False)])
def test_a_passing_sdk_is_e2_for_every_capability_whose_calls_it_carries(
    answer_with_sdk, tmp_path, left_out, proves_decode
):
    """The capability's SDK entry points present in the delivered SDK of that version: an SDK delivered for the
    KV manager that also carries decode's calls is E2 for decode batch 8; one without `infer` is not."""
    decode = make_capability("decode-batch-8")
    calls = [call for call in dict.fromkeys([*KV_MANAGER_CALLS, *DECODE_CALLS]) if call not in left_out]
    answer, deliverable, capability = answer_with_sdk(sdk_archive(tmp_path, calls=calls))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.ACCEPTED, decided.reason
    item = EvidenceItem.objects.get(deliverable=deliverable)
    assert capability.evidence.filter(pk=item.pk).exists()
    assert decode.evidence.filter(pk=item.pk).exists() is proves_decode


def test_an_sdk_missing_one_symbol_is_rejected_naming_it(answer_with_sdk, tmp_path):
    answer, deliverable, _capability = answer_with_sdk(sdk_archive(tmp_path, undefined=("KvManager::DoShift",)))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "KvManager::DoShift is not a defined dynamic symbol" in decided.reason
    assert EvidenceItem.objects.get(deliverable=deliverable).grade_text == "E2"


def test_an_image_with_sbom_licence_and_a_reproducible_build_is_accepted_with_e1(answer_with_image, engineer, tmp_path):
    answer, deliverable, _capability = answer_with_image(answer=build_delivered(engineer, tmp_path))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.ACCEPTED, decided.reason
    assert "built twice: nothing found" in decided.reason
    evidence = EvidenceItem.objects.get(deliverable=deliverable)
    assert evidence.grade_text == "E1"
    runs = evidence.detail["checked"]["build"]["checked"]["runs"]
    assert [run["env"]["TZ"] for run in runs] == ["UTC", "Asia/Shanghai"]
    assert runs[0]["digests"] == runs[1]["digests"] and runs[0]["digests"]["out"].startswith("sha256:")
    delivered = evidence.detail["checked"]["build"]["checked"]["delivered"]
    assert delivered["found_as"]["layer 1"].startswith("out/blobs/sha256/")  # the build wrote the delivered image


def test_an_image_built_by_its_build_as_an_archive_of_other_bytes_is_accepted(answer_with_image, engineer, tmp_path):
    answer, deliverable, _capability = answer_with_image(answer=build_delivered(engineer, tmp_path, writes="image-tar"))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.ACCEPTED, decided.reason
    delivered = EvidenceItem.objects.get(deliverable=deliverable).detail["checked"]["build"]["checked"]["delivered"]
    assert delivered["artifact"] == "the delivered image delivery-container_image 0.7.6"
    assert delivered["found_as"]["config"].startswith("out/image.tar:./blobs/sha256/")


def test_an_unrelated_image_beside_a_build_of_something_else_is_rejected_naming_what_differs(
    answer_with_image, engineer, tmp_path
):
    answer, _deliverable, _capability = answer_with_image(answer=build_delivered(engineer, tmp_path, writes="other"))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    _name, manifest = only_manifest(oci_image_files())
    assert (
        f"the build's output is not the delivered image delivery-container_image 0.7.6: it did not write its "
        f"config {manifest['config']['digest']}, layer 1 {manifest['layers'][0]['digest']}" in decided.reason
    )


def test_an_image_with_a_layer_the_build_does_not_write_is_rejected_naming_the_layer(
    answer_with_image, engineer, tmp_path
):
    delivered = tar_bytes(oci_image_files(extra_layers=({"etc/calcc.conf": b"opt=3\n"},)))
    answer, _deliverable, _capability = answer_with_image(data=delivered, answer=build_delivered(engineer, tmp_path))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "layer 2 sha256:" in decided.reason and "layer 1 " not in decided.reason


PACKAGE_FILES = {"qwen3/package_info.txt": b"calbin v2\n", "qwen3/weights.bin": b"\x01" * 64}


@pytest.mark.parametrize(
    ("written", "accepted"), [(PACKAGE_FILES, True), ({**PACKAGE_FILES, "qwen3/weights.bin": b"\x02" * 64}, False)]
)
def test_a_build_must_write_the_package_the_answer_delivers_beside_the_image(
    answer_with_image, engineer, tmp_path, written, accepted
):
    """V03's compile writes the package, not the compiler's image: the package's files are the delivery."""
    package = make_artifact(engineer, tar_bytes(PACKAGE_FILES), kind="calbin", version="1.0.0", file_name="q.tar")
    build = build_delivered(engineer, tmp_path, writes="other", package=written)
    answer, _deliverable, _capability = answer_with_image(answer=build, extra_assets=[package])
    decided = deliverable_check_answer(answer.pk)
    assert (decided.state == Deliverable.ACCEPTED) is accepted, decided.reason
    if not accepted:
        assert (
            "the build's output is not the delivered package q.tar 1.0.0: it did not write its qwen3/weights.bin"
            in (decided.reason)
        )


def npu_sim_build(engineer) -> dict:
    """V03's one-step compile as a build context: the simulator's toolchain compiles the S8 package into out/."""
    script = "set -e\nmkdir -p out\npython3 -m npu_sim build-calbin --out out/qwen3 --features s8 --decode-batch 4\n"
    files = {"build.sh": script.encode(), "outputs.txt": b"out\n"}
    context = make_artifact(engineer, tar_bytes(files), kind="sdk", version="0.7.6", file_name="build-context.tar")
    return {"minimal_example": {"artifact": context.pk, "command": "sh build.sh", "description": "the one-step build"}}


def delivered_package(engineer, tmp_path, *, tamper=None):
    """The S8 package the compile writes, as the vendor delivers it beside the compiler's image; `tamper` edits
    its files (path -> bytes) first."""
    root = build_calbin(tmp_path / "delivered", features=("s8",), decode_batch=4)
    files = {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}
    if tamper is not None:
        tamper(files)
    return make_artifact(engineer, tar_bytes(files), kind="calbin", version="1.0.0", file_name="qwen3-s8.tar")


def flip_a_weight(files: dict[str, bytes]) -> None:
    """One byte of the first parameter block changed, SHA256SUMS written again to match: a package that
    is internally consistent and not what the build writes."""
    block = bytearray(files["param_blk0.bin"])
    block[100] ^= 0x01
    files["param_blk0.bin"] = bytes(block)
    files[CHECKSUMS] = "".join(f"{sha256(files[n])}  {n}\n" for n in sorted(files) if n != CHECKSUMS).encode()


def test_a_real_compile_must_write_the_package_delivered_file_for_file(answer_with_image, engineer, tmp_path):
    package = delivered_package(engineer, tmp_path)
    answer, _deliverable, _capability = answer_with_image(answer=npu_sim_build(engineer), extra_assets=[package])
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.ACCEPTED, decided.reason
    checked = EvidenceItem.objects.get(deliverable=decided).detail["checked"]["build"]["checked"]["delivered"]
    assert checked["artifact"] == "the delivered package qwen3-s8.tar 1.0.0"
    assert checked["found_as"]["param_blk0.bin"] == "out/qwen3/param_blk0.bin"


def test_a_delivered_package_the_compile_does_not_write_is_rejected_naming_its_files(
    answer_with_image, engineer, tmp_path
):
    package = delivered_package(engineer, tmp_path, tamper=flip_a_weight)
    answer, _deliverable, _capability = answer_with_image(answer=npu_sim_build(engineer), extra_assets=[package])
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    said = "the build's output is not the delivered package qwen3-s8.tar 1.0.0: it did not write its "
    assert said in decided.reason
    named = decided.reason.split(said, 1)[1].split(";", 1)[0]
    assert named.startswith("SHA256SUMS sha256:") and ", param_blk0.bin sha256:" in named, named
    assert "package_info.txt" not in named and "more" not in named  # the files it did write are not named


def test_a_failing_checks_evidence_is_whole_json_with_the_linkers_output(answer_with_sdk, tmp_path):
    answer, deliverable, _capability = answer_with_sdk(sdk_archive(tmp_path, undefined=("KvManager::DoShift",)))
    deliverable_check_answer(answer.pk)
    item = EvidenceItem.objects.get(deliverable=deliverable)
    assert len(json.dumps(item.detail)) > 2000  # what used to be cut there, and its JSON broken
    build = item.detail["checked"]["build"]
    assert [finding["code"] for finding in build["findings"]] == ["build_failed"]
    assert "KvManager::DoShift" in build["findings"][0]["detail"]["output_tail"]
    assert "KvManager::DoShift is not a defined dynamic symbol" in item.explanation


def test_the_evidence_api_serves_a_checks_detail_whole(answer_with_sdk, tmp_path):
    answer, deliverable, _capability = answer_with_sdk(sdk_archive(tmp_path, undefined=("KvManager::DoShift",)))
    deliverable_check_answer(answer.pk)
    item = EvidenceItem.objects.get(deliverable=deliverable)
    body = make_account("pat", "team", "pm").client().get(f"/api/v1/evidence/{item.code}/").json()
    assert body["detail"] == item.detail and body["explanation"] == item.explanation


def test_a_passing_images_evidence_names_its_sbom_and_licence(answer_with_image, engineer, tmp_path):
    answer, deliverable, _capability = answer_with_image(answer=build_delivered(engineer, tmp_path))
    deliverable_check_answer(answer.pk)
    checked = EvidenceItem.objects.get(deliverable=deliverable).detail["checked"]["report"]["checked"]
    assert checked["sbom"] == {"where": "sbom.spdx.json", "format": "SPDX", "version": "2.3", "packages": 1}
    assert checked["licence"] == "LICENSE"


def test_an_image_whose_build_stamps_the_time_is_rejected_naming_what_differs(answer_with_image, engineer, tmp_path):
    answer, _deliverable, _capability = answer_with_image(
        answer=build_delivered(engineer, tmp_path, reproducible=False)
    )
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "out differs between the two builds (1 file(s): built-at)" in decided.reason


def test_a_build_past_its_time_limit_is_rejected_with_the_sandboxs_reason_not_left_undecided(
    answer_with_image, engineer, tmp_path, monkeypatch
):
    monkeypatch.setattr(deliverable_checks, "BUILD_LIMITS", replace(deliverable_checks.BUILD_LIMITS, wall_seconds=1))
    delivered = build_delivered(engineer, tmp_path)
    delivered["minimal_example"]["command"] = "sleep 30; sh build.sh"
    answer, _deliverable, _capability = answer_with_image(answer=delivered)
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "build 1 failed" in decided.reason and "1 s" in decided.reason, decided.reason


def test_an_image_proving_a_reproducible_build_without_its_build_is_rejected(answer_with_image):
    answer, _deliverable, _capability = answer_with_image()
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "the answer must deliver its build to prove it reproducible" in decided.reason


def test_an_image_for_a_capability_not_about_a_build_needs_no_build(answer_with_image):
    answer, _deliverable, _capability = answer_with_image(code="V59", capability_slug="enginecore")
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.ACCEPTED, decided.reason
    assert "built twice" not in decided.reason


WITHOUT_KERNEL = {path: data for path, data in COMPONENT_FILES.items() if "kernels" not in path}


@pytest.mark.parametrize(
    ("layers", "sbom", "state", "said"),
    [
        ((), None, Deliverable.REJECTED, "the SBOM lists no file with its SHA-256"),
        (
            (WITHOUT_KERNEL,),
            component_sbom(),
            Deliverable.REJECTED,
            "SBOM component cal-kernels: opt/cal/kernels/matmul.o is not in the image (missing)",
        ),
        ((COMPONENT_FILES,), component_sbom(), Deliverable.ACCEPTED, "nothing found"),
    ],
    ids=["sbom-naming-no-file", "component-missing", "every-file-listed"],
)
def test_v07s_image_is_accepted_only_when_its_sbom_lists_the_files_it_holds(
    answer_with_image, layers, sbom, state, said
):
    """V07's manifest of passes, codegen, oplib and kernels: the SBOM is compared with the image's files."""
    data = tar_bytes(oci_image_files(extra_layers=layers, sbom_document=sbom))
    answer, deliverable, _capability = answer_with_image(code="V59", capability_slug="enginecore", data=data)
    Deliverable.objects.filter(pk=deliverable.pk).update(image_sbom_components=True)
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == state, decided.reason
    assert said in decided.reason


def test_an_image_without_a_licence_is_rejected(answer_with_image):
    answer, _deliverable, _capability = answer_with_image(data=tar_bytes(oci_image_files(licence=False)))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "licen" in decided.reason.lower()


def test_a_schema_that_holds_is_accepted_and_one_accepting_a16_is_rejected(engineer, acme, golden, tmp_path):
    answer, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED
    assert EvidenceItem.objects.get(deliverable=deliverable).grade_text == "E1"

    lax = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    lax["properties"]["memory"] = {"type": "object"}  # any unit, any size: A16 gets through
    artifact = make_artifact(engineer, json.dumps(lax).encode(), kind="schema", version="0.7.7", file_name="s.json")
    data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    second = answer_submit(actor=engineer, question=deliverable.question, draft=answer_draft(data))
    decided = deliverable_check_answer(second.pk)
    assert decided.state == Deliverable.REJECTED
    assert "A16" in decided.reason


def test_an_incomplete_answer_is_not_accepted_even_when_the_check_passes(engineer, acme, golden, tmp_path):
    question = make_question("V01", organisation=acme, state="asked", deliverable=None)
    make_deliverable(question, "compiler-container", kind="container_image")
    image = make_artifact(
        engineer, tar_bytes(oci_image_files()), kind="container_image", version="1", file_name="i.tar"
    )
    answer = answer_submit(actor=engineer, question=question, draft=answer_draft({"executable_assets": [image.pk]}))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "the answer is incomplete" in decided.reason


def test_the_last_accepted_deliverable_closes_the_question_through_the_task(
    answer_with_image, engineer, tmp_path, chain_in_process, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        answer, deliverable, _capability = answer_with_image(answer=build_delivered(engineer, tmp_path))
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.ACCEPTED
    question = deliverable.question
    question.refresh_from_db()
    assert question.state == states.CLOSED
    assert not answer.question.chains.exists()  # an image is checked, not run through the chain


def test_an_sdk_for_a_capability_whose_recipe_names_no_call_is_held_to_the_calls_it_declares(
    answer_with_sdk, engineer, golden, tmp_path
):
    calls = ["KernelRegistry::Register", "LaunchKernel"]
    answer, _deliverable, _capability = answer_with_sdk(
        sdk_archive(tmp_path / "a", calls=calls, declared=calls), code="V12", capability_slug="custom-kernel-sdk"
    )
    assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED

    silent = make_artifact(
        engineer, sdk_archive(tmp_path / "b", calls=calls), kind="sdk", version="0.7.7", file_name="s.tar"
    )
    data = complete_answer_data(capability=None, calbin=silent, golden=golden, deliverable="delivery")
    second = answer_submit(actor=engineer, question=answer.question, draft=answer_draft(data))
    decided = deliverable_check_answer(second.pk)
    assert decided.state == Deliverable.REJECTED
    assert "no entry points to check" in decided.reason


def test_an_sdk_for_v23_names_its_cancel_and_timeout_calls_or_is_rejected(answer_with_sdk, engineer, golden, tmp_path):
    """The seed names no cancel call: the SDK says which of its calls cancels and which times out. One that
    carries other calls but names no cancel (an SDK with no cancel API) is rejected naming the role."""
    calls = ["VirtualDevice::CancelJob", "OutputBuf::Wait"]
    named = ["cancel = VirtualDevice::CancelJob", "timeout = OutputBuf::Wait"]
    answer, _deliverable, _capability = answer_with_sdk(
        sdk_archive(tmp_path / "a", calls=calls, declared=named), code="V23", capability_slug="job-cancel-timeout"
    )
    assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED

    without_cancel = sdk_archive(tmp_path / "b", calls=["OutputBuf::Wait"], declared=["timeout = OutputBuf::Wait"])
    artifact = make_artifact(engineer, without_cancel, kind="sdk", version="0.7.7", file_name="s.tar")
    data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    second = answer_submit(actor=engineer, question=answer.question, draft=answer_draft(data))
    decided = deliverable_check_answer(second.pk)
    assert decided.state == Deliverable.REJECTED
    assert "the SDK names no call for cancel (cancels a submitted job that has not finished)" in decided.reason


def test_a_cancel_call_named_but_not_in_the_library_is_rejected_naming_it(answer_with_sdk, tmp_path):
    """Named for its role but only declared, not defined: the role's call is checked as a named one is."""
    calls = ["VirtualDevice::CancelJob", "OutputBuf::Wait"]
    named = ["cancel = VirtualDevice::CancelJob", "timeout = OutputBuf::Wait"]
    archive = sdk_archive(tmp_path / "a", calls=calls, undefined=["VirtualDevice::CancelJob"], declared=named)
    answer, _deliverable, _capability = answer_with_sdk(archive, code="V23", capability_slug="job-cancel-timeout")
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "VirtualDevice::CancelJob" in decided.reason


def test_v47_s_schema_naming_no_version_is_rejected_naming_why(engineer, acme, golden, tmp_path):
    unversioned = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    unversioned["properties"]["schema_version"] = {"type": "integer"}
    answer, deliverable, _capability = answer_with(
        engineer,
        acme,
        golden,
        tmp_path,
        code="V47",
        kind="schema",
        artifact_kind="schema",
        data=json.dumps(unversioned).encode(),
        capability_slug="calbin-metadata-schema",
        schema_of="package-metadata",
        schema_asks="version",
    )
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert "claiming schema_version 999: it does not pin 2" in decided.reason


# A check runs once


def schema_answer(engineer, acme, golden, tmp_path):
    """A complete answer delivering a schema that passes its check. Stored in the test's transaction, which
    never commits: its check is never sent (as if the message were lost) unless the test runs it."""
    return answer_with(
        engineer,
        acme,
        golden,
        tmp_path,
        code="V47",
        kind="schema",
        artifact_kind="schema",
        data=json.dumps(PACKAGE_METADATA_SCHEMA).encode(),
        capability_slug="calbin-metadata-schema",
        schema_of="package-metadata",
    )


@pytest.mark.parametrize(
    ("converter", "state", "said", "difference"),
    [
        (TRACE_CONVERTER, Deliverable.ACCEPTED, "nothing found", "—"),
        (
            TRACE_CONVERTER.replace('trace["records"]:', 'trace["records"][1:]:'),
            Deliverable.REJECTED,
            "the sample has 4 events, the converter's Chrome trace 3 duration events (X, or B and E)",
            "—",
        ),
        (
            TRACE_CONVERTER.replace('"ts": record["start_cycle"] / per_us', '"ts": record["start_cycle"]'),
            Deliverable.REJECTED,
            "softmax (the sample's event 2, thread [0]) starts at 4000 µs",
            "softmax (thread [0]): the sample says it starts at 4.0 µs and lasts 1.0 µs, the Chrome trace 4000 µs "
            "and 1.0 µs",
        ),
    ],
    ids=["its-converter-converts-the-sample", "its-converter-drops-an-event", "its-starts-ignore-the-clock"],
)
def test_v37s_trace_delivery_runs_its_converter_on_its_sample(
    engineer, acme, golden, tmp_path, converter, state, said, difference
):
    """The vendor's own trace format, not npu_sim's Chrome export: the tar of schema, sample, its fields and the
    converter; the panel says what was compared and the first difference."""
    root = trace_delivery(tmp_path / "delivery", converter=converter)
    data = tar_bytes({path.name: path.read_bytes() for path in root.iterdir()})
    answer, deliverable, _capability = answer_with(
        engineer,
        acme,
        golden,
        tmp_path,
        code="V37",
        kind="schema",
        artifact_kind="schema",
        data=data,
        capability_slug="device-counters-trace",
        schema_of="trace",
    )
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == state, decided.reason
    assert said in decided.reason
    found = found_lines(deliverable)
    assert (
        found["Times read from the sample"]
        == "start_cycle and cycles, in cycles of the clock clock_hz, to microseconds"
    )
    assert found["Events compared"].startswith("4 in the sample")
    assert found["First difference"] == difference
    with translation.override("zh-hans"):
        said_in_chinese = found_lines(deliverable)
    assert said_in_chinese["比较的事件"].startswith("样例中 4 个")


def test_a_check_run_twice_decides_once(engineer, acme, golden, tmp_path):
    answer, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED
    assert deliverable_check_answer(answer.pk) is None
    assert EvidenceItem.objects.filter(deliverable=deliverable).count() == 1
    assert AuditEntry.objects.filter(action="deliverable.accept").count() == 1


def test_a_check_that_finds_its_answer_checked_meanwhile_records_nothing(engineer, acme, golden, tmp_path, monkeypatch):
    """Two messages for one answer, the second decided while the first was checking: the first finds the
    evidence under the deliverable's lock and stops there."""
    answer, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    check = deliverable_checks._check

    def check_while_another_message_decides(answer, deliverable):
        monkeypatch.setattr(deliverable_checks, "_check", check)
        assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED
        return check(answer, deliverable)

    monkeypatch.setattr(deliverable_checks, "_check", check_while_another_message_decides)
    assert deliverable_check_answer(answer.pk) is None
    assert EvidenceItem.objects.filter(deliverable=deliverable).count() == 1


def test_check_evidence_recorded_before_it_named_its_answer_is_linked_to_it(engineer, acme, golden, tmp_path):
    """Otherwise every answer checked before the migration would be checked again."""
    answer, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    item = evidence_record(
        origin=EvidenceItem.CHECK,
        grade="E1",
        conclusion="static check passed",
        organisation=acme,
        deliverable=deliverable,
        code_prefix="CHK-SCHEMA",
        source_text=f"static check of answer {answer.pk} (r1) of acme",
    )
    migration = importlib.import_module("evidence.migrations.0004_evidence_item_answer")
    migration.link_checked_answers(apps, None)
    item.refresh_from_db()
    assert item.answer == answer
    assert deliverable_check_answer(answer.pk) is None  # checked already: not again


# A check whose message was lost is sent again

OVERDUE = CHECK_RESEND_AFTER + timedelta(minutes=1)


@pytest.fixture
def sent_checks(monkeypatch):
    """The answer ids whose check is sent to the broker (where no worker of these tests listens)."""
    sent: list[int] = []

    def send(name, args, **options):
        if name == "acceptance.deliverable_check":
            sent.append(args[0])

    monkeypatch.setattr(dispatch, "task_send", send)
    return sent


def test_a_lost_check_is_sent_again_once_it_is_overdue(engineer, acme, golden, tmp_path, sent_checks):
    answer, _deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    assert deliverable_checks_resend() == 0  # stored just now: its message may still be on its way
    assert sent_checks == []
    assert deliverable_checks_resend(now=timezone.now() + OVERDUE) == 1
    assert sent_checks == [answer.pk]


def test_the_check_sent_again_decides_the_deliverable_and_is_not_sent_after(
    engineer, acme, golden, tmp_path, chain_in_process
):
    answer, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    assert deliverable_checks_resend(now=timezone.now() + OVERDUE) == 1  # run in this process as it is sent
    deliverable.refresh_from_db()
    assert deliverable.state == Deliverable.ACCEPTED
    assert EvidenceItem.objects.get(deliverable=deliverable).answer == answer
    assert deliverable_checks_resend(now=timezone.now() + OVERDUE) == 0


def test_an_answer_already_checked_is_not_sent_again(engineer, acme, golden, tmp_path, sent_checks):
    answer, _deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    deliverable_check_answer(answer.pk)
    assert deliverable_checks_resend(now=timezone.now() + OVERDUE) == 0
    assert sent_checks == []


def test_only_the_newest_answer_for_a_deliverable_is_sent_again(engineer, acme, golden, tmp_path, sent_checks):
    first, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    artifact = make_artifact(engineer, b"{}", kind="schema", version="0.7.7", file_name="s.json")
    data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    second = answer_submit(actor=engineer, question=deliverable.question, draft=answer_draft(data))
    assert deliverable_checks_resend(now=timezone.now() + OVERDUE) == 1
    assert sent_checks == [second.pk]
    assert deliverable_check_answer(first.pk) is None  # superseded: its check decides nothing either


def test_a_check_refused_by_a_broker_that_is_down_does_not_fail_the_answer(
    engineer, acme, golden, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    tried: list[int] = []

    def broker_down(name, args, **options):
        if name != "acceptance.deliverable_check":
            return
        tried.append(args[0])
        raise OperationalError("Error 111 connecting to redis: Connection refused.")

    monkeypatch.setattr(dispatch, "task_send", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        answer, _deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    assert tried == [answer.pk]  # sent once stored, refused, and the answer still owes its check
    assert deliverable_checks_resend(now=timezone.now() + OVERDUE) == 1
    assert tried == [answer.pk, answer.pk]


def test_a_passed_schema_check_is_what_moves_its_probeless_capability(engineer, acme, golden, tmp_path):
    """calbin-metadata-schema has no probes: no run can prove it, its schema's check (E1) does; a rejected check
    proves nothing."""
    answer, _deliverable, capability = schema_answer(engineer, acme, golden, tmp_path)
    pm = make_user("pam", "team", "pm")
    blocked = capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C2"))
    assert [r["code"] for r in blocked.reasons] == ["no_answer"]
    assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED
    attempt = capability_promote(actor=pm, capability=capability, request=PromotionRequest(to="C0"))
    assert attempt.allowed, attempt.reasons
    assert attempt.answer_id == answer.pk


def found_lines(deliverable: Deliverable) -> dict[str, str]:
    """What the question page's panel says the deliverable's latest static check found."""
    view = next(v for v in question_deliverables(deliverable.question) if v.deliverable.pk == deliverable.pk)
    return dict(view.found)


def test_the_panel_lists_the_sdk_calls_found(answer_with_sdk, tmp_path):
    answer, deliverable, _capability = answer_with_sdk(sdk_archive(tmp_path))
    deliverable_check_answer(answer.pk)
    found = found_lines(deliverable)
    assert found["Calls missing"] == "—"
    assert all(call in found["Calls found in the headers and the library"] for call in KV_MANAGER_CALLS)
    assert found["Calls found in the headers and the library"].count(".h)") >= len(KV_MANAGER_CALLS)
    # On the question page, in both languages; "nothing found" reads as no problem, not as no call.
    client = Client()
    client.force_login(make_user("pia", "team", "pm"))
    url = reverse("question-detail", args=[deliverable.question.code])
    english = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    panel = english[english.index('id="deliverables"') :].split("</section>")[0]
    assert "<dt>Calls found in the headers and the library</dt>" in panel
    assert ": no problem found" in panel and "nothing found" not in panel
    chinese = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "<dt>在头文件和库中找到的调用</dt>" in chinese and "<dt>缺少的调用</dt><dd>—</dd>" in chinese


def test_the_panel_names_the_sdk_call_missing(answer_with_sdk, tmp_path):
    broken, deliverable, _capability = answer_with_sdk(sdk_archive(tmp_path, undefined=("KvManager::DoShift",)))
    deliverable_check_answer(broken.pk)
    found = found_lines(deliverable)
    assert found["Calls missing"] == "KvManager::DoShift"
    assert "KvManager::DoShift" not in found["Calls found in the headers and the library"]


def test_the_panel_names_the_images_sbom_and_licence_file(answer_with_image, engineer, tmp_path):
    answer, deliverable, _capability = answer_with_image(answer=build_delivered(engineer, tmp_path))
    deliverable_check_answer(answer.pk)
    assert found_lines(deliverable) == {"SBOM": "sbom.spdx.json (SPDX, packages listed: 1)", "Licence file": "LICENSE"}


def test_the_panel_says_an_image_has_no_licence_file(answer_with_image):
    unlicensed, deliverable, _capability = answer_with_image(data=tar_bytes(oci_image_files(licence=False)))
    deliverable_check_answer(unlicensed.pk)
    assert found_lines(deliverable)["Licence file"] == "—"


def test_the_panel_gives_the_schemas_verdict_on_each_sample(engineer, acme, golden, tmp_path):
    answer, deliverable, _capability = schema_answer(engineer, acme, golden, tmp_path)
    deliverable_check_answer(answer.pk)
    found = found_lines(deliverable)
    assert found["Current samples it wrongly rejects"] == "—"
    assert found["Defective samples it wrongly accepts"] == "—"
    assert "A16" in found["Defective samples it rejects"]

    lax = copy.deepcopy(PACKAGE_METADATA_SCHEMA)
    lax["properties"]["memory"] = {"type": "object"}
    artifact = make_artifact(engineer, json.dumps(lax).encode(), kind="schema", version="0.7.7", file_name="s.json")
    data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    second = answer_submit(actor=engineer, question=deliverable.question, draft=answer_draft(data))
    deliverable_check_answer(second.pk)
    found = found_lines(deliverable)
    assert "A16" in found["Defective samples it wrongly accepts"]
    assert "A16" not in found["Defective samples it rejects"]


# Each question's own check: V04's ONNX, V05's checker, V01's container, each schema question's fix.


@pytest.mark.parametrize(
    ("data", "state", "said"),
    [
        (c02_onnx, Deliverable.ACCEPTED, "nothing found"),
        (add_model, Deliverable.REJECTED, "not the 316f06… the seed records"),
    ],
    ids=["c02-s-onnx", "another-onnx"],
)
def test_v04_s_onnx_is_accepted_only_with_c02_s_hash(engineer, acme, golden, tmp_path, data, state, said):
    question = make_question("V04", organisation=acme, state="asked", deliverable=None)
    deliverable = make_deliverable(question, "delivery", kind="onnx", sha256_prefix="316f06")
    artifact = make_artifact(engineer, data(), kind="onnx", version="1", file_name="qwen3.onnx")
    answer_data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    answer = answer_submit(actor=engineer, question=question, draft=answer_draft(answer_data))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == state, decided.reason
    assert said in decided.reason
    assert EvidenceItem.objects.get(deliverable=deliverable).grade_text == "E1"
    found = found_lines(deliverable)
    assert found["The file's SHA-256"] == sha256(data()) and found["The hash the seed records"] == "316f06…"


@pytest.mark.parametrize(
    ("command", "state", "said", "refused"),
    [
        ("python3 check.py", Deliverable.ACCEPTED, "nothing found", "dangling-input, truncated"),
        ("true", Deliverable.REJECTED, "the checker accepts a graph whose ", "—"),
    ],
    ids=["a-checker-that-checks", "a-checker-that-accepts-everything"],
)
def test_v05_s_checker_is_run_on_valid_and_invalid_models(
    engineer, acme, golden, tmp_path, command, state, said, refused
):
    """What input the compiler takes, not that a compile reproduces: the checker moves no capability."""
    root = onnx_checker(tmp_path / "checker", command=command)
    question = make_question("V05", organisation=acme, state="asked", deliverable=None)
    deliverable = make_deliverable(question, "delivery", kind="tool", tool_runs_on="onnx")
    data = tar_bytes({path.name: path.read_bytes() for path in root.iterdir()})
    artifact = make_artifact(engineer, data, kind="tool", version="1", file_name="onnx-checker.tar")
    answer_data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    answer = answer_submit(actor=engineer, question=question, draft=answer_draft(answer_data))
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == state, decided.reason
    assert said in decided.reason
    assert found_lines(deliverable)["Models it refuses"] == refused
    assert not EvidenceItem.objects.get(deliverable=deliverable).capabilities.exists()


@pytest.mark.parametrize(
    ("sbom", "state", "said"),
    [
        (compiler_sbom(), Deliverable.ACCEPTED, "nothing found"),
        (compiler_sbom(tvm=None), Deliverable.REJECTED, "the SBOM has no component tvm"),
        (compiler_sbom(calcc="a1b2c3d4e5"), Deliverable.REJECTED, "calcc is at a1b2c3d4e5, not the 575c2d…"),
    ],
    ids=["calcc-and-tvm-at-c03-and-c04", "no-tvm", "calcc-at-another-commit"],
)
def test_v01_s_container_is_accepted_only_holding_calcc_and_tvm_at_the_seeds_commits(
    answer_with_image, engineer, tmp_path, sbom, state, said
):
    data = tar_bytes(oci_image_files(sbom_document=sbom))
    answer, deliverable, _capability = answer_with_image(
        code="V01", data=data, answer=build_delivered(engineer, tmp_path)
    )
    Deliverable.objects.filter(pk=deliverable.pk).update(image_commits=COMPILER_COMMITS)
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == state, decided.reason
    assert said in decided.reason


WEAK_METADATA_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "properties": {
        "memory": {"properties": {"device_memory_required": {"properties": {"unit": {"not": {"const": "MB"}}}}}},
        "submodels": {"prefixItems": [{"properties": {"smodel_type": {"not": {"const": "llm_decode"}}}}]},
    },
}


@pytest.mark.parametrize(
    ("code", "asks", "said"),
    [
        ("V47", "version", "claiming schema_version 999: it does not pin 2"),
        ("V48", "units", "the schema gives memory/chiplets/*/dram no unit"),
        ("V33", "A16", "accepts A16's 16 TiB written as 17592186044416 B"),
        ("V43", "A17", "accepts the current metadata with the decode labelled llm_prefill"),
        ("V46", "compatibility", "accepts the current metadata without compatibility"),
    ],
)
def test_each_schema_question_accepts_the_schema_with_its_fix_and_rejects_one_without_naming_it(
    engineer, acme, golden, tmp_path, code, asks, said
):
    """'The unit is not MB' and 'the first sub-model is not llm_decode' rejects A16 and A17 as the seed found
    them, so V08's check passes it; each of these questions' own check names the fix it lacks."""
    answer, deliverable, _capability = answer_with(
        engineer,
        acme,
        golden,
        tmp_path,
        code=code,
        kind="schema",
        artifact_kind="schema",
        data=json.dumps(PACKAGE_METADATA_SCHEMA).encode(),
        capability_slug="calbin-metadata-schema",
        schema_of="package-metadata",
        schema_asks=asks,
    )
    assert deliverable_check_answer(answer.pk).state == Deliverable.ACCEPTED
    artifact = make_artifact(
        engineer, json.dumps(WEAK_METADATA_SCHEMA).encode(), kind="schema", version="0.7.7", file_name="weak.json"
    )
    data = complete_answer_data(capability=None, calbin=artifact, golden=golden, deliverable="delivery")
    second = answer_submit(actor=engineer, question=deliverable.question, draft=answer_draft(data))
    decided = deliverable_check_answer(second.pk)
    assert decided.state == Deliverable.REJECTED
    assert said in decided.reason


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            json.dumps(PACKAGE_METADATA_SCHEMA)[:-1] + ', "properties": {}}',
            "the schema is not JSON: the key 'properties' appears more than once in one object",
        ),
        (json.dumps(PACKAGE_METADATA_SCHEMA).replace('"minimum": 0', '"minimum": NaN', 1), "NaN is not JSON"),
    ],
    ids=["a-key-given-twice", "nan"],
)
def test_a_schema_read_one_way_here_and_another_elsewhere_is_rejected(engineer, acme, golden, tmp_path, text, said):
    """Python keeps a repeated key's last value, other parsers its first: the schema is refused, not guessed at."""
    answer, deliverable, _capability = answer_with(
        engineer,
        acme,
        golden,
        tmp_path,
        code="V48",
        kind="schema",
        artifact_kind="schema",
        data=text.encode(),
        capability_slug="calbin-metadata-schema",
        schema_of="package-metadata",
        schema_asks="units",
    )
    decided = deliverable_check_answer(answer.pk)
    assert decided.state == Deliverable.REJECTED
    assert said in decided.reason
