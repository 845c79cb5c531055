"""Every code of the table is either produced by the simulator (a trigger below) or marked reserved."""

from pathlib import Path

import numpy as np
import pytest

from npu_sim.errors import ERROR_TABLE, ErrorCode, describe
from npu_sim.probes.triggers import TRIGGERS, code_of, fresh


def test_the_table_has_thirty_codes_numbered_0_to_29():
    assert sorted(int(code) for code in ERROR_TABLE) == list(range(30))
    assert all(info.description and info.category and info.recovery for info in ERROR_TABLE.values())
    assert describe(18) == {
        "code": 18,
        "name": "TIMEOUT",
        "category": "timeout",
        "description": ERROR_TABLE[ErrorCode.TIMEOUT].description,
        "recovery": ERROR_TABLE[ErrorCode.TIMEOUT].recovery,
        "reserved": False,
    }


def test_the_table_covers_the_categories_the_seed_lists():
    categories = {info.category for info in ERROR_TABLE.values()}
    assert {"version", "configuration", "timeout", "busy", "crash", "shape", "kv", "memory"} <= categories


def test_every_code_is_reachable_or_reserved():
    for code, info in ERROR_TABLE.items():
        assert info.reserved == (code not in TRIGGERS), code.name
    assert {code.name for code, info in ERROR_TABLE.items() if info.reserved} == {
        "DMA_ERROR",
        "THERMAL_THROTTLE",
        "FIRMWARE_FAULT",
        "INTERNAL",
    }


@pytest.mark.parametrize("code", list(TRIGGERS), ids=lambda code: code.name)
def test_the_trigger_produces_its_code(code: ErrorCode, built_calbin: Path, built_calbin_tar: Path, tmp_path: Path):
    assert TRIGGERS[code](built_calbin, tmp_path) == code
    assert TRIGGERS[code](built_calbin_tar, tmp_path) == code


def test_token_ids_must_be_integers_in_the_vocabulary(built_calbin: Path):
    device, calbin, kv = fresh(built_calbin)
    kv.allocate(1, 2)
    prefill = calbin.model_of_type("llm_prefill")
    assert code_of(lambda: device.infer(prefill, kv, {1: np.array([1.0, 2.0])})) == ErrorCode.DTYPE_MISMATCH
    assert code_of(lambda: device.infer(prefill, kv, {1: [-1, 2]})) == ErrorCode.INVALID_ARGUMENT
    assert code_of(lambda: device.infer(prefill, kv, {1: [1, 2, 3]})) == ErrorCode.INVALID_ARGUMENT


def test_docs_list_every_code_with_its_category():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    for code, info in ERROR_TABLE.items():
        row = f"| {int(code)} | `{code.name}` | {info.category} |"
        assert row in doc, row
        assert (f"{row} reserved |" in doc) == info.reserved, row
