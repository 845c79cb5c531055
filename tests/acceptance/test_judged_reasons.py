"""A failed run's reason as calculet composes it reads in the reader's language from the run's findings, whatever
it is made of: the runner's own failure before calculet's judgement (the runner's words quoted as they are), a
sampling judgement's several findings said after one "sampling: ", a golden stage failing with its features;
the claim of a pass and a replay mismatch keep their templates. The stored English is what it was."""

import json
from pathlib import Path

import numpy as np
from django.utils.translation import override

from acceptance import judging, stages, summaries
from acceptance.protocol import RunnerEnd, runner_verdict
from acceptance.services.runs.running import _judged
from calculet import sentences
from npu_sim.calbin.build import build_calbin
from npu_sim.dtypes import bf16_to_bits, bits_to_float32, to_bf16
from npu_sim.runner import run_job
from tests.acceptance.test_feature_judging import (  # noqa: F401 (a fixture)
    SAMPLING_PROBES,
    golden_stage,
    host_drawn,
    sampling_package,
)
from tests.acceptance.test_judged_sentences import SOAK_PARAMS, request

FAILED_CHECK = {"name": "decode_rate", "passed": False, "detail": "3.1 token/s below 5 token/s"}
# How a Chinese reader reads the failed soak below: the runner's head translated and its words quoted, then
# calculet's first sentence.
IN_CHINESE = "1 项检查未通过 — decode_rate: 3.1 token/s below 5 token/s; 测得 3 个请求；压测须服务 10 个; "
CLAIM = "the runner claims a pass its measurements do not support — "


def _soak_measured(workdir: Path) -> None:
    records = [request(1, 0), request(2, 500, error="timeout"), request(3, 900)]
    (workdir / judging.MEASURED_REQUESTS).write_text("".join(json.dumps(record) + "\n" for record in records))


def runner_failed_soak(workdir: Path):
    """A soak the runner itself failed, which calculet's judging fails too, as a run stores it."""
    _soak_measured(workdir)
    result = {"schema_version": 2, "stage": "soak", "verdict": "fail", "checks": [FAILED_CHECK], "metrics": {}}
    outcome = runner_verdict(RunnerEnd(0, None, "", {}), (result, ""), stages.SOAK, "")
    return _judged(outcome, stages.SOAK, SOAK_PARAMS, [], workdir, workdir / "none.calbin", None, "vendor")


def test_a_runners_own_failure_before_calculets_reads_in_chinese_with_its_words_quoted(tmp_path):
    judged = runner_failed_soak(tmp_path)
    assert judged.reason.startswith("1 check(s) failed — decode_rate: 3.1 token/s below 5 token/s; ")
    assert judged.reason.endswith("; the load held for 1.060 s of device time; the soak must hold 5 s")
    assert judged.findings[-1]["code"] == "check_failed"  # the runner's own, without a template
    with override("zh-hans"):
        text, unsaid = summaries.judged_reason(judged.reason, judged.findings)
    assert text.startswith(IN_CHINESE)
    assert text.endswith("; 负载持续了 1.060 秒设备时间；压测须持续 5 秒")
    assert "requests measured" not in text and unsaid == []
    with override("en"):
        text, _unsaid = summaries.judged_reason(judged.reason, judged.findings)
    assert text == judged.reason.replace("1 check(s) failed", "1 check failed")  # as run_summary says the head


def test_a_runners_words_before_sentences_calculet_did_not_write_are_shown_as_stored(tmp_path):
    judged = runner_failed_soak(tmp_path)
    # One of calculet's sentences in the middle of the reason lost its template (stored before they kept one).
    findings = [{k: v for k, v in judged.findings[1].items() if k not in ("template", "params")}]
    findings = [judged.findings[0], *findings, *judged.findings[2:]]
    with override("zh-hans"):
        assert summaries.judged_reason(judged.reason, findings) is None
        # A reason whose end is not the judgement's sentences: the runner's words after calculet's.
        assert summaries.judged_reason(f"{judged.reason}; the runner's words", judged.findings) is None


