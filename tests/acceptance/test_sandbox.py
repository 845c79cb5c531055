"""The runner sandbox and the runner protocol's verdicts, on real subprocesses: no database."""

import json
import os
import pwd
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from acceptance import protocol, sandbox, stages
from acceptance.sandbox import Limits, run_sandboxed, scrubbed_environment
from tests.acceptance.workers import processes_with

LIMITS = Limits(
    wall_seconds=3,
    memory_bytes=512 * 1024**2,
    output_bytes=1024**2,
    file_bytes=8 * 1024**2,
    workdir_bytes=32 * 1024**2,
)


def run_python(code: str, tmp_path: Path, limits: Limits = LIMITS, env_extra=None):
    chunks: list[bytes] = []
    outcome = run_sandboxed(
        [sys.executable, "-c", code],
        workdir=tmp_path,
        env=scrubbed_environment(env_extra),
        limits=limits,
        on_output=lambda stream, chunk: chunks.append(chunk),
    )
    return outcome, b"".join(chunks).decode(errors="replace")


def test_a_well_behaved_command_exits_cleanly_with_its_output(tmp_path):
    outcome, output = run_python("import numpy; print('sum', numpy.arange(4).sum())", tmp_path)
    assert outcome.clean_exit
    assert "sum 6" in output
    assert outcome.limit_hit is None


def test_sleeping_past_the_wall_time_is_killed_with_the_reason(tmp_path):
    outcome, _ = run_python("import time; time.sleep(60)", tmp_path, Limits(**{**LIMITS.__dict__, "wall_seconds": 1}))
    assert outcome.limit_hit == sandbox.WALL_TIME
    assert "wall-time limit of 1 s" in outcome.reason
    assert outcome.elapsed_seconds < 10


def test_allocating_past_the_memory_limit_ends_with_the_memory_reason(tmp_path):
    outcome, _ = run_python("import numpy; a = numpy.ones(2 * 1024**3 // 8); print(a.sum())", tmp_path)
    assert outcome.limit_hit == sandbox.MEMORY
    assert "memory limit of 512 MiB" in outcome.reason


def test_writing_gigabytes_to_stdout_is_cut_at_the_output_cap(tmp_path):
    outcome, output = run_python("import sys\nwhile True: sys.stdout.write('x' * 65536)", tmp_path)
    assert outcome.limit_hit == sandbox.OUTPUT
    assert len(output) <= LIMITS.output_bytes
    assert "output limit" in outcome.reason


def test_writing_a_huge_file_hits_the_file_size_limit(tmp_path):
    outcome, _ = run_python("f = open('big', 'wb')\nwhile True: f.write(b'x' * 1048576)", tmp_path)
    assert outcome.limit_hit == sandbox.FILE_SIZE
    assert (tmp_path / "big").stat().st_size <= LIMITS.file_bytes


def test_many_small_files_hit_the_working_directory_limit(tmp_path):
    code = "import time\nfor i in range(100):\n    open(f'f{i}', 'wb').write(b'x' * 4 * 1048576); time.sleep(0.05)"
    outcome, _ = run_python(code, tmp_path)
    assert outcome.limit_hit == sandbox.WORKDIR_SIZE


def test_a_network_connection_is_denied_and_says_so(tmp_path):
    outcome, output = run_python("import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)", tmp_path)
    assert outcome.limit_hit == sandbox.NETWORK
    assert "network access denied" in outcome.reason


def test_without_the_python_hook_the_kernel_still_has_no_network_for_the_runner(tmp_path):
    # -I ignores PYTHONPATH, so the audit hook is not loaded: only the namespace stands in the way.
    chunks = []
    outcome = run_sandboxed(
        [sys.executable, "-I", "-c", "import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)"],
        workdir=tmp_path,
        env=scrubbed_environment(),
        limits=LIMITS,
        on_output=lambda stream, chunk: chunks.append(chunk),
    )
    assert "Network is unreachable" in b"".join(chunks).decode()
    assert outcome.limit_hit == sandbox.NETWORK


def test_the_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    outcome, output = run_python("import os, json; print(json.dumps(sorted(os.environ)))", tmp_path)
    names = json.loads(output)
    assert "DATABASE_URL" not in names and "SECRET_KEY" not in names and "REDIS_URL" not in names
    assert "PATH" in names


def test_cancelling_from_the_tick_kills_the_runner(tmp_path):
    outcome = run_sandboxed(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        workdir=tmp_path,
        env=scrubbed_environment(),
        limits=LIMITS,
        on_output=lambda stream, chunk: None,
        on_tick=lambda: False,
        tick_seconds=0.2,
    )
    assert outcome.limit_hit == sandbox.CANCELLED


