"""Only `acceptance/services/runs/state.py` writes a run's state. Read from the source of every module of the
application (its syntax tree, so comments and strings do not count) rather than trusted to review."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP_PACKAGES = ["acceptance", "calculet", "evidence", "vendor", "npu_sim"]
RUN_STATE_WRITER = "acceptance/services/runs/state.py"
# The writers of other models' `state` fields: they assign `<obj>.state` but never touch a Run.
OTHER_STATE_WRITERS = {
    "vendor/services/questions.py": "Question.state",
    "vendor/services/artifacts.py": "Artifact.state",
    "vendor/services/webhooks.py": "WebhookDelivery.state",
    "vendor/services/deliverables.py": "Deliverable.state",
}
WRITE_METHODS = {"create", "update", "get_or_create", "update_or_create", "bulk_create", "bulk_update"}


def _mentions_run(node: ast.AST) -> bool:
    return any(isinstance(child, ast.Name) and child.id == "Run" for child in ast.walk(node))


def _gives_state(call: ast.Call) -> bool:
    """`state=` among the keywords, or "state" among the listed fields (bulk_update(objs, ["state"]))."""
    if any(keyword.arg == "state" for keyword in call.keywords):
        return True
    return any(
        isinstance(element, ast.Constant) and element.value == "state"
        for argument in call.args
        if isinstance(argument, ast.List | ast.Tuple)
        for element in argument.elts
    )


def state_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) for each write of a field named `state` the module makes: an assignment to `<obj>.state`,
    `setattr(<obj>, "state", …)`, or a Run query or constructor given a state (`Run(state=…)`,
    `Run.objects….update(state=…)`, `bulk_update(runs, ["state"])`, …). Keyword arguments built elsewhere and
    passed as `**kwargs` are not seen."""
    writes = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(element, ast.Attribute) and element.attr == "state":
                    writes.append((node.lineno, "assigns <obj>.state"))
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id == "setattr" and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value == "state":
                writes.append((node.lineno, 'setattr(<obj>, "state", …)'))
        elif isinstance(function, ast.Name) and function.id == "Run" and _gives_state(node):
            writes.append((node.lineno, "Run(state=…)"))
        elif (
            isinstance(function, ast.Attribute)
            and function.attr in WRITE_METHODS
            and _mentions_run(function.value)
            and _gives_state(node)
        ):
            writes.append((node.lineno, f"Run ….{function.attr}() with a state"))
    return writes


@pytest.mark.parametrize(
    "source",
    [
        "run.state = stages.QUEUED",
        "run.state, run.worker = 'running', 'w'",
        "locked.state += ''",
        "setattr(run, 'state', 'passed')",
        "Run(stage='claim', state='queued')",
        "Run.objects.create(stage='claim', state='queued')",
        "Run.objects.filter(pk=1).update(state='stale')",
        "lock_rows(Run.objects).filter(pk=1).update(state='stale')",
        "Run.objects.bulk_update(runs, ['state', 'reason'])",
    ],
)
def test_the_check_sees_each_way_of_writing_a_state(source):
    assert len(state_writes(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "Run.objects.filter(state='queued').update(sent_at=now)",
        "lock_rows(Run.objects).filter(pk=1, state='running')",
        "Question.objects.filter(pk=1).update(state='asked')",
        "audit_record(action='run.create', after={'state': run.state})",
        "run_state_move(run, stages.QUEUED)",
        "state = run.state",
    ],
)
def test_the_check_leaves_reads_and_other_models_alone(source):
    assert state_writes(source) == []


def app_modules() -> list[Path]:
    return [
        path
        for package in APP_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]


def test_only_the_run_state_writer_writes_a_run_s_state():
    found = {}
    for path in app_modules():
        name = path.relative_to(ROOT).as_posix()
        writes = state_writes(path.read_text())
        if name in OTHER_STATE_WRITERS:
            writes = [(line, what) for line, what in writes if what != "assigns <obj>.state"]
        if writes and name != RUN_STATE_WRITER:
            found[name] = writes
    assert found == {}, f"only {RUN_STATE_WRITER} writes Run.state; move these writes there: {found}"
    assert state_writes((ROOT / RUN_STATE_WRITER).read_text())  # the check reads the writer's own writes


def test_the_other_state_writers_still_write_their_own_state():
    for name, field in OTHER_STATE_WRITERS.items():
        source = (ROOT / name).read_text()
        assert state_writes(source), f"{name} no longer writes {field}: remove it from OTHER_STATE_WRITERS"
        assert "Run" not in {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
