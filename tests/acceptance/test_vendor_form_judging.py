"""A vendor-form package (docs/calbin-format.md: no package_info.txt, parameter table or goldens) has no reference
calculet can replay; its runner and integration runs are judged by what it declares and by the vendor's golden.
The right runs are the simulator's own on the same package in the simulator's form; the wrong ones are crafted."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from django.utils.translation import override

from acceptance import judging, probe_judging, summaries
from npu_sim.calbin.build import build_calbin
from npu_sim.calbin.layout import MODEL_CONFIG
from npu_sim.runner import run_job
from tests.npu_sim.packages import vendor_form

VOCAB = 512  # the tiny preset's, which config.json declares


def ran(stage: str, calbin: Path, workdir: Path) -> dict:
    workdir.mkdir()
    job = {"schema_version": 2, "stage": stage, "calbin": str(calbin), "probes": [], "params": {}}
    return run_job({**job, "golden_source": "package"}, workdir=workdir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The vendor's package, its golden, and the simulator's runner and integration runs of it."""
    root = tmp_path_factory.mktemp("vendor")
    golden = root / "golden.npz"
    simulator = build_calbin(root / "simulator", decode_batch=2, golden_out=golden)
    for stage in ("runner", "integration"):
        assert ran(stage, simulator, root / stage)["verdict"] == "pass"
    package = vendor_form(Path(shutil.copytree(simulator, root / "package")))
    return {"package": package, "golden": golden, "runner": root / "runner", "integration": root / "integration"}


def copied(runs: dict[str, Path], stage: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs[stage], tmp_path / stage))


def runner_judged(runs: dict[str, Path], workdir: Path, golden: Path | None = None) -> judging.Judgement:
    golden = golden or runs["golden"]
    return judging.runner_judgement({"verdict": "pass"}, workdir, runs["package"], {}, "vendor", golden)


def rewrite_run(workdir: Path, change) -> None:
    path = workdir / judging.MEASURED_RUN
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    change(arrays)
    np.savez(path, **arrays)


