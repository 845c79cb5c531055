"""A run's summary, stored in English, reads in the reader's language; the runner's own words stay."""

from types import SimpleNamespace

import pytest
from django.utils import translation

from acceptance import stages
from acceptance.protocol import StageOutcome, _failed_checks, _failed_probes
from acceptance.services.checks import _outcome, finding
from acceptance.services.runs.running import attested
from acceptance.summaries import deliverable_reason, evidence_conclusion, run_summary


def in_chinese(reason: str) -> str:
    with translation.override("zh-hans"):
        return run_summary(reason)


def test_a_pass_and_failed_checks_read_in_chinese_with_the_runners_details_kept():
    assert in_chinese("all checks passed") == "全部检查通过"
    checks = [{"name": f"golden:t{n}", "passed": False, "detail": f"top1 0.9{n} < 0.99"} for n in range(7)]
    reason = _failed_checks({"checks": checks})
    assert reason.startswith("7 check(s) failed — golden:t0: top1 0.90 < 0.99;")
    shown = in_chinese(reason)
    assert shown.startswith("7 项检查未通过 — golden:t0: top1 0.90 < 0.99;")
    assert shown.endswith("（另有 2 项）")
    with translation.override("en"):
        assert run_summary(reason) == reason.replace("7 check(s) failed", "7 checks failed")


def test_failed_probes_read_in_chinese_with_what_each_probe_found_kept():
    probes = [
        {"name": "sampling", "verdict": "fail", "findings": [{"code": "not_exercised", "message": "no sampler"}]},
        {"name": "decode_batch", "verdict": "pass"},
    ]
    reason = _failed_probes({"probes": probes})
    assert reason == "1 probe(s) failed — sampling (not_exercised: no sampler)"
    assert in_chinese(reason) == "1 个探针未通过 — sampling (not_exercised: no sampler)"
    with translation.override("en"):
        assert run_summary(reason) == "1 probe failed — sampling (not_exercised: no sampler)"
    assert in_chinese(_failed_checks({"checks": []})) == "运行器报告了失败，但没有指出是哪项检查"


def test_the_claim_stages_findings_read_in_chinese():
    findings = [finding("element_missing", "version", "Section 13 element missing: version.")]
    findings.append(finding("calbin_missing", "executable_assets", "No calbin package among the executable assets."))
    outcome = _outcome(findings, "all six elements of section 13 are present")
    assert outcome.verdict == stages.FAIL
    assert in_chinese(outcome.reason) == "2 项问题: 缺少第 13 节要素：版本。; 可执行资产中没有 calbin 包。"
    assert in_chinese(_outcome([], "all six elements of section 13 are present").reason) == "第 13 节的六项要素齐全"


@pytest.mark.parametrize(
    "reason",
    [
        "the runner refused the job (exit 2): bad calbin",
        "runner protocol violated: the runner wrote no result file",
        "internal error in the worker: OSError: disk full",
        "the runner could not be started: No such file",
    ],
)
def test_calculets_error_sentences_are_translated_and_their_detail_kept(reason):
    detail = reason.split(": ", 1)[1]
    shown = in_chinese(reason)
    assert shown != reason and shown.endswith(detail)


def _not_attested(result: dict) -> str:
    """The reason of a run whose device is not the target as registered, as `attested` stores it."""
    target = SimpleNamespace(as_job_target=lambda: {"calrt": "0.7.6", "driver": "1.2", "firmware": "3", "chip": "c2"})
    return attested(StageOutcome(stages.PASS, "all checks passed", result=result), target).reason


def test_a_device_that_is_not_the_registered_target_is_said_in_chinese_with_its_versions_as_they_are():
    device = {"calrt": "0.7.5", "driver": "1.2", "firmware": "3; beta", "chip": "c2"}
    reason = _not_attested({"device": device})
    assert reason == (
        "the device is not the target as registered: the device reports calrt 0.7.5; the target is registered with "
        "0.7.6; the device reports firmware 3; beta; the target is registered with 3"
    )
    assert in_chinese(reason) == (
        "设备不是登记的目标：设备报告的 calrt 为 0.7.5；目标登记的是 0.7.6; "
        "设备报告的 firmware 为 3; beta；目标登记的是 3"
    )
    assert in_chinese(_not_attested({})) == "设备不是登记的目标：运行器未报告设备的身份和版本"
    with translation.override("en"):
        assert run_summary(reason) == reason
    # Words that are not a version calculet compared: the whole reason as stored.
    other = "the device is not the target as registered: it is a toaster"
    assert in_chinese(other) == other


def test_a_sentence_calculet_did_not_write_stays_as_it_is():
    assert in_chinese("wall time limit of 30 s reached") == "wall time limit of 30 s reached"


@pytest.mark.parametrize(
    ("conclusion", "chinese"),
    [
        (
            "Isolated runner passed on Bundled NPU simulator (simulator) (host lab-3) with b8.calbin.tar 0.1.0.",
            "隔离 runner 在 内置 NPU 模拟器（模拟器，主机 lab-3）上用 b8.calbin.tar 0.1.0 通过。",
        ),
        (
            "Isolated runner failed on Bundled NPU simulator (simulator) (host lab-3).",
            "隔离 runner 在 内置 NPU 模拟器（模拟器，主机 lab-3）上失败。",
        ),
    ],
)
def test_an_agent_s_run_evidence_names_its_host_in_chinese_too(conclusion, chinese):
    """The conclusion of an agent's run names the host it came from (services/runs/finishing.py): read in
    Chinese with the host kept, never left in English."""
    with translation.override("zh-hans"):
        assert evidence_conclusion(conclusion) == chinese


def test_a_runs_evidence_conclusion_and_a_deliverables_reason_read_in_chinese():
    conclusion = "Isolated runner passed on Bundled NPU simulator (simulator) with b8.calbin.tar 0.1.0."
    with translation.override("zh-hans"):
        shown = evidence_conclusion(conclusion)
        assert shown == "隔离 runner 在 内置 NPU 模拟器（模拟器）上用 b8.calbin.tar 0.1.0 通过。"
        assert evidence_conclusion("CCU exception 后 KV/DRAM 可信") == "CCU exception 后 KV/DRAM 可信"
        static = deliverable_reason("Static check of answer r1 passed: SDK calrt-sdk-0.7.6.tar 0.7.6: nothing found")
        assert static == "回答 r1 的静态检查通过：SDK calrt-sdk-0.7.6.tar 0.7.6：未发现问题"
        review = deliverable_reason("Document review 4: The written policy answers both points.")
        assert review == "文档审阅 4：The written policy answers both points."
    with translation.override("en"):
        assert evidence_conclusion(conclusion) == conclusion.replace("(simulator)", "(Simulator)")
