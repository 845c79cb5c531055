import pytest
from calculet_agent.sandbox import host

from acceptance.inspection.reproduce import reproduce
from tests.inspection_builders import build_project


@pytest.fixture
def project(tmp_path):
    return build_project(tmp_path / "src")


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_a_deterministic_build_is_reproducible(project):
    report = reproduce("sh build.sh", project, ["out", "out/kernel.o"])
    assert report.passed and report.reproducible, report.findings
    first, second = (run["digests"] for run in report.checked["runs"])
    assert first == second and first["out"].startswith("sha256:")
    assert [run["env"]["TZ"] for run in report.checked["runs"]] == ["UTC", "Asia/Shanghai"]
    # The sources were copied: the answer's own directory is untouched.
    assert not (project / "out").exists()


def test_a_timestamp_in_the_output_is_found(tmp_path):
    report = reproduce("sh build.sh", build_project(tmp_path / "src", reproducible=False), ["out"])
    assert codes(report) == ["not_reproducible"]
    assert report.findings[0].detail["differing"] == ["built-at"]
    assert not report.reproducible


def test_a_build_that_records_its_directory_differs_between_fresh_sandboxes(project):
    # Debug information names the directory the build ran in; each run has its own.
    (project / "build.sh").write_text("set -e\nmkdir -p out\ncc -g -O2 -c kernel.c -o out/kernel.o\n")
    report = reproduce("sh build.sh", project, ["out/kernel.o"])
    assert codes(report) == ["not_reproducible"]
    assert report.findings[0].detail["differing"] == ["."]


def test_a_failing_build_and_a_missing_output(project):
    report = reproduce("sh build.sh && false", project, ["out"])
    assert codes(report) == ["build_failed"]
    assert "exited with status 1" in report.findings[0].message
    report = reproduce("sh build.sh", project, ["out/model.calbin"])
    assert codes(report) == ["output_missing", "output_missing"]


def test_the_build_has_no_network(project):
    fetch = "python -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=5)\""
    report = reproduce(fetch, project, ["out"])
    assert codes(report) == ["build_failed"]
    assert "network access denied in the sandbox" in report.findings[0].message
    assert report.checked["runs"][0]["network_isolation"] == ("namespace" if host().bwrap else "audit-hook")


@pytest.mark.parametrize(
    ("command", "outputs", "code"),
    [
        ("sh build.sh", [], "outputs_missing"),
        ("sh build.sh", ["../elsewhere"], "output_invalid"),
        ("sh build.sh", ["/etc/passwd"], "output_invalid"),
        ("  ", ["out"], "command_missing"),
    ],
)
def test_what_cannot_be_run_is_refused_before_running(project, command, outputs, code):
    report = reproduce(command, project, outputs)
    assert codes(report) == [code]
    assert report.checked["runs"] == []
