"""calculet's own judging sentences keep their template and figures beside the English sentence, so a page says
them in the reader's language; the English sentence, the run's reason and the finding's other fields are what
they were (the API gives them unchanged, with `template` and `params` added)."""

import json

import numpy as np
from django.utils.translation import override

from acceptance.judging import failure_judgement, golden_judgement, soak_judgement
from calculet import sentences
from tests.acceptance.test_failure_judging import golden, measured

SOAK_PARAMS = {"requests": 10, "concurrency": 3, "min_duration_s": 5, "golden_samples": 0, "output_tokens": 4}


def request(number: int, sent_ms: float, tokens: int = 4, error: str | None = None) -> dict:
    token_ms = [sent_ms + 10 + 50 * index for index in range(tokens)]
    return {"request": number, "sent_ms": sent_ms, "token_ms": token_ms, "error": error, "golden_sample": False}


def soak_failed(tmp_path):
    """A soak that claims a pass on three requests served one after another, one of them in error."""
    records = [request(1, 0), request(2, 500, error="timeout"), request(3, 900)]
    (tmp_path / "soak-requests.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return soak_judgement({"verdict": "pass"}, tmp_path, None, SOAK_PARAMS)


def test_a_soak_finding_keeps_its_template_and_figures_and_its_english_sentence(tmp_path):
    judged = soak_failed(tmp_path)
    too_few = next(f for f in judged.findings if f["code"] == "too_few_requests")
    assert too_few == {
        "code": "too_few_requests",
        "severity": "error",
        "field": "measurements",
        "message": "3 requests measured; the soak must serve 10",
        "template": "%(measured)s requests measured; the soak must serve %(required)s",
        "params": {"measured": 3, "required": 10},
    }
    short = next(f for f in judged.findings if f["code"] == "too_short")
    assert short["message"] == "the load held for 1.060 s of device time; the soak must hold 5 s"
    assert json.loads(json.dumps(judged.findings)) == judged.findings  # as a run's JSON stores them
    with override("zh-hans"):
        assert sentences.text(too_few) == "测得 3 个请求；压测须服务 10 个"
        assert sentences.text(short) == "负载持续了 1.060 秒设备时间；压测须持续 5 秒"
    with override("en"):
        assert sentences.text(short) == short["message"]
    # The reason and the lead finding stay the English sentences they were; the lead keeps its template too.
    assert judged.reason.startswith("the runner claims a pass its measurements do not support — ")
    assert "3 requests measured; the soak must serve 10" in judged.reason
    claim = judged.findings[0]
    assert claim["code"] == "claim_unsupported" and claim["message"] == judged.reason
    assert claim["template"] == "the runner claims a pass its measurements do not support — %(detail)s"
    with override("zh-hans"):
        assert sentences.text(claim).startswith("运行器声称通过，但其测量不支持 — 测得 3 个请求；压测须服务 10 个; ")


def test_a_nested_sentence_and_a_list_read_in_the_readers_language(tmp_path):
    """A failure scenario's label is a sentence inside the sentence, the documented recovery a list."""
    reference = golden()
    observed = {"produced_code": 23, "after_code": 0, "recovery": []}
    measured(tmp_path, [{"fault": "device_crash", "measured": observed}], reference)
    params = {"scenarios": [{"fault": "device_crash", "expect_code": 23}], "decode_steps": 2}
    judged = failure_judgement({"verdict": "fail"}, tmp_path, reference, params)
    [wrong] = [f for f in judged.findings if f["code"] == "wrong_recovery"]
    assert wrong["message"] == (
        "scenario 0 (device_crash): the runner applied no recovery; the documented recovery for DEVICE_CRASHED (23)"
        " is reset device, configure calbin"
    )
    assert wrong["params"]["scenario"] == {
        "template": "scenario %(index)s (%(fault)s)",
        "params": {"index": 0, "fault": "device_crash"},
    }
    assert wrong["params"]["problem"]["params"]["documented"] == ["reset device", "configure calbin"]
    with override("zh-hans"):
        assert sentences.text(wrong) == (
            "场景 0（device_crash）：运行器执行了 无恢复；"
            "DEVICE_CRASHED (23) 的文档规定恢复为 reset device、configure calbin"
        )
    with override("en"):
        assert sentences.text(wrong) == wrong["message"]


def test_a_golden_limit_is_named_by_its_tensor_with_the_comparisons_own_figures(tmp_path):
    reference = golden()
    wrong = reference.decode_logits.copy()
    wrong[0, 0] ^= 0x4000  # one logit far from the golden's
    np.savez(tmp_path / "golden-actual.npz", prefill_logits=reference.prefill_logits, decode_logits=wrong)
    judged = golden_judgement({"verdict": "fail"}, tmp_path, reference, {})
    assert not judged.passed and judged.findings
    for found in judged.findings:
        assert found["code"] == "golden_mismatch" and found["message"].startswith("decode_logits: ")
        assert found["template"] == "%(tensor)s: %(limit)s" and found["params"]["tensor"] == "decode_logits"
        assert found["message"] == f"decode_logits: {found['params']['limit']}"
        with override("zh-hans"):
            assert sentences.text(found) == f"decode_logits：{found['params']['limit']}"
    assert judged.reason == "; ".join(found["message"] for found in judged.findings)