def tampered_golden_stage(calbin: Path, workdir: Path) -> judging.Judgement:
    """A golden stage whose runner says pass: its logits beyond the job's tolerances, its draws another
    generator's."""
    result = golden_stage(calbin, workdir, SAMPLING_PROBES)
    path = workdir / judging.MEASURED_DRAWS
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    np.savez(path, **host_drawn(arrays, workdir))
    params = {"tolerances": {tensor: {"cosine_min": 1.5} for tensor in ("prefill_logits", "decode_logits")}}
    return judging.stage_judgement("golden", result, workdir, params, SAMPLING_PROBES, calbin, "package", None)


def test_a_golden_stage_failing_with_its_sampling_reads_wholly_in_chinese(sampling_package, tmp_path):  # noqa: F811
    judged = tampered_golden_stage(sampling_package, tmp_path / "run")
    codes = [item["code"] for item in judged.findings]
    assert codes == ["claim_unsupported", *["golden_mismatch"] * 2, *["draws_not_from_seed"] * 2]
    assert judged.reason.startswith(CLAIM + "prefill_logits: cosine ")
    assert "; sampling: drawn, " in judged.reason and "; drawn again, " in judged.reason
    with override("zh-hans"):
        text, unsaid = summaries.judged_reason(judged.reason, judged.findings)
    assert text.startswith("运行器声称通过，但其测量不支持 — prefill_logits：cosine ")
    assert "; 采样：首次抽样中 50000 个 token 有 " in text and "; 再次抽样中 50000 个 token 有 " in text
    assert "drawn" not in text and "claims" not in text and unsaid == []
    with override("en"):
        assert summaries.judged_reason(judged.reason, judged.findings) == (judged.reason, [])


def test_the_claim_of_a_pass_keeps_its_template_and_its_english_sentence(sampling_package, tmp_path):  # noqa: F811
    judged = tampered_golden_stage(sampling_package, tmp_path / "run")
    claim = judged.findings[0]
    golden = [item["message"] for item in judged.findings[1:3]]
    assert claim["message"] == CLAIM + "; ".join(golden)
    assert claim["template"] == judging.CLAIM_UNSUPPORTED
    assert sentences.english(claim) == claim["message"]
    with override("zh-hans"):
        assert sentences.text(claim).startswith("运行器声称通过，但其测量不支持 — prefill_logits：cosine ")
        assert "; decode_logits：cosine " in sentences.text(claim)


def test_a_runner_stages_replay_mismatch_keeps_its_figures_with_a_template(tmp_path):
    calbin = build_calbin(tmp_path / "plain.tar", decode_batch=1, tar=True)
    workdir = tmp_path / "run"
    workdir.mkdir()
    job = {"schema_version": 2, "stage": "runner", "calbin": str(calbin), "probes": [], "params": {}}
    result = run_job({**job, "golden_source": "package"}, workdir=workdir)
    with np.load(workdir / judging.MEASURED_RUN) as npz:
        arrays = {name: npz[name] for name in npz.files}
    # Every logit a tenth larger: the same greedy tokens, not the logits of calculet's replay.
    arrays["logits"] = bf16_to_bits(to_bf16(bits_to_float32(arrays["logits"]) * 1.1))
    np.savez(workdir / judging.MEASURED_RUN, **arrays)
    judged = judging.runner_judgement(result, workdir, calbin, {}, "package", None)
    [_claim, mismatch] = judged.findings
    assert mismatch["code"] == "reference_mismatch" and mismatch["message"].startswith("max_rel ")
    assert mismatch["template"] == "%(limits)s" and mismatch["params"] == {"limits": mismatch["message"]}
    with override("zh-hans"):
        text, unsaid = summaries.judged_reason(judged.reason, judged.findings)
    assert text == f"运行器声称通过，但其测量不支持 — {mismatch['message']}" and unsaid == []
