"""calculet's verdict on a probe's own checks from what the runner observed. No ORM here, nothing of Django.

At a stage where a probe has a plan of its own, the runner records what the device did — the positions
after each KV edit, the code each call returned, logits as BF16 bit patterns, keys and values as the device
reads them back, counts — in `<probe>-<stage>-observed.npz` beside the result (docs/runner-protocol.md, "A
probe's observations"). calculet recomputes each of the probe's checks from those observations against its
own expectations and the package's reference: its verdict replaces the runner's probe verdict. A probe
whose runner says pass where the observations do not support it fails `claim_unsupported` naming the check;
a missing observation file, or one without an observation a check needs, is `no_measurement`.

`PROBE_JUDGES` holds one judge per converted probe, by name: for each stage with a plan of the probe's own,
the function that recomputes that plan's checks. A probe not in it, and a stage where a probe runs the
stage's routine (judged from the stage's own files), are judged as before (docs/acceptance.md lists which).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from acceptance.judging import (
    MEASURED_FILES,
    Judgement,
    NoReference,
    Said,
    code_name,
    coded_verdict,
    finding,
    gettext_noop,
    package_reference,
    read_npz,
    reference_golden,
    said_by,
)
from npu_sim.calbin.goldens import GoldenSet
from npu_sim.errors import SERVICE_ERRORS, ErrorCode, ServiceAction
from npu_sim.faults import EXPECTED_CODES
from npu_sim.golden import Tolerance, as_float32, compare
from npu_sim.loaded_calbin import Calbin
from npu_sim.probes import (
    PROBES,
    buffers,
    c_api_nonblocking,
    faults,
    full_debug,
    kv,
    kv_shift,
    lifecycle,
    parallel_mode,
    triggers,
)
from npu_sim.probes.kv import package_prompt

OBSERVED_FILE = "{probe}-{stage}-observed.npz"
EQUAL = gettext_noop("%(observation)s: %(observed)s (calculet expects %(expected)s)")
BOTH = gettext_noop("%(first)s; %(second)s")


class ObservationMissing(ValueError):
    """An observation a check needs is missing or not of its form (`no_measurement`)."""


@dataclass(frozen=True)
class JobGolden:
    """The job's golden and tolerances, which a probe's golden plan compares its own path with."""

    source: str = "package"
    path: Path | None = None
    tolerances: dict[str, dict] = field(default_factory=dict)


@dataclass
class Observed:
    """One probe's observations at one stage, the package they are judged by, and the checks calculet computes."""

    probe: str
    file: str
    arrays: dict[str, np.ndarray]
    calbin: Calbin
    calbin_path: Path
    job_golden: JobGolden
    params: dict[str, Any]  # the probe's, with the catalogue's defaults
    device: dict[str, Any]  # the device the runner's result reports
    checks: list[dict] = field(default_factory=list)

    def package(self) -> Calbin:
        """The package loaded on calculet's reference."""
        return self.calbin

    def golden(self) -> GoldenSet:
        """The job's golden as calculet reads it (`judging.reference_golden`); NoReference when it cannot."""
        try:
            return reference_golden(self.job_golden.source, self.job_golden.path, self.calbin_path)
        except ValueError as error:
            raise NoReference(said_by(error)) from error

    def against_golden(self, golden: GoldenSet, tensors: tuple[str, ...]) -> None:
        """One check per tensor, `golden:<tensor>`: the observed `golden.logits` (the prefill's row, then each
        decode step's, vocabulary wide) against the job's `golden` with the job's tolerances for that tensor."""
        rows = self.bits("golden.logits", (golden.decode_steps + 1, self.package().config.vocab))
        measured = {"prefill_logits": rows[:1], "decode_logits": rows[1:]}
        expected = {"prefill_logits": golden.prefill_logits, "decode_logits": golden.decode_logits}
        for name in tensors:
            tolerance = Tolerance.from_dict(self.job_golden.tolerances.get(name, {}))
            report = compare(expected[name], measured[name], tolerance)
            said = Said(
                gettext_noop("%(observation)s, %(tensor)s, against the job's golden (%(source)s): %(figures)s"),
                observation="golden.logits",
                tensor=name,
                source=golden.source,
                figures=_figures(report),
            )
            self.check(f"golden:{name}", report["passed"], said)

    def array(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            raise ObservationMissing(
                Said(gettext_noop("%(file)s holds no %(observation)s"), file=self.file, observation=name)
            )
        return self.arrays[name]

    def integers(self, name: str) -> list[int]:
        """A 1-D integer observation (positions, sequences, token ids)."""
        value = self.array(name)
        if value.ndim != 1 or (value.size and value.dtype.kind not in "iu"):
            raise self._not_of_form(name, Said(gettext_noop("a list of integers")))
        return [int(item) for item in value]

    def integer(self, name: str) -> int:
        """A 0-d integer observation (a count, a position, a code)."""
        value = self.array(name)
        if value.ndim != 0 or value.dtype.kind not in "iu":
            raise self._not_of_form(name, Said(gettext_noop("an integer")))
        return int(value)

    def text(self, name: str) -> str:
        """A 0-d string observation (a buffer's status)."""
        value = self.array(name)
        if value.ndim != 0 or value.dtype.kind != "U":
            raise self._not_of_form(name, Said(gettext_noop("a string")))
        return str(value)

    def bits(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Logits as BF16 bit patterns of `shape`."""
        value = self.array(name)
        if value.dtype != np.uint16 or value.shape != shape:
            form = Said(gettext_noop("BF16 bit patterns (uint16) of shape %(shape)s"), shape=str(list(shape)))
            raise self._not_of_form(name, form)
        return value

    def floats(self, name: str, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
        """Keys or values as the device reads them back (float32), or device times (float64), of `shape`, every
        one finite."""
        value = self.array(name)
        if value.dtype != dtype or value.shape != shape or not np.isfinite(value).all():
            form = Said(
                gettext_noop("finite %(dtype)s values of shape %(shape)s"),
                dtype=np.dtype(dtype).name,
                shape=str(list(shape)),
            )
            raise self._not_of_form(name, form)
        return value

    def _not_of_form(self, name: str, form: Said) -> ObservationMissing:
        return ObservationMissing(
            Said(gettext_noop("%(file)s: %(observation)s is not %(form)s"), file=self.file, observation=name, form=form)
        )

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.checks.append({"name": name, "passed": bool(passed), "detail": detail})

    def matches(self, expected: dict[str, Any]) -> tuple[bool, Said]:
        """Whether each named observation is what calculet expects of it (a list of integers; an integer: a
        count or a code; a string: a status), and what each is."""
        passed = True
        detail: Said | None = None
        for name, wanted in expected.items():
            if isinstance(wanted, str):
                observed: Any = self.text(name)
            else:
                observed = self.integers(name) if isinstance(wanted, list) else self.integer(name)
            passed = passed and observed == wanted
            shown = (code_name(observed), code_name(wanted)) if isinstance(wanted, ErrorCode) else (observed, wanted)
            part = Said(EQUAL, observation=name, observed=str(shown[0]), expected=str(shown[1]))
            detail = part if detail is None else Said(BOTH, first=detail, second=part)
        assert detail is not None
        return passed, detail

    def expect(self, check: str, expected: dict[str, Any]) -> None:
        self.check(check, *self.matches(expected))

    def at_least(self, name: str, least: int) -> tuple[bool, Said]:
        """Whether an integer observation (a count) is at least `least`, and what it is."""
        value = self.integer(name)
        said = Said(
            gettext_noop("%(observation)s: %(observed)s (calculet expects at least %(least)s)"),
            observation=name,
            observed=value,
            least=least,
        )
        return value >= least, said

    def same_bits(self, first: str, second: str, rows: int | None = None) -> tuple[bool, Said]:
        """Whether two observed logits, each as wide as the package's vocabulary (a row, or `rows` rows), are
        the same bits."""
        vocab = self.package().config.vocab
        shape = (vocab,) if rows is None else (rows, vocab)
        a, b = self.bits(first, shape), self.bits(second, shape)
        differing = int(np.count_nonzero(a != b))
        said = Said(
            gettext_noop(
                "%(first)s and %(second)s differ in %(differing)s of %(total)s logits (calculet expects none)"
            ),
            first=first,
            second=second,
            differing=differing,
            total=a.size,
        )
        return differing == 0, said

    def same(self, check: str, first: str, second: str) -> None:
        """One check: two integer observations equal (a lane given back and taken again)."""
        a, b = self.integer(first), self.integer(second)
        said = Said(
            gettext_noop("%(first)s: %(observed)s, %(second)s: %(other)s (calculet expects them equal)"),
            first=first,
            observed=a,
            second=second,
            other=b,
        )
        self.check(check, a == b, said)


# kv_shift (V26): its runner, golden, failure and integration plans; its soak runs the stage's routine.


def _kv_shift_runner(observed: Observed) -> None:
    observed.expect("remove", {"remove.positions": kv_shift.REMOVED})
    observed.expect("add", {"add.positions": kv_shift.ADDED})
    observed.expect("div", {"div.positions": kv_shift.DIVIDED})
    observed.expect("copy", {"copy.cells": kv_shift.COPIED_CELLS, "copy.positions": kv_shift.COPIED})
    observed.expect("keep", {"keep.sequences": kv_shift.KEPT})
    read_back, restored = observed.matches({"state.cells": kv_shift.COPIED_CELLS, "state.positions": kv_shift.COPIED})
    same, decoded = observed.same_bits("state.source_logits", "state.read_logits")
    observed.check("state", read_back and same, Said(BOTH, first=restored, second=decoded))
    observed.expect("context_shift", {"context_shift.positions": kv_shift.SHIFTED})
    observed.expect("decode_after_edits", {"decode_after_edits.pos_max": kv_shift.NEXT_POSITION})


def _kv_shift_golden(observed: Observed) -> None:
    calbin = observed.package()
    kept = kv_shift.kept_tokens(package_prompt(calbin, kv_shift.GOLDEN_PROMPT))
    config = calbin.config
    shape = (config.kv_heads, len(kept), config.head_dim)
    for edit, positions in kv_shift.GOLDEN_POSITIONS.items():
        keys, values = kv_shift.fresh_layer0(calbin, kept, positions)
        placed = observed.integers(f"{edit}.positions") == positions
        error = float(np.max(np.abs(observed.floats(f"{edit}.keys", shape) - keys)))
        limit = kv_shift.kv_tolerance(calbin.k_dtype)
        said = Said(
            gettext_noop(
                "%(observation)s within %(error).2e of calculet's fresh layer-0 keys at positions %(positions)s "
                "(at most %(limit)s)"
            ),
            observation=f"{edit}.keys",
            error=error,
            positions=str(positions),
            limit=limit,
        )
        positions_said = Said(
            EQUAL,
            observation=f"{edit}.positions",
            observed=str(observed.integers(f"{edit}.positions")),
            expected=str(positions),
        )
        observed.check(
            f"{edit}:keys_rerotated", placed and error <= limit, Said(BOTH, first=positions_said, second=said)
        )
        if edit == "shift":
            error = float(np.max(np.abs(observed.floats("shift.values", shape) - values)))
            limit = kv_shift.kv_tolerance(calbin.v_dtype)
            said = Said(
                gettext_noop(
                    "%(observation)s within %(error).2e of calculet's layer-0 values of the kept tokens (at most "
                    "%(limit)s)"
                ),
                observation="shift.values",
                error=error,
                limit=limit,
            )
            observed.check("shift:values_moved_as_they_are", error <= limit, said)
    same, said = observed.same_bits("copy.source_logits", "copy.copy_logits")
    observed.check("copy:decodes_as_the_source", same, said)


def _kv_shift_failure(observed: Observed) -> None:
    cells = list(range(kv_shift.FAILURE_PROMPT))
    for name, code in kv_shift.REFUSALS.items():
        expected: dict[str, Any] = {f"refused:{name}.code": code}
        if name != "tokens in flight":  # refused while a token is pending: its cells are the allocation's
            expected[f"refused:{name}.positions"] = cells
        observed.expect(f"refused:{name}", expected)


def _kv_shift_integration(observed: Observed) -> None:
    calbin = observed.package()
    window = min(kv_shift.WINDOW, calbin.max_seq_len)
    made = observed.integers("shift.tokens")
    observed_window = observed.integer("shift.window")
    generated = len(made) == 2 * window and observed_window == window
    said = Said(
        gettext_noop(
            "%(tokens)s tokens through a %(window)s-cell window (calculet expects %(expected)s through %(cells)s)"
        ),
        tokens=len(made),
        window=observed_window,
        expected=2 * window,
        cells=window,
    )
    observed.check("generation_past_the_window", generated, said)
    rows = observed.bits("shift.logits", (len(made) + 1, calbin.config.vocab))
    if np.argmax(as_float32(rows[:-1]), axis=1).tolist() != made:
        said = Said(gettext_noop("a generated token is not the argmax of the logits it was chosen from"))
        observed.check("shifted_like_the_reference", False, said)
        return
    prompt = package_prompt(calbin, window // 2)
    report = compare(kv_shift.reference_shifted_rows(calbin, prompt, made, window), rows, kv_shift.SHIFT_TOLERANCE)
    said = Said(
        gettext_noop("against calculet's replay through the same shifts: %(figures)s"),
        figures=_figures(report),
    )
    observed.check("shifted_like_the_reference", report["passed"], said)


# kv_manager (K07): its runner, golden, failure and soak plans; its integration runs the stage's routine.


def _kv_manager_runner(observed: Observed) -> None:
    lanes = observed.package().decode_lanes
    observed.expect("can_allocate", {"can_allocate.five": 1, "can_allocate.zero": 0})
    # A 5-token prompt prefilled as sequence 1; then 12 tokens shifted by DoShift(discard 4, keep 2).
    observed.expect("allocate_and_apply", {"allocate_and_apply.cells": 5, "allocate_and_apply.pending": 0})
    observed.expect("capacity_enforced", {"capacity_enforced.code": ErrorCode.KV_NO_CAPACITY})
    observed.expect("lanes_enforced", {"lanes_enforced.lanes": lanes, "lanes_enforced.can_allocate": 0})
    observed.same("free_returns_the_lane", "free_returns_the_lane.freed", "free_returns_the_lane.taken")
    observed.expect("unknown_sequence", {"unknown_sequence.code": ErrorCode.KV_SEQUENCE_UNKNOWN})
    observed.expect("clear", {"clear.sequences": [], "clear.used_tokens": 0})
    observed.expect("do_shift", {"do_shift.cells": 8, "do_shift.pos_max": 7})


def _kv_manager_golden(observed: Observed) -> None:
    codes = {f"reused_lane_is_clean.{name}_code": ErrorCode.SUCCESS for name in ("before", "other", "after")}
    served, said = observed.matches(codes)
    if served:
        rows = kv.MANAGER_GOLDEN_STEPS + 1
        served, said = observed.same_bits("reused_lane_is_clean.before", "reused_lane_is_clean.after", rows)
    observed.check("reused_lane_is_clean", served, said)


def _kv_manager_failure(observed: Observed) -> None:
    # Sequence 1 of 4 tokens; its next step's apply fails, then runs again.
    failed = {"apply_failure_rolls_back.code": ErrorCode.KV_APPLY_FAILED}
    rolled_back = {"apply_failure_rolls_back.cells": 4, "apply_failure_rolls_back.pending": 0}
    observed.expect("apply_failure_rolls_back", failed | rolled_back)
    observed.expect(
        "retry_after_rollback", {"retry_after_rollback.code": ErrorCode.SUCCESS, "retry_after_rollback.cells": 5}
    )
    observed.expect("reset_clears_the_kv", {"reset_clears_the_kv.sequences": []})


def _kv_manager_soak(observed: Observed) -> None:
    observed.expect("kv_empty_after_load", {"kv_empty_after_load.used_tokens": 0, "kv_empty_after_load.sequences": []})


# kv_seq_min_max (K05): its runner, golden, failure and integration plans; its soak runs the stage's routine.


def _kv_seq_min_max_runner(observed: Observed) -> None:
    observed.expect("unknown_sequence", {"unknown_sequence.code": ErrorCode.KV_SEQUENCE_UNKNOWN})
    # 3 cells allocated, not applied; then a 10-token prefill, two decode steps, positions 0-2 removed.
    observed.expect("nothing_committed", {"nothing_committed.min": -1, "nothing_committed.max": -1})
    observed.expect("after_prefill", {"after_prefill.min": 0, "after_prefill.max": 9})
    observed.expect("after_decode", {"after_decode.max": 11})
    observed.expect("after_removing_the_front", {"after_removing_the_front.min": 3, "after_removing_the_front.max": 11})


def _kv_seq_min_max_golden(observed: Observed) -> None:
    calbin = observed.package()
    observed.expect("next_is_max_plus_one", {"next_is_max_plus_one.position": kv.MIN_MAX_KEPT})
    prompt = package_prompt(calbin, kv.MIN_MAX_PROMPT)[: kv.MIN_MAX_KEPT]
    expected = calbin.reference_logits(prompt, [kv.MIN_MAX_TOKEN, 0])[1:2]
    row = observed.bits("continues_from_max.logits", (calbin.config.vocab,))
    report = compare(expected, row[None, :])
    said = Said(
        gettext_noop("%(observation)s against calculet's reference of the first %(kept)s tokens: %(figures)s"),
        observation="continues_from_max.logits",
        kept=kv.MIN_MAX_KEPT,
        figures=_figures(report),
    )
    observed.check("continues_from_max", report["passed"], said)


def _kv_seq_min_max_failure(observed: Observed) -> None:
    # Sequence 1 of 6 tokens; its next step's apply fails.
    observed.expect(
        "max_kept_on_failure", {"max_kept_on_failure.code": ErrorCode.KV_APPLY_FAILED, "max_kept_on_failure.max": 5}
    )


def _kv_seq_min_max_integration(observed: Observed) -> None:
    lanes = observed.package().decode_lanes
    expected: dict[str, Any] = {"interleaved_min_max.lanes": lanes}
    if lanes > 1:
        expected |= {f"interleaved_min_max.max_{seq_id}": kv.interleaved_maxima(seq_id) for seq_id in (1, 2)}
    observed.expect("interleaved_min_max", expected)


# output_buffer (I07, V22): its runner, failure and soak plans; its golden and integration run the stage's routine.


def _output_buffer_runner(observed: Observed) -> None:
    # Two prefills submitted in parallel mode, the first waited on briefly, then fully; then a core exception.
    first_second = {"pending_and_running.first": "running", "pending_and_running.second": "pending"}
    observed.expect("pending_and_running", first_second)
    observed.expect("no_output_before_done", {"no_output_before_done.code": ErrorCode.INVALID_ARGUMENT})
    observed.expect("wait_times_out", {"wait_times_out.code": ErrorCode.TIMEOUT, "wait_times_out.status": "running"})
    observed.expect("wait_completes", {"wait_completes.code": ErrorCode.SUCCESS, "wait_completes.status": "done"})
    observed.expect("negative_wait_refused", {"negative_wait_refused.code": ErrorCode.INVALID_ARGUMENT})
    faulted = {"core_exception_state.code": ErrorCode.CORE_EXCEPTION, "core_exception_state.status": "core_exception"}
    observed.expect("core_exception_state", faulted)
    observed.expect("buffers_given_back", {"buffers_given_back.dynamic_bytes": 0})


def _output_buffer_failure(observed: Observed) -> None:
    # A hung job waited on twice, its core reset, then submitted again.
    observed.expect("hang_times_out", {"hang_times_out.codes": [ErrorCode.TIMEOUT, ErrorCode.TIMEOUT]})
    aborted = {"aborted_by_reset.code": ErrorCode.JOB_ABORTED, "aborted_by_reset.status": "core_exception"}
    observed.expect("aborted_by_reset", aborted)
    observed.expect("resubmitted", {"resubmitted.code": ErrorCode.SUCCESS})


def _output_buffer_soak(observed: Observed) -> None:
    observed.expect("buffers_given_back", {"buffers_given_back.dynamic_bytes": 0})


# fixed_task (I06): its runner, golden and failure plans.


def _fixed_task_runner(observed: Observed) -> None:
    calbin = observed.package()
    held = observed.integers("buffer_held_once.dynamic_bytes")
    golden = calbin.goldens
    steps = min(buffers.FIXED_STEPS, golden.decode_steps)
    once = len(held) == steps and len(set(held)) == 1 and held[0] > 0
    said = Said(
        gettext_noop(
            "%(observation)s: %(observed)s (calculet expects %(steps)s submits holding one and the same buffer)"
        ),
        observation="buffer_held_once.dynamic_bytes",
        observed=str(held),
        steps=steps,
    )
    observed.check("buffer_held_once", once, said)
    served, said = observed.matches({"same_as_infer.infer_code": ErrorCode.SUCCESS})
    if served:
        served, said = observed.same_bits("same_as_infer.fixed", "same_as_infer.infer", steps + 1)
    if served:
        tokens = golden.decode_input_ids[:steps].tolist()
        expected = calbin.reference_logits(golden.prompt_ids.tolist(), [*tokens, 0])
        report = compare(expected, observed.bits("same_as_infer.fixed", (steps + 1, calbin.config.vocab)))
        served = report["passed"]
        said = Said(
            BOTH,
            first=said,
            second=Said(
                gettext_noop("%(observation)s against calculet's replay of the package's golden prompt: %(figures)s"),
                observation="same_as_infer.fixed",
                figures=_figures(report),
            ),
        )
    observed.check("same_as_infer", served, said)
    observed.expect("busy_while_running", {"busy_while_running.code": ErrorCode.BUSY})


def _fixed_task_golden(observed: Observed) -> None:
    observed.against_golden(observed.golden(), ("prefill_logits", "decode_logits"))


def _fixed_task_failure(observed: Observed) -> None:
    observed.expect("buffer_gone_after_clear", {"buffer_gone_after_clear.code": ErrorCode.INVALID_ARGUMENT})
    observed.expect("recreated", {"recreated.code": ErrorCode.SUCCESS})


# c_api_nonblocking (I13): its runner, golden and failure plans.


def _c_api_nonblocking_runner(observed: Observed) -> None:
    calbin = observed.package()
    code, returned = observed.matches({"nonblocking_returns_at_once.code": ErrorCode.SUCCESS})
    status = observed.text("nonblocking_returns_at_once.status")
    at_once = Said(
        EQUAL,
        observation="nonblocking_returns_at_once.status",
        observed=status,
        expected=Said(gettext_noop("pending or running")),
    )
    observed.check(
        "nonblocking_returns_at_once",
        code and status in ("pending", "running"),
        Said(BOTH, first=returned, second=at_once),
    )
    observed.expect("wait_timeout_code", {"wait_timeout_code.code": ErrorCode.TIMEOUT})
    codes = {
        f"blocking_equals_nonblocking.{name}": ErrorCode.SUCCESS
        for name in ("wait_code", "output_code", "blocking_code")
    }
    served, said = observed.matches(codes)
    if served:
        served, said = observed.same_bits(
            "blocking_equals_nonblocking.nonblocking", "blocking_equals_nonblocking.blocking"
        )
    if served:
        expected = calbin.reference_logits(c_api_nonblocking.C_PROMPT, [0])
        row = observed.bits("blocking_equals_nonblocking.nonblocking", (calbin.config.vocab,))
        report = compare(expected, row[None, :])
        served = report["passed"]
        replayed = Said(
            gettext_noop("%(observation)s against calculet's replay of the prompt %(prompt)s: %(figures)s"),
            observation="blocking_equals_nonblocking.nonblocking",
            prompt=str(c_api_nonblocking.C_PROMPT),
            figures=_figures(report),
        )
        said = Said(BOTH, first=said, second=replayed)
    observed.check("blocking_equals_nonblocking", served, said)
    refused = {
        "errors_are_codes.out_of_vocab": ErrorCode.INVALID_ARGUMENT,
        "errors_are_codes.wrong_shape": ErrorCode.SHAPE_MISMATCH,
    }
    observed.expect("errors_are_codes", refused)


def _c_api_nonblocking_golden(observed: Observed) -> None:
    # One blocking call for the prompt, then one per decode step: every one returns 0.
    golden = observed.golden()
    calls = golden.decode_steps + 1
    returned = observed.integers("codes.returned")
    said = Said(EQUAL, observation="codes.returned", observed=str(returned), expected=str([0] * calls))
    served = returned == [0] * calls
    observed.check("codes", served, said)
    if served:
        observed.against_golden(golden, ("decode_logits",))


def _c_api_nonblocking_failure(observed: Observed) -> None:
    faults = {"faults_as_codes.busy": ErrorCode.BUSY, "faults_as_codes.core_exception": ErrorCode.CORE_EXCEPTION}
    observed.expect("faults_as_codes", faults)
    observed.expect("serves_after_recovery", {"serves_after_recovery.code": ErrorCode.SUCCESS})


# error_codes (I15): its runner plan; its other stages run the stage's routine.


def _error_codes_runner(observed: Observed) -> None:
    observed.expect("thirty_codes", {"thirty_codes.numbers": list(range(30))})
    observed.expect("every_code_reached", {"every_code_reached.codes": [int(code) for code in triggers.TRIGGERS]})
    # Every code no trigger reaches is one the runtime marks reserved.
    untriggered = [int(code) for code in ErrorCode if code not in triggers.TRIGGERS]
    observed.expect("the_rest_reserved", {"the_rest_reserved.reserved": untriggered})


# error_mapping (V53): its runner, failure, integration and soak plans; its golden runs the stage's routine.


def _error_mapping_runner(observed: Observed) -> None:
    observed.expect("every_code_mapped", {"every_code_mapped.codes": list(range(30))})
    # A token outside the vocabulary: rejected, HTTP 400, not retried.
    rejected = {
        "client_error_rejected.code": ErrorCode.INVALID_ARGUMENT,
        "client_error_rejected.http_status": 400,
        "client_error_rejected.retries": 0,
    }
    observed.expect("client_error_rejected", rejected)


def _error_mapping_failure(observed: Observed) -> None:
    # Each fault kind armed in a serving loop of its own: every client gets its tokens (HTTP 200), and a fault
    # whose code maps to retry or recover is retried.
    for kind, code in EXPECTED_CODES.items():
        served, said = observed.matches({f"{kind.value}.statuses": [200] * faults.SERVED})
        if SERVICE_ERRORS[code].action != ServiceAction.NONE:
            retried, retries = observed.at_least(f"{kind.value}.retries", 1)
            served, said = served and retried, Said(BOTH, first=said, second=retries)
        observed.check(kind.value, served, said)


def _error_mapping_integration(observed: Observed) -> None:
    # BUSY twice in the stage's serving loop: no request fails, some are retried.
    completed, said = observed.matches({"busy_retried_transparently.failed": 0})
    retried, retries = observed.at_least("busy_retried_transparently.retries", 1)
    observed.check("busy_retried_transparently", completed and retried, Said(BOTH, first=said, second=retries))


def _error_mapping_soak(observed: Observed) -> None:
    # A core exception under load: recovered, every request retried to completion.
    statuses = {"recovered_and_retried_under_load.statuses": [200] * faults.UNDER_LOAD}
    observed.expect("recovered_and_retried_under_load", statuses)


# device_reset (I10, V50-V52): its runner and integration plans; its golden plan's comparisons after each reset
# are still the runner's.


def _device_reset_runner(observed: Observed) -> None:
    # A prefill in flight on sequence 7 when its core is reset, or the dynamic memory cleared; then the golden
    # request without configuring again.
    for scope in ("reset_core", "clear_dynamic_memory"):
        aborted = {f"{scope}.code": ErrorCode.JOB_ABORTED, f"{scope}.dynamic_bytes": 0}
        observed.expect(scope, aborted | {f"{scope}.served_code": ErrorCode.SUCCESS})
    dropped = {"reset_configuration.first_cell": 0, "reset_configuration.code": ErrorCode.NOT_CONFIGURED}
    observed.expect("reset_configuration", dropped | {"reset_configuration.sequences": []})
    observed.expect("configure_again", {"configure_again.code": ErrorCode.SUCCESS})
    crashed = {"reset_device.crashed": ErrorCode.DEVICE_CRASHED, "reset_device.core_reset": ErrorCode.DEVICE_CRASHED}
    reset = {"reset_device.before_configure": ErrorCode.NOT_CONFIGURED, "reset_device.served_code": ErrorCode.SUCCESS}
    observed.expect("reset_device", crashed | reset | {"reset_device.status": "ready"})


def _device_reset_integration(observed: Observed) -> None:
    # A device crash in the stage's serving loop: reset and configured again, every request after it served.
    reset, resets = observed.at_least("served_after_a_device_reset.device_resets", 1)
    came, later = observed.at_least("served_after_a_device_reset.later", 1)
    expected = observed.integer("served_after_a_device_reset.later")
    served, said = observed.matches({"served_after_a_device_reset.served": expected})
    detail = Said(BOTH, first=Said(BOTH, first=resets, second=later), second=said)
    observed.check("served_after_a_device_reset", reset and came and served, detail)


# job_cancel (V23): its runner plan; its golden plan's comparison after the cancel is the stage's routine.


def _job_cancel_runner(observed: Observed) -> None:
    # A prefill of sequence 1 in parallel mode, the same queued behind it from a second KV manager and cancelled.
    pending = {"cancel_pending.before": "pending", "cancel_pending.status": "cancelled"}
    rolled_back = {"cancel_pending.code": ErrorCode.JOB_ABORTED, "cancel_pending.other_sequences": []}
    first = {"cancel_pending.cells": lifecycle.CANCEL_PROMPT, "cancel_pending.first_code": ErrorCode.SUCCESS}
    observed.expect("cancel_pending", pending | rolled_back | first)
    # Sequence 3 cancelled half way through its prefill: no output, no KV cell, no buffer memory, nothing in flight.
    running = {"cancel_running.before": "running", "cancel_running.status": "cancelled"}
    released = {"cancel_running.sequences": [], "cancel_running.dynamic_bytes": 0, "cancel_running.in_flight": 0}
    observed.expect("cancel_running", running | {"cancel_running.output_code": ErrorCode.INVALID_ARGUMENT} | released)
    # Sequence 4 hung: its wait times out, it is cancelled, and the golden request runs without a reset.
    timed_out = {"timeout_then_cancel.code": ErrorCode.TIMEOUT, "timeout_then_cancel.served_code": ErrorCode.SUCCESS}
    freed = {"timeout_then_cancel.sequences": [], "timeout_then_cancel.dynamic_bytes": 0}
    observed.expect("timeout_then_cancel", timed_out | freed)
    # Sequence 5 done before the cancel: refused, its results and cells stand.
    finished = {"finished_not_cancelled.code": ErrorCode.INVALID_ARGUMENT, "finished_not_cancelled.status": "done"}
    observed.expect("finished_not_cancelled", finished | {"finished_not_cancelled.cells": lifecycle.CANCEL_PROMPT})


# reset_drain (V51): its runner and failure plans (the failure plan's faults after its own check are the stage's).


def _reset_drain_runner(observed: Observed) -> None:
    # Three prefills in flight, one per KV manager, drained, read, released; then ResetCCU and ClearDynamicMem.
    calbin = observed.package()
    seqs = list(lifecycle.DRAINED)
    drained = {
        "drain_then_reset.in_flight": len(seqs),
        "drain_then_reset.code": ErrorCode.SUCCESS,
        "drain_then_reset.output_codes": [int(ErrorCode.SUCCESS)] * len(seqs),
        "drain_then_reset.dynamic_bytes": 0,
        "drain_then_reset.kept": seqs,
    }
    kept, said = observed.matches(drained)
    if kept:
        kept, said = observed.same_bits("drain_then_reset.drained", "drain_then_reset.alone", len(seqs))
    if kept:
        rows = observed.bits("drain_then_reset.drained", (len(seqs), calbin.config.vocab))
        expected = np.concatenate([calbin.reference_logits(lifecycle.drained_prompt(calbin, s), [0]) for s in seqs])
        report = compare(expected, rows)
        replayed = Said(
            gettext_noop("%(observation)s against calculet's replay of each drained prompt: %(figures)s"),
            observation="drain_then_reset.drained",
            figures=_figures(report),
        )
        kept, said = report["passed"], Said(BOTH, first=said, second=replayed)
    observed.check("drain_then_reset", kept, said)
    lost = {"reset_without_drain_loses_the_job.code": ErrorCode.JOB_ABORTED}
    observed.expect("reset_without_drain_loses_the_job", lost)


def _reset_drain_failure(observed: Observed) -> None:
    # A hung prefill: the drain times out with it in flight, the core reset aborts it, then the golden request.
    timed_out = {"drain_times_out_on_a_hung_job.code": ErrorCode.TIMEOUT, "drain_times_out_on_a_hung_job.in_flight": 1}
    aborted = {
        "drain_times_out_on_a_hung_job.aborted": ErrorCode.JOB_ABORTED,
        "drain_times_out_on_a_hung_job.status": "ready",
        "drain_times_out_on_a_hung_job.served_code": ErrorCode.SUCCESS,
    }
    observed.expect("drain_times_out_on_a_hung_job", timed_out | aborted)


# fault_recovery: its runner, integration and soak plans; its failure plan's check of a declared feature is still
# the runner's (the stage's fault injection before it is the stage's routine).


def _fault_recovery_runner(observed: Observed) -> None:
    # Each fault kind armed under the package's golden request, its code's recovery applied, the request again.
    for kind, code in EXPECTED_CODES.items():
        recovered = {f"{kind.value}.code": code, f"{kind.value}.status": "ready"}
        observed.expect(kind.value, recovered | {f"{kind.value}.served_code": ErrorCode.SUCCESS})


def _fault_recovery_integration(observed: Observed) -> None:
    # Each fault kind in a serving loop of its own, not retried: the last two requests, after the fault, served.
    for kind in EXPECTED_CODES:
        observed.expect(kind.value, {f"{kind.value}.last_codes": [int(ErrorCode.SUCCESS)] * 2})


def _fault_recovery_soak(observed: Observed) -> None:
    # Four faults on the soak's way: three need a recovery (BUSY is only retried), each caught request retried.
    recovered, said = observed.matches({"recovered_every_time.recoveries": 3})
    retried, retries = observed.at_least("recovered_every_time.retries", 4)
    observed.check("recovered_every_time", recovered and retried, Said(BOTH, first=said, second=retries))


# parallel_mode (I08, V20): its runner, golden, failure, integration and soak plans (after their own checks the
# golden comparison, the serving loop and the soak are the stage's routine).


def _every_job_done(observed: Observed, check: str) -> tuple[bool, Said, list[tuple[int, int]]]:
    """Whether every job of every thread finished once with SUCCESS, what was observed, and the finished jobs'
    (queue, order) in the order they finished."""
    threads, per_thread = observed.params["threads"], observed.params["jobs_per_thread"]
    queues, orders = observed.integers(f"{check}.queues"), observed.integers(f"{check}.orders")
    codes = observed.integers(f"{check}.codes")
    jobs = list(zip(queues, orders, strict=False))
    expected = [(queue, order) for queue in range(threads) for order in range(per_thread)]
    failed = sum(1 for code in codes if code != ErrorCode.SUCCESS)
    done = len(queues) == len(orders) == len(codes) and sorted(jobs) == expected and failed == 0
    said = Said(
        gettext_noop(
            "%(finished)s jobs finished, %(failed)s not SUCCESS (calculet expects jobs 0 to %(last)s of each of "
            "%(threads)s queues, each once, each SUCCESS)"
        ),
        finished=len(codes),
        failed=failed,
        last=per_thread - 1,
        threads=threads,
    )
    return done, said, jobs


def _in_flight(observed: Observed, check: str) -> None:
    depth = observed.integer(f"{check}.max_queue_depth")
    limit = observed.params["max_in_flight"]
    said = Said(
        gettext_noop("%(observation)s: %(observed)s (calculet expects more than 1, at most %(limit)s)"),
        observation=f"{check}.max_queue_depth",
        observed=depth,
        limit=limit,
    )
    observed.check(check, 1 < depth <= limit, said)


def _parallel_mode_runner(observed: Observed) -> None:
    done, said, jobs = _every_job_done(observed, "all_jobs_done")
    observed.check("all_jobs_done", done, said)
    ends = observed.floats("per_queue_order.end_ms", (len(jobs),), np.float64).tolist()
    disorder = []
    for queue in sorted({queue for queue, _ in jobs}):
        in_order = [end for (q, _), end in sorted(zip(jobs, ends, strict=True)) if q == queue]
        if any(later <= earlier for earlier, later in zip(in_order, in_order[1:], strict=False)):
            disorder.append(queue)
    said = Said(
        gettext_noop("queues whose jobs did not finish in submission order: %(queues)s (calculet expects none)"),
        queues=str(disorder),
    )
    observed.check("per_queue_order", not disorder, said)
    _in_flight(observed, "jobs_in_flight_at_once")
    accepted = {"overflow_is_queue_full.accepted": observed.params["max_in_flight"]}
    observed.expect("overflow_is_queue_full", accepted | {"overflow_is_queue_full.code": ErrorCode.QUEUE_FULL})
    observed.expect("limit_bounded", {"limit_bounded.code": ErrorCode.INVALID_ARGUMENT})


def _parallel_mode_golden(observed: Observed) -> None:
    calbin = observed.package()
    served, said, jobs = _every_job_done(observed, "same_as_one_at_a_time")
    if served:
        together, alone = "same_as_one_at_a_time.together", "same_as_one_at_a_time.alone"
        served, said = observed.same_bits(together, alone, len(jobs))
    if served:
        expected = np.concatenate(
            [calbin.reference_logits(parallel_mode.job_prompt(queue, order), [0]) for queue, order in jobs]
        )
        report = compare(expected, observed.bits(together, (len(jobs), calbin.config.vocab)))
        served = report["passed"]
        replayed = Said(
            gettext_noop("%(observation)s against calculet's replay of each job's prompt: %(figures)s"),
            observation=together,
            figures=_figures(report),
        )
        said = Said(BOTH, first=said, second=replayed)
    observed.check("same_as_one_at_a_time", served, said)


def _parallel_mode_failure(observed: Observed) -> None:
    # One job per lane, up to the limit, under a core exception; then the same jobs after the reset.
    count = min(observed.package().decode_lanes, observed.params["max_in_flight"])
    faulted = [int(ErrorCode.CORE_EXCEPTION)] + [int(ErrorCode.JOB_ABORTED)] * (count - 1)
    observed.expect("fault_with_jobs_in_flight", {"fault_with_jobs_in_flight.codes": faulted})
    observed.expect("jobs_run_after_reset", {"jobs_run_after_reset.codes": [int(ErrorCode.SUCCESS)] * count})


def _parallel_mode_serving(observed: Observed) -> None:
    _in_flight(observed, "served_in_parallel")


# full_debug (I14): its runner and golden plans, and at failure, integration and soak the dump of each call the
# stage's routine made (the routine itself is the stage's).


def _full_debug_runner(observed: Observed) -> None:
    calbin = observed.package()
    observed.expect("version", {"version.calrt": str(observed.device.get("calrt", ""))})
    sizes = {"dtype_bit_size.sizes": list(full_debug.DTYPE_BITS.values())}
    observed.expect("dtype_bit_size", sizes | {"dtype_bit_size.unknown": ErrorCode.DTYPE_MISMATCH})
    prompt = calbin.goldens.prompt_ids.tolist()
    shape = (calbin.config.layers, len(prompt), calbin.config.hidden)
    dump = observed.array("dump_per_layer.dump")
    said = Said(EQUAL, observation="dump_per_layer.dump", observed=str(list(dump.shape)), expected=str(list(shape)))
    observed.check("dump_per_layer", dump.shape == shape and bool(np.isfinite(dump).all()), said)
    with_debug = float(observed.floats("debug_costs_d2h.with_debug_ms", (), np.float64))
    without = float(observed.floats("debug_costs_d2h.without_debug_ms", (), np.float64))
    said = Said(
        gettext_noop("D2H %(with_debug)s ms with full debug, %(without)s ms without (calculet expects more with it)"),
        with_debug=with_debug,
        without=without,
    )
    observed.check("debug_costs_d2h", with_debug > without, said)
    codes = {"output_unchanged.plain_code": ErrorCode.SUCCESS, "output_unchanged.debugged_code": ErrorCode.SUCCESS}
    served, said = observed.matches(codes)
    if served:
        served, said = observed.same_bits("output_unchanged.plain", "output_unchanged.debugged", 1)
    if served:
        report = compare(
            calbin.reference_logits(prompt, [0]), observed.bits("output_unchanged.plain", (1, calbin.config.vocab))
        )
        served = report["passed"]
        replayed = Said(
            gettext_noop("%(observation)s against calculet's replay of the package's golden prompt: %(figures)s"),
            observation="output_unchanged.plain",
            figures=_figures(report),
        )
        said = Said(BOTH, first=said, second=replayed)
    observed.check("output_unchanged", served, said)


def _full_debug_golden(observed: Observed) -> None:
    calbin = observed.package()
    prompt = calbin.goldens.prompt_ids.tolist()
    shape = (calbin.config.layers, len(prompt), calbin.config.hidden)
    dump = observed.floats("layers_match_reference.dump", shape)
    worst = full_debug.lowest_cosine(full_debug.reference_dump(calbin, prompt), list(dump))
    said = Said(
        gettext_noop(
            "lowest cosine of a layer of %(observation)s against calculet's reference: %(cosine).8f (calculet "
            "expects at least %(minimum)s)"
        ),
        observation="layers_match_reference.dump",
        cosine=worst,
        minimum=full_debug.LAYER_COSINE_MIN,
    )
    observed.check("layers_match_reference", worst >= full_debug.LAYER_COSINE_MIN, said)


def _full_debug_dumped(observed: Observed) -> None:
    layers = observed.package().config.layers
    dumped = observed.integers("dumped_every_layer.layers")
    said = Said(
        gettext_noop("%(observation)s: %(observed)s (calculet expects one or more calls, each of %(layers)s layers)"),
        observation="dumped_every_layer.layers",
        observed=str(dumped),
        layers=layers,
    )
    observed.check("dumped_every_layer", bool(dumped) and all(count == layers for count in dumped), said)


def _figures(report: dict) -> str:
    """A comparison's broken limits, or its cosine and top-1 when it holds."""
    return "; ".join(report["failures"]) or f"cosine {report['cosine']:.6f}, top1 {report['top1']:.3f}"


@dataclass(frozen=True)
class ProbeJudge:
    """How calculet judges one probe: for each stage with a plan of the probe's own, the function that
    recomputes its checks from the observations."""

    stages: dict[str, Callable[[Observed], None]]


PROBE_JUDGES: dict[str, ProbeJudge] = {
    "kv_shift": ProbeJudge(
        {
            "runner": _kv_shift_runner,
            "golden": _kv_shift_golden,
            "failure": _kv_shift_failure,
            "integration": _kv_shift_integration,
        }
    ),
    "kv_manager": ProbeJudge(
        {
            "runner": _kv_manager_runner,
            "golden": _kv_manager_golden,
            "failure": _kv_manager_failure,
            "soak": _kv_manager_soak,
        }
    ),
    "kv_seq_min_max": ProbeJudge(
        {
            "runner": _kv_seq_min_max_runner,
            "golden": _kv_seq_min_max_golden,
            "failure": _kv_seq_min_max_failure,
            "integration": _kv_seq_min_max_integration,
        }
    ),
    "output_buffer": ProbeJudge(
        {"runner": _output_buffer_runner, "failure": _output_buffer_failure, "soak": _output_buffer_soak}
    ),
    "fixed_task": ProbeJudge(
        {"runner": _fixed_task_runner, "golden": _fixed_task_golden, "failure": _fixed_task_failure}
    ),
    "c_api_nonblocking": ProbeJudge(
        {
            "runner": _c_api_nonblocking_runner,
            "golden": _c_api_nonblocking_golden,
            "failure": _c_api_nonblocking_failure,
        }
    ),
    "parallel_mode": ProbeJudge(
        {
            "runner": _parallel_mode_runner,
            "golden": _parallel_mode_golden,
            "failure": _parallel_mode_failure,
            "integration": _parallel_mode_serving,
            "soak": _parallel_mode_serving,
        }
    ),
    "full_debug": ProbeJudge(
        {
            "runner": _full_debug_runner,
            "golden": _full_debug_golden,
            "failure": _full_debug_dumped,
            "integration": _full_debug_dumped,
            "soak": _full_debug_dumped,
        }
    ),
    "error_codes": ProbeJudge({"runner": _error_codes_runner}),
    "error_mapping": ProbeJudge(
        {
            "runner": _error_mapping_runner,
            "failure": _error_mapping_failure,
            "integration": _error_mapping_integration,
            "soak": _error_mapping_soak,
        }
    ),
    "device_reset": ProbeJudge({"runner": _device_reset_runner, "integration": _device_reset_integration}),
    "job_cancel": ProbeJudge({"runner": _job_cancel_runner}),
    "reset_drain": ProbeJudge({"runner": _reset_drain_runner, "failure": _reset_drain_failure}),
    "fault_recovery": ProbeJudge(
        {"runner": _fault_recovery_runner, "integration": _fault_recovery_integration, "soak": _fault_recovery_soak}
    ),
}


def _judged_here(stage: str, probes: list[dict]) -> list[str]:
    """The job's probes whose checks calculet judges at `stage`, in job order, each once."""
    names = [probe["name"] for probe in probes if stage in PROBE_JUDGES.get(probe["name"], ProbeJudge({})).stages]
    return list(dict.fromkeys(names))


def measured_files(stage: str, probes: list[dict]) -> list[str]:
    """The files calculet reads for a stage with these probes: the stage's own (`judging.MEASURED_FILES`) and
    each judged probe's observations (calculet-agent sends them back)."""
    observed = [OBSERVED_FILE.format(probe=name, stage=stage) for name in _judged_here(stage, probes)]
    return [*MEASURED_FILES.get(stage, ()), *observed]


def probe_judgements(
    stage: str, result: dict, probes: list[dict], workdir: Path, calbin: Path, golden: JobGolden
) -> dict[str, Judgement]:
    """calculet's verdict on each of the job's probes it judges at `stage`, by name, from the observations the
    runner left in `workdir`; `result` is the runner's (its entry for the probe says what the runner claims);
    `golden` the job's, for the golden plans that compare their own path with it."""
    names = _judged_here(stage, probes)
    if not names:
        return {}
    entries = {entry.get("name"): entry for entry in result.get("probes", []) if isinstance(entry, dict)}
    asked = {probe["name"]: probe.get("params") for probe in reversed(probes)}  # the first of a name's
    reported = result.get("device")
    device: dict = reported if isinstance(reported, dict) else {}
    package: Calbin | None | NoReference
    try:
        package = package_reference(calbin, result).package  # loaded once for all the probes
    except NoReference as error:
        package = error
    if package is None:
        # A vendor-form package has no reference to replay its probes on: their checks stay the runner's word,
        # as those of every probe not judged here (docs/acceptance.md), rather than fail a package that is right.
        return {}
    return {
        name: _probe_judgement(
            name, stage, entries.get(name, {}), workdir, package, calbin, golden, asked[name], device
        )
        for name in names
    }


def _probe_judgement(
    name: str,
    stage: str,
    claimed: dict,
    workdir: Path,
    package: Calbin | NoReference,
    calbin: Path,
    golden: JobGolden,
    params: dict | None,
    device: dict,
) -> Judgement:
    file = OBSERVED_FILE.format(probe=name, stage=stage)
    field_name = f"measurements.probes.{name}"
    try:
        arrays = read_npz(workdir / file)
        if isinstance(package, NoReference):
            raise package
        observed = Observed(
            name, file, arrays, package, calbin, golden, PROBES[name].parse_params(params, name), device
        )
        PROBE_JUDGES[name].stages[stage](observed)
    except NoReference as error:
        said = _of_probe(name, said_by(error))
        return Judgement(False, str(said), [finding("no_reference", said, field_name)])
    except ValueError as error:
        return _verdict(claimed, {}, [("no_measurement", _of_probe(name, said_by(error)))], name, field_name)
    failed: list[tuple[str, str]] = [
        (
            "probe_check_failed",
            _of_probe(name, Said(gettext_noop("%(check)s: %(detail)s"), check=c["name"], detail=c["detail"])),
        )
        for c in observed.checks
        if not c["passed"]
    ]
    metrics = {"checks": [{**check, "detail": str(check["detail"])} for check in observed.checks]}
    return _verdict(claimed, metrics, failed, name, field_name)


def _of_probe(name: str, problem: str) -> Said:
    return Said(gettext_noop("%(probe)s: %(problem)s"), probe=name, problem=problem)


def _verdict(claimed: dict, metrics: dict, failures: list[tuple[str, str]], name: str, field_name: str) -> Judgement:
    judged = coded_verdict(claimed, metrics, failures, f"{name}: every check holds on what the runner observed")
    for item in judged.findings:
        item["field"] = field_name
    return judged


def with_probe_checks(judged: Judgement, probes_judged: dict[str, Judgement]) -> Judgement:
    """A stage's judgement with its probes' (metrics `judged_probes`, by name): it passes when every one passes."""
    if not probes_judged:
        return judged
    metrics = {
        **judged.metrics,
        "judged_probes": {
            name: {"verdict": "pass" if probe.passed else "fail", **probe.metrics}
            for name, probe in probes_judged.items()
        },
    }
    failed = [j for j in (judged, *probes_judged.values()) if not j.passed]
    if not failed:
        return Judgement(True, judged.reason, [], metrics)
    findings = [item for j in failed for item in j.findings]
    return Judgement(False, "; ".join(j.reason for j in failed), findings, metrics)