def test_the_runner_and_its_children_are_gone_after_the_run(tmp_path):
    token = uuid.uuid4().hex
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{token}'])\n"
        "time.sleep(60)"
    )
    limits = Limits(**{**LIMITS.__dict__, "wall_seconds": 1})
    outcome, _ = run_python(code, tmp_path, limits)
    assert outcome.limit_hit == sandbox.WALL_TIME
    assert processes_with(token) == []


def test_daemons_that_call_setsid_do_not_survive_a_runner_that_exits(tmp_path):
    # Each child leaves the runner's session and process group and forks once more, so the daemon it leaves
    # is orphaned; the runner exits as soon as its three daemons are up.
    token = uuid.uuid4().hex
    daemon = "import os, time\nos.setsid()\nif os.fork(): os._exit(0)\nopen(f'up-{os.getpid()}', 'w')\ntime.sleep(300)"
    code = (
        "import glob, subprocess, sys, time\n"
        f"for _ in range(3): subprocess.Popen([sys.executable, '-c', {daemon!r}, '{token}']).wait()\n"
        "while len(glob.glob('up-*')) < 3: time.sleep(0.05)\n"
        "print('daemons up')"
    )
    outcome, output = run_python(code, tmp_path)
    assert outcome.clean_exit, outcome.reason
    assert "daemons up" in output
    assert processes_with(token) == []


def test_a_forking_memory_hog_is_held_to_one_limit_for_the_whole_tree(tmp_path):
    # Four children of 400 MiB each stay under the per-process address-space limit of 1024 MiB; together
    # they do not.
    code = (
        "import os, time\n"
        "children = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'x' * (400 * 1024 * 1024)\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
    )
    limits = Limits(**{**LIMITS.__dict__, "memory_bytes": 1024 * 1024**2, "wall_seconds": 60})
    outcome, _ = run_python(code, tmp_path, limits)
    assert outcome.limit_hit == sandbox.MEMORY
    assert "memory limit of 1024 MiB exceeded" in outcome.reason
    assert outcome.memory_peak_bytes > 1024 * 1024**2
    assert outcome.elapsed_seconds < 30
    verdict = protocol.outcome_verdict(outcome, tmp_path / "result.json", "runner", "")
    assert verdict.verdict == stages.ERROR
    assert "memory limit of 1024 MiB exceeded" in verdict.reason


def test_a_runner_cannot_write_outside_its_directory(tmp_path):
    # A directory anyone may write to, outside the run's: only the read-only filesystem stands in the way.
    outside = Path(tempfile.mkdtemp(prefix="calculet-sandbox-outside-"))
    outside.chmod(0o777)
    try:
        code = (
            "import errno, sys\n"
            "failed = []\n"
            f"for path in [{str(outside / 'note')!r}, {str(tmp_path.parent / ('escaped-' + tmp_path.name))!r}]:\n"
            "    try:\n"
            "        open(path, 'w').write('was here')\n"
            "    except OSError as error:\n"
            "        failed.append(errno.errorcode[error.errno])\n"
            "open('inside', 'w').write('fine')\n"
            "print(' '.join(failed))"
        )
        outcome, output = run_python(code, tmp_path)
        assert outcome.clean_exit, outcome.reason
        assert output.split() == ["EROFS", "EROFS"]
        assert list(outside.iterdir()) == []
        assert not (tmp_path.parent / f"escaped-{tmp_path.name}").exists()
        assert (tmp_path / "inside").read_text() == "fine"
    finally:
        shutil.rmtree(outside)


def test_only_the_device_nodes_given_are_in_the_sandbox(tmp_path):
    # The runner's /dev is minimal; a hardware host gives it its board's node. /dev/kmsg stands for one here.
    code = "import os; print(os.path.exists('/dev/kmsg'), os.path.exists('/dev/loop0'), os.path.exists('/dev/null'))"
    chunks: list[bytes] = []
    outcome = run_sandboxed(
        [sys.executable, "-c", code],
        workdir=tmp_path,
        env=scrubbed_environment(),
        limits=LIMITS,
        on_output=lambda stream, chunk: chunks.append(chunk),
        devices=("/dev/kmsg",),
    )
    assert outcome.clean_exit, outcome.reason
    assert b"".join(chunks).split() == [b"True", b"False", b"True"]
    _, without = run_python(code, tmp_path)
    assert without.split() == ["False", "False", "True"]


