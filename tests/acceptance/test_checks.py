"""The claim and artifact stages, checked by services on real stored artifacts and simulator-built calbins."""

import io
import tarfile

import pytest

from acceptance import stages
from acceptance.models import Chain, Target
from acceptance.services import answer_submit, chain_start_for_answer, target_register
from acceptance.services.checks import stage_artifact, stage_claim
from acceptance.services.inputs import answer_inputs
from calculet.actors import SYSTEM
from tests.acceptance.conftest import edit_calbin, vendor_form_calbin
from tests.factories import (
    answer_draft,
    complete_answer_data,
    make_artifact,
    make_capability,
    make_question,
    runner_bundle_bytes,
    tar_bytes,
)
from vendor.storage import artifact_storage

PREFILL_INFO = "prefill/submodel_memory_reserved_info.txt"


def chain_for(answer, target_slug="simulator") -> Chain:
    chain_start_for_answer(answer.pk)
    return Chain.objects.get(answer=answer, target__slug=target_slug)


def claim(chain):
    return stage_claim(chain, answer_inputs(chain.answer))


def artifact(chain):
    return stage_artifact(chain, answer_inputs(chain.answer), chain.target, lambda message: None)


def test_a_complete_answer_passes_the_claim(answer):
    outcome = claim(chain_for(answer))
    assert outcome.verdict == stages.PASS
    assert outcome.findings == []


def test_the_claim_names_exactly_the_missing_elements_and_long_text_does_not_help(
    vendor_user, question, capability, calbin
):
    data = complete_answer_data(capability=capability, calbin=calbin, golden=calbin)
    data["golden"] = {"artifacts": [], "tolerances": {}}
    data["error_paths"] = []
    data["summary"] = "Golden outputs match and every error path is handled. " * 200
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    outcome = claim(chain_for(answer))
    assert outcome.verdict == stages.FAIL
    assert [(f["code"], f["field"]) for f in outcome.findings] == [
        ("element_missing", "error_path"),
        ("element_missing", "golden"),
    ]


def test_no_capability_to_move_fails_the_claim_with_a_clear_finding(vendor_user, question, capability, calbin, golden):
    make_capability("decode-batch-16", questions=[question])
    data = complete_answer_data(capability=None, calbin=calbin, golden=golden)
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    chain_start_for_answer(answer.pk)
    chain = Chain.objects.get(answer=answer)
    assert chain.capability is None
    outcome = claim(chain)
    assert outcome.verdict == stages.FAIL
    assert outcome.findings[0]["code"] == "capability_unresolved"
    assert "decode-batch-16, decode-batch-8" in outcome.findings[0]["message"]


def test_the_only_linked_capability_is_used_when_the_answer_names_none(
    vendor_user, question, capability, calbin, golden
):
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=None, calbin=calbin, golden=golden)),
    )
    assert chain_for(answer).capability == capability


def test_verified_artifacts_pass_with_their_digests_rechecked(answer):
    outcome = artifact(chain_for(answer))
    assert outcome.verdict == stages.PASS, outcome.findings
    assert outcome.metrics["artifacts"] == 2


def test_bytes_changed_in_storage_fail_the_digest_check(answer, calbin):
    path = artifact_storage().path(calbin.blob.storage_name)
    with open(path, "r+b") as handle:
        handle.seek(600)
        handle.write(b"\xff\xff\xff\xff")
    outcome = artifact(chain_for(answer))
    assert outcome.verdict == stages.FAIL
    assert [f["code"] for f in outcome.findings] == ["digest_mismatch"]


def test_the_simulators_validator_findings_become_the_stages(
    vendor_user, organisation, question, capability, golden, calbin_bytes, tmp_path
):
    bad = make_artifact(
        vendor_user,
        edit_calbin(calbin_bytes, PREFILL_INFO, "smodel_type", "llm_decode"),
        kind="calbin",
        version="1.0.1",
        file_name="tiny-b8.tar",
    )
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=bad, golden=golden)),
    )
    outcome = artifact(chain_for(answer))
    assert outcome.verdict == stages.FAIL
    mismatch = [f for f in outcome.findings if f["code"] == "smodel_type_mismatch"]
    assert mismatch and mismatch[0]["severity"] == "error"
    assert mismatch[0]["field"] == f"artifacts[{bad.pk}].{PREFILL_INFO}:smodel_type"


@pytest.mark.parametrize("target_kind", [Target.SIMULATOR, Target.HARDWARE])
def test_the_vendors_own_package_passes_on_its_static_facts(
    vendor_user, question, capability, golden, calbin_bytes, target_kind
):
    """The seed's package has no package_info.txt or param_table.txt and carries A16 and A17: it passes, with
    both reported, on the simulator target and on a board."""
    package = vendor_form_calbin(
        calbin_bytes,
        {
            "model_memory_reserved_info.txt": {"device_memory_required": "16777216 MB"},
            PREFILL_INFO: {"smodel_type": "llm_decode"},
        },
    )
    vendors = make_artifact(vendor_user, package, kind="calbin", version="1.0.2", file_name="vendor-form.tar")
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=vendors, golden=golden)),
    )
    slug = "simulator"
    if target_kind == Target.HARDWARE:
        slug = "board-1"
        target_register(
            actor=SYSTEM,
            slug=slug,
            kind=Target.HARDWARE,
            runner_command="board-runner --device 0",
            calrt_version="0.7.6",
            driver_version="2.3.0",
            firmware_version="1.8.0",
            chip="calculet-2c",
        )
    outcome = artifact(chain_for(answer, slug))
    assert outcome.verdict == stages.PASS, outcome.findings
    assert {(f["code"], f["severity"]) for f in outcome.findings} == {
        ("memory_exceeds_device", "warning"),  # A16
        ("smodel_type_mismatch", "warning"),  # A17
        ("checksums_absent", "warning"),
    }
    assert outcome.metrics["calbin_form"] == "vendor"


