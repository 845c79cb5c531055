"""calculet's sentences that a run's reason is made of and that were stored as English alone read in the reader's
language: a golden or a package calculet cannot read, a measurement that is not an .npz, a package not the float
model's, a failed minimal example said after the judgement, calculet-agent's note that the minimal example was not
run, a version the device did not report, a hardware target with no runner. Each run made by the code that stores
it; its English, as the API gives it, is what it was."""

import signal
from types import SimpleNamespace

import numpy as np
import pytest
from calculet_agent import cli, sandbox
from calculet_agent.sandbox import Limits
from django.utils.translation import override

from acceptance import judging, stages, summaries
from acceptance.protocol import RunnerEnd, StageOutcome, runner_verdict
from acceptance.services.agents import _example_not_run
from acceptance.services.registration import registration_reason
from acceptance.services.runs.running import _with_minimal_example, attested, no_hardware_runner
from calculet import sentences
from tests.acceptance.test_feature_judging import S8_THRESHOLDS, golden_stage, s8_package  # noqa: F401 (a fixture)
from tests.acceptance.test_judged_reasons import runner_failed_soak
from vendor.models import Answer


def said(outcome, language: str) -> str:
    """A run's reason as its page says it (`selectors.run_reason`): composed from its findings, else as
    `run_summary` says it."""
    with override(language):
        composed = summaries.judged_reason(outcome.reason, outcome.findings)
        return composed[0] if composed is not None else summaries.run_summary(outcome.reason)


def test_a_golden_that_cannot_be_read_is_said_in_chinese_with_the_readers_error_as_it_is(tmp_path):
    golden = tmp_path / "golden.npz"
    golden.write_bytes(b"not a golden")
    judged = judging.stage_judgement("golden", {"verdict": "pass"}, tmp_path, {}, [], tmp_path / "x", "vendor", golden)
    assert [f["code"] for f in judged.findings] == ["no_reference"]
    error = judged.reason.removeprefix("the golden cannot be read: ")
    assert error != judged.reason and error
    assert said(judged, "zh-hans") == f"无法读取 golden：{error}"
    assert said(judged, "en") == judged.reason


def test_a_package_calculet_cannot_load_for_its_reference_is_said_in_chinese(tmp_path):
    np.savez(tmp_path / judging.MEASURED_RUN, tokens=np.zeros(5, np.int64))
    judged = judging.runner_judgement({"verdict": "pass"}, tmp_path, tmp_path / "absent.calbin", {}, "package", None)
    assert [f["code"] for f in judged.findings] == ["no_reference"]
    error = judged.reason.removeprefix("the package cannot be loaded for calculet's reference: ")
    assert error != judged.reason
    assert said(judged, "zh-hans") == f"无法为 calculet 的参考实现加载该包：{error}"
    assert said(judged, "en") == judged.reason


def test_a_measurement_that_is_not_an_npz_is_said_in_chinese_under_the_claim_of_a_pass(tmp_path):
    (tmp_path / judging.MEASURED_RUN).write_bytes(b"logits")
    judged = judging.runner_judgement({"verdict": "pass"}, tmp_path, tmp_path / "x", {}, "package", None)
    assert [f["code"] for f in judged.findings] == ["claim_unsupported", "no_measurement"]
    assert judged.reason.startswith(f"{judging.CLAIM_UNSUPPORTED % {'detail': ''}}runner-actual.npz is not an .npz")
    error = judged.reason.split("is not an .npz file: ", 1)[1]
    assert said(judged, "zh-hans") == f"运行器声称通过，但其测量不支持 — runner-actual.npz 不是 .npz 文件：{error}"
    assert said(judged, "en") == judged.reason


def test_a_package_whose_model_config_cannot_be_read_has_no_float_reference_in_chinese(s8_package, tmp_path):  # noqa: F811
    golden_stage(s8_package, tmp_path / "run", [{"name": "s8", "params": S8_THRESHOLDS}])
    golden = judging.reference_golden("package", None, s8_package)
    judged = judging.s8_float_judgement(tmp_path / "run", tmp_path / "absent.calbin", golden, S8_THRESHOLDS)
    assert [f["code"] for f in judged.findings] == ["no_float_reference"]
    error = judged.reason.removeprefix("s8: the package's model config cannot be read: ")
    assert error != judged.reason
    with override("zh-hans"):
        assert sentences.text(judged.findings[0]).endswith(f"无法读取该包的模型配置：{error}")
    assert sentences.english(judged.findings[0]) == judged.reason


def failed_example(command: str = "make run") -> dict:
    """A minimal example that ran and failed, as running._minimal_example records it."""
    return {"ran": True, "command": command, "exit_code": 2, "limit": None, "passed": False}


def test_a_failed_minimal_example_after_a_failed_judgement_is_said_in_chinese(tmp_path):
    judged = runner_failed_soak(tmp_path)
    example = failed_example() | {"detail": "runner exited with status 2"}
    outcome = _with_minimal_example(judged, example)
    assert outcome.reason == f"{judged.reason}; the minimal example (make run) ended with runner exited with status 2"
    assert outcome.findings[-1]["code"] == "minimal_example_failed"
    assert said(outcome, "zh-hans") == f"{said(judged, 'zh-hans')}; 最小示例（make run）结束于：运行器以状态 2 退出"
    assert (
        said(outcome, "en")
        == said(judged, "en") + "; the minimal example (make run) ended with runner exited with status 2"
    )
    # Alone: the stage passed but for its example.
    alone = _with_minimal_example(StageOutcome(stages.PASS, "all checks passed"), example)
    assert alone.verdict == stages.FAIL
    assert said(alone, "zh-hans") == "最小示例（make run）结束于：运行器以状态 2 退出"