def test_the_outcome_records_the_isolation_in_force(tmp_path):
    outcome, output = run_python("import os; print(os.getuid())", tmp_path)
    expected_user = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert int(output) == pwd.getpwnam(expected_user).pw_uid
    assert outcome.isolation.user == expected_user
    assert outcome.isolation.pid_namespace is True
    assert outcome.isolation.network == sandbox.NAMESPACE
    assert outcome.isolation.filesystem == sandbox.READ_ONLY
    assert outcome.isolation.memory in (sandbox.CGROUP_V2, sandbox.PSS_POLL)
    record = protocol.outcome_verdict(outcome, tmp_path / "result.json", "runner", "").result["sandbox"]
    assert record["pid_namespace"] is True
    assert record["user"] == expected_user
    assert record["filesystem"] == sandbox.READ_ONLY
    assert record["memory_limit"] == outcome.isolation.memory


def write_result(path: Path, **fields):
    result = {
        "schema_version": 2,
        "stage": "golden",
        "verdict": "pass",
        "metrics": {"cosine": 0.99999},
        "checks": [{"name": "cosine", "passed": True, "detail": "0.99999 >= 0.9999"}],
        "log_excerpt": "",
        "produced_files": [],
    }
    result.update(fields)
    path.write_text(json.dumps(result))


ISOLATED = sandbox.Isolation(True, sandbox.NAMESPACE, sandbox.READ_ONLY, sandbox.PSS_POLL, "nobody")


def clean(exit_code=0) -> sandbox.Outcome:
    return sandbox.Outcome(exit_code, None, None, "", 0.1, 0, 0, ISOLATED)


def test_a_well_formed_pass_is_a_pass_with_its_metrics(tmp_path):
    write_result(tmp_path / "result.json")
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert outcome.verdict == stages.PASS
    assert outcome.metrics == {"cosine": 0.99999}


def test_a_fail_names_the_failed_checks(tmp_path):
    checks = [
        {"name": "cosine", "passed": False, "detail": "0.9990 < 0.9999"},
        {"name": "top1", "passed": True, "detail": "1.0"},
    ]
    write_result(tmp_path / "result.json", verdict="fail", checks=checks)
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert outcome.verdict == stages.FAIL
    assert "cosine: 0.9990 < 0.9999" in outcome.reason


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"stage": "soak"}, "not 'golden'"),
        ({"schema_version": 1}, "schema_version"),
        ({"probes": [{"name": "decode_batch", "verdict": "fail"}]}, "says pass while one of its probes"),
        ({"verdict": "maybe"}, "expected pass or fail"),
        ({"checks": [{"name": "cosine", "passed": False, "detail": ""}]}, "says pass while"),
    ],
)
def test_a_malformed_result_is_an_error_not_a_verdict(tmp_path, fields, problem):
    write_result(tmp_path / "result.json", **fields)
    outcome = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert outcome.verdict == stages.ERROR
    assert problem in outcome.reason


def test_a_missing_result_or_a_refused_job_is_an_error(tmp_path):
    missing = protocol.outcome_verdict(clean(), tmp_path / "result.json", "golden", "")
    assert missing.verdict == stages.ERROR
    assert "no result file" in missing.reason
    refused = protocol.outcome_verdict(clean(2), tmp_path / "result.json", "golden", "error: unknown stage 'x'\n")
    assert refused.verdict == stages.ERROR
    assert "refused the job (exit 2): error: unknown stage 'x'" in refused.reason


def test_stage_params_come_from_the_answer_over_the_defaults():
    golden = protocol.stage_params(
        stages.GOLDEN,
        golden_tolerances_given={"cosine_min": 0.99995, "decode_logits.top1_min": 1.0, "k": 3.0},
        error_paths=[],
        thresholds={},
    )
    assert golden["tolerances"]["prefill_logits"] == {
        **protocol.DEFAULT_GOLDEN_TOLERANCES,
        "cosine_min": 0.99995,
        "k": 3,
    }
    assert golden["tolerances"]["decode_logits"]["top1_min"] == 1.0
    assert golden["tolerances"]["prefill_logits"]["top1_min"] == protocol.DEFAULT_GOLDEN_TOLERANCES["top1_min"]
    soak = protocol.stage_params(
        stages.SOAK,
        golden_tolerances_given={},
        error_paths=[],
        thresholds={"min_decode_tokens_per_s": 55, "soak_requests": 4.0},
    )
    assert soak["min_decode_tokens_per_s"] == 55
    assert soak["requests"] == 4 and isinstance(soak["requests"], int)
    assert soak["concurrency"] == protocol.DEFAULT_SOAK["concurrency"]
    failure = protocol.stage_params(
        stages.FAILURE,
        golden_tolerances_given={},
        error_paths=[{"scenario": "kv_apply_failure", "expect_code": 15}],
        thresholds={},
    )
    assert failure["scenarios"] == [{"fault": "kv_apply_failure", "expect_code": 15}]
    assert protocol.stage_params(stages.RUNNER, golden_tolerances_given={}, error_paths=[], thresholds={}) == {}