def test_the_vendors_own_package_with_a_wrong_mask_fails(vendor_user, question, capability, golden, calbin_bytes):
    package = vendor_form_calbin(calbin_bytes, {"model_memory_reserved_info.txt": {"param_blk0.chip_mask": "0x3"}})
    vendors = make_artifact(vendor_user, package, kind="calbin", version="1.0.2", file_name="vendor-form.tar")
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=vendors, golden=golden)),
    )
    outcome = artifact(chain_for(answer))
    assert outcome.verdict == stages.FAIL
    assert [f["code"] for f in outcome.findings if f["severity"] == "error"] == ["param_mask_shared"]


def test_a_target_outside_the_calbins_range_fails_the_artifact_stage(answer):
    target_register(
        actor=SYSTEM,
        slug="board-next",
        kind=Target.HARDWARE,
        runner_command="board-runner --device 0",
        calrt_version="0.8.1",
        driver_version="2.3.0",
        firmware_version="1.8.0",
        chip="calculet-2c",
    )
    outcome = artifact(chain_for(answer, "board-next"))
    assert outcome.verdict == stages.FAIL
    assert {f["code"] for f in outcome.findings} == {"target_incompatible", "target_outside_declared_range"}
    assert any("calrt 0.8.1 is outside the calbin's range" in f["message"] for f in outcome.findings)


def test_a_target_outside_the_answers_declared_range_fails(vendor_user, question, capability, calbin, golden):
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden)
    data["compatibility"] = {**data["compatibility"], "firmware": "1.9.0"}
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    outcome = artifact(chain_for(answer))
    assert outcome.verdict == stages.FAIL
    assert [f["field"] for f in outcome.findings] == ["compatibility.firmware"]


def test_no_calbin_among_the_executable_assets_fails(vendor_user, organisation, question, capability, golden, tmp_path):
    sdk = make_artifact(vendor_user, b"sdk", kind="sdk", version="0.7.6", file_name="sdk.tar")
    answer = answer_submit(
        actor=vendor_user,
        question=question,
        draft=answer_draft(complete_answer_data(capability=capability, calbin=sdk, golden=golden)),
    )
    outcome = artifact(chain_for(answer))
    assert [f["code"] for f in outcome.findings] == ["calbin_missing"]


def bundle_with_a_link_out() -> bytes:
    """A runner bundle stored before its archive was refused: its run.py is a link out of the bundle."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        manifest = b'{"schema_version": 1, "command": ["python3", "run.py"]}'
        info = tarfile.TarInfo("runner.json")
        info.size = len(manifest)
        archive.addfile(info, io.BytesIO(manifest))
        link = tarfile.TarInfo("run.py")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../usr/bin/python3"
        archive.addfile(link)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("bundle", "code"),
    [
        (tar_bytes({"run.py": b"print(1)"}), "runner_manifest_missing"),
        (bundle_with_a_link_out(), "bundle_unsafe"),
        (tar_bytes({"runner.json": b'{"schema_version": 1, "command": "run.py"}'}), "runner_manifest_invalid"),
        (runner_bundle_bytes("print(1)"), None),
    ],
)
def test_runner_bundles_are_checked(vendor_user, question, capability, calbin, golden, monkeypatch, bundle, code):
    with monkeypatch.context() as patch:
        # Uploads refuse an unsafe archive; the stage checks again, for bytes accepted under earlier rules.
        patch.setattr("vendor.services.artifacts.archive_check", lambda path: None)
        artifact_row = make_artifact(vendor_user, bundle, kind="runner_bundle", version="1.0.0", file_name="runner.tar")
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden, extra_assets=[artifact_row])
    answer = answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))
    outcome = artifact(chain_for(answer))
    assert [f["code"] for f in outcome.findings] == ([code] if code else [])
    if code == "bundle_unsafe":
        assert outcome.findings[0]["message"] == (
            "runner.tar 1.0.0: Link 'run.py' points outside the archive ('../../../usr/bin/python3')."
        )


def test_a_capability_that_configures_a_second_model_needs_two_calbins(
    vendor_user, organisation, golden, calbin, calbin_bytes
):
    question = make_question("V35", organisation=organisation, state="asked")
    residency = make_capability("dynamic-resident-multi-model", status="C3", pinned_status="C3", questions=[question])
    data = complete_answer_data(capability=residency, calbin=calbin, golden=golden)
    outcome = artifact(chain_for(answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))))
    assert [f["code"] for f in outcome.findings] == ["second_calbin_missing"]
    assert "dynamic-resident-multi-model configures a second model" in outcome.findings[0]["message"]

    other = make_artifact(vendor_user, calbin_bytes, kind="calbin", version="1.0.1", file_name="other.tar")
    data = complete_answer_data(capability=residency, calbin=calbin, golden=golden, extra_assets=[other])
    outcome = artifact(chain_for(answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))))
    assert outcome.verdict == stages.PASS, outcome.findings


def test_two_calbins_for_a_one_package_capability_are_ambiguous(
    vendor_user, question, capability, calbin, golden, calbin_bytes
):
    other = make_artifact(vendor_user, calbin_bytes, kind="calbin", version="1.0.1", file_name="other.tar")
    data = complete_answer_data(capability=capability, calbin=calbin, golden=golden, extra_assets=[other])
    outcome = artifact(chain_for(answer_submit(actor=vendor_user, question=question, draft=answer_draft(data))))
    assert [f["code"] for f in outcome.findings] == ["calbin_ambiguous"]