def random_logits(rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Finite BF16 logits of the given width, and the argmax token of each row."""
    values = np.random.default_rng(3).standard_normal((rows, width)).astype(np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    return bits, np.argmax((bits.astype(np.uint32) << 16).view(np.float32), axis=1).astype(np.int32)


def test_the_runner_s_greedy_run_of_the_vendor_golden_s_prompt_passes(runs):
    judged = runner_judged(runs, runs["runner"])
    assert judged.passed, judged.reason
    assert judged.reason == "4 decode steps are the vendor golden's (no replay)"


def test_random_logits_of_width_3_are_not_the_package_s_vocabulary(runs, tmp_path):
    workdir = copied(runs, "runner", tmp_path)

    def narrow(arrays):
        arrays["logits"], arrays["tokens"] = random_logits(5, 3)

    rewrite_run(workdir, narrow)
    judged = runner_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "reference_mismatch"]
    assert f"logits 3 wide; the package's vocabulary is {VOCAB}" in judged.reason


def test_greedy_tokens_other_than_the_vendor_golden_s_fail(runs, tmp_path):
    """Random vocabulary-wide logits, each token its row's argmax: greedy and finite, not the golden's run."""
    workdir = copied(runs, "runner", tmp_path)

    def other(arrays):
        arrays["logits"], arrays["tokens"] = random_logits(5, VOCAB)

    rewrite_run(workdir, other)
    judged = runner_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "golden_tokens_mismatch"]
    assert "are not the vendor golden's " in judged.reason and "for its prompt" in judged.reason


def test_the_golden_s_tokens_with_other_logits_fail_against_the_golden(runs, tmp_path):
    workdir = copied(runs, "runner", tmp_path)

    def halved(arrays):
        values = (arrays["logits"].astype(np.uint32) << 16).view(np.float32) / 2
        arrays["logits"] = (values.view(np.uint32) >> 16).astype(np.uint16)

    rewrite_run(workdir, halved)
    judged = runner_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "reference_mismatch"]
    assert "against the vendor golden: " in judged.reason


def test_a_run_of_another_prompt_than_the_vendor_golden_s_fails(runs, tmp_path):
    workdir = copied(runs, "runner", tmp_path)
    rewrite_run(workdir, lambda arrays: arrays.update(prompt_ids=arrays["prompt_ids"][:-1]))
    judged = runner_judged(runs, workdir)
    assert "wrong_prompt" in [f["code"] for f in judged.findings]
    assert "the run's prompt is not the vendor golden's prompt" in judged.reason


def test_without_the_vendor_s_golden_or_a_declared_model_there_is_nothing_to_judge_by(runs, tmp_path):
    judged = judging.runner_judgement({"verdict": "pass"}, runs["runner"], runs["package"], {}, "vendor", None)
    assert [f["code"] for f in judged.findings] == ["no_reference"]
    assert judged.reason == "the job names no golden to judge against"
    undeclared = Path(shutil.copytree(runs["package"], tmp_path / "undeclared"))
    (undeclared / MODEL_CONFIG).unlink()
    judged = judging.runner_judgement({}, runs["runner"], undeclared, {}, "vendor", runs["golden"])
    assert [f["code"] for f in judged.findings] == ["no_reference"]
    assert "declares no model config" in judged.reason


def integration_judged(runs: dict[str, Path], workdir: Path) -> judging.Judgement:
    return judging.integration_judgement({"verdict": "pass"}, workdir, runs["package"], {})


def test_the_integration_run_is_of_the_prompts_calculet_drew_and_the_declared_vocabulary(runs, tmp_path):
    judged = integration_judged(runs, runs["integration"])
    assert judged.passed, judged.reason
    assert judged.metrics["judged_sequences"] == {"served": 6, "matched": 6, "replayed": False}
    workdir = copied(runs, "integration", tmp_path)
    records = [json.loads(line) for line in (workdir / judging.MEASURED_SEQUENCES).read_text().splitlines()]
    records[0]["prompt"] = [1]
    (workdir / judging.MEASURED_SEQUENCES).write_text("".join(json.dumps(r) + "\n" for r in records))
    judged = integration_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "wrong_prompt"]
    assert "sequence 1: its prompt is not the one the job's seed 0 gives" in judged.reason


def test_integration_logits_of_width_3_fail(runs, tmp_path):
    workdir = copied(runs, "integration", tmp_path)
    with np.load(workdir / judging.MEASURED_SEQUENCE_LOGITS) as npz:
        arrays = {name: npz[name] for name in npz.files}
    records = [json.loads(line) for line in (workdir / judging.MEASURED_SEQUENCES).read_text().splitlines()]
    arrays["sequence_2"], tokens = random_logits(len(records[1]["tokens"]), 3)
    records[1]["tokens"] = tokens.tolist()
    np.savez(workdir / judging.MEASURED_SEQUENCE_LOGITS, **arrays)
    (workdir / judging.MEASURED_SEQUENCES).write_text("".join(json.dumps(r) + "\n" for r in records))
    judged = integration_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "reference_mismatch"]
    assert f"sequence 2: logits 3 wide; the package's vocabulary is {VOCAB}" in judged.reason


def test_kv_still_in_use_after_the_minimal_run_fails_and_an_unmeasured_count_proves_nothing(runs, tmp_path):
    """The runner stage's `kv_released`, judged from the count the runner measured (in either form)."""
    workdir = copied(runs, "runner", tmp_path)
    rewrite_run(workdir, lambda arrays: arrays.update(kv_tokens_in_use=np.array(12)))
    judged = runner_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "kv_not_released"]
    assert "12 KV tokens in use after the run" in judged.reason
    rewrite_run(workdir, lambda arrays: arrays.pop("kv_tokens_in_use"))
    judged = runner_judged(runs, workdir)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "no_measurement"]
    assert "runner-actual.npz must hold kv_tokens_in_use" in judged.reason


def test_a_vendor_form_package_without_its_model_is_no_reference_in_chinese_too(runs, tmp_path):
    undeclared = Path(shutil.copytree(runs["package"], tmp_path / "undeclared"))
    (undeclared / MODEL_CONFIG).unlink()
    judged = judging.runner_judgement({}, runs["runner"], undeclared, {}, "vendor", runs["golden"])
    with override("zh-hans"):
        assert summaries.judged_reason(judged.reason, judged.findings) == (
            "厂商格式的包没有声明模型配置（带有 prefill 输入长度的 __Tokenizer/config.json）："
            "没有可据以判定其 logits 的词表",
            [],
        )
    with override("en"):
        assert summaries.judged_reason(judged.reason, judged.findings) == (judged.reason, [])


def test_a_vendor_form_package_s_probe_checks_stay_the_runner_s_word(runs, tmp_path):
    # calculet has no reference to replay a vendor-form package's probes on: judging them would fail every real
    # vendor package on a board with no_reference, so their checks stay the runner's, as an unconverted probe's.
    result = {"verdict": "pass", "probes": [{"name": "kv_shift", "verdict": "pass"}]}
    judged = probe_judging.probe_judgements(
        "runner", result, [{"name": "kv_shift"}], tmp_path, runs["package"], probe_judging.JobGolden()
    )
    assert judged == {}