def test_calculet_agents_note_that_the_minimal_example_was_not_run_is_said_in_chinese(tmp_path):
    answer = Answer(minimal_example_command="make run", minimal_example_artifact_id=1)
    passed = _example_not_run(StageOutcome(stages.PASS, "all checks passed"), answer)
    note = "the minimal example was not run (calculet-agent runs only the operator's runner on the target's host, "
    assert passed.reason == f"all checks passed; {note}never the vendor's example)"
    why = "calculet-agent 在目标主机上只运行运维方的运行器，从不运行厂商的示例"
    assert said(passed, "zh-hans") == f"全部检查通过；最小示例未运行（{why}）"
    assert said(passed, "en") == passed.reason
    # After a judgement composed from its findings, and alone.
    judged = _example_not_run(runner_failed_soak(tmp_path), answer)
    assert said(judged, "zh-hans").endswith(f"压测须持续 5 秒；最小示例未运行（{why}）")
    assert said(_example_not_run(StageOutcome(stages.PASS, ""), answer), "zh-hans") == why


def test_a_version_the_device_did_not_report_is_said_none_in_chinese():
    target = SimpleNamespace(as_job_target=lambda: {"calrt": "0.7.6", "driver": "1.2", "firmware": "3", "chip": "c2"})
    device = {"calrt": "0.7.6", "driver": "1.2", "chip": "c2"}
    outcome = attested(StageOutcome(stages.PASS, "all checks passed", result={"device": device}), target)
    assert outcome.reason.endswith("the device reports firmware (none); the target is registered with 3")
    assert said(outcome, "zh-hans") == "设备不是登记的目标：设备报告的 firmware 为 （无）；目标登记的是 3"
    assert said(outcome, "en") == outcome.reason


def test_a_hardware_target_with_no_runner_is_said_in_chinese():
    outcome = no_hardware_runner(SimpleNamespace(slug="board-7"))
    assert outcome.reason.startswith("board-7 is a hardware target with no hardware runner command registered")
    assert said(outcome, "zh-hans") == (
        "board-7 是硬件目标，但没有登记硬件运行器命令：什么都没有运行（硬件目标从不退回到自带的模拟器）"
    )
    assert said(outcome, "en") == outcome.reason


LIMITS = Limits(wall_seconds=30, memory_bytes=512 * 1024 * 1024, output_bytes=1000, file_bytes=2000, workdir_bytes=3000)


@pytest.mark.parametrize(
    ("ended", "chinese"),
    [
        ((sandbox.WALL_TIME, None, None), "超出 30 秒的墙钟时间限制；运行器已被终止"),
        ((sandbox.OUTPUT, None, None), "超出 1000 字节的输出限制；运行器已被终止"),
        ((sandbox.WORKDIR_SIZE, None, None), "工作目录超过 3000 字节；运行器已被终止"),
        ((sandbox.CANCELLED, None, None), "运行已被取消或被接管；运行器已被终止"),
        ((sandbox.MEMORY, None, None), "运行器的进程合计超出 512 MiB 的内存限制；这些进程已被终止"),
        ((None, None, signal.SIGXCPU), "超出 40 秒的 CPU 时间限制"),
        ((None, None, signal.SIGXFSZ), "超出 2000 字节的文件大小限制"),
        ((None, sandbox.NETWORK_DENIED_EXIT, None), "沙箱拒绝了网络访问（连接尝试失败：沙箱没有网络）"),
        ((None, 1, None, "MemoryError"), "超出 512 MiB 的内存限制"),
        ((None, None, signal.SIGKILL), "运行器被 SIGKILL 终止（可能是 512 MiB 的内存限制或 OOM killer）"),
        ((None, None, signal.SIGSEGV), "运行器被信号 11（SIGSEGV）终止"),
        ((None, 3, None), "运行器以状态 3 退出"),
    ],
)
def test_why_the_sandbox_ended_a_runner_is_said_in_chinese(ended, chinese):
    limit, exit_code, signal_number, *tail = ended
    _limit, reason = sandbox._explain(limit, exit_code, signal_number, LIMITS, 0, "".join(tail))
    with override("zh-hans"):
        assert summaries.run_summary(reason) == chinese
    with override("en"):
        assert summaries.run_summary(reason) == reason


def test_a_runner_that_exited_with_its_stderr_line_is_said_in_chinese_with_the_line_as_written():
    _limit, reason = sandbox._explain(None, 1, None, LIMITS, 0, "")
    outcome = runner_verdict(RunnerEnd(1, None, reason, {}), (None, ""), stages.RUNNER, "Traceback\nboom: no device")
    assert outcome.reason == "runner exited with status 1: boom: no device"
    assert said(outcome, "zh-hans") == "运行器以状态 1 退出: boom: no device"
    assert said(outcome, "en") == outcome.reason


def test_an_agent_that_could_not_start_the_run_is_said_in_chinese():
    reason = cli._not_run(f"the agent could not prepare or start the run: {OSError('disk full')}")["reason"]
    assert reason == "the agent could not prepare or start the run: disk full"
    with override("zh-hans"):
        assert summaries.run_summary(reason) == "agent 无法准备或启动这次运行：disk full"


def test_a_registration_change_from_no_value_is_said_none_in_chinese():
    pending = {"first": False, "host": "lab-3", "changes": {"driver": ("", "2.3.0"), "chip": ("c1", "c2")}}
    reason = registration_reason(pending)
    assert reason.endswith("agent lab-3 sent: driver (none) -> 2.3.0; chip c1 -> c2")
    with override("zh-hans"):
        chinese = summaries.health_reason(reason)
    assert chinese.endswith("driver （无） -> 2.3.0; chip c1 -> c2") and "lab-3" in chinese
    assert "out of rotation" not in chinese
    with override("en"):
        assert summaries.health_reason(reason) == reason
