from npu_sim import compat
from npu_sim.errors import ErrorCode

MANIFEST = {
    "compatibility": {
        "calrt": ">=0.7.6,<0.8",
        "driver": ">=2.3,<3",
        "firmware": ">=1.8,<2",
        "chip": ["calculet-2c"],
    }
}
TARGET = {"name": "bench-1", "calrt": "0.7.6", "driver": "2.3.1", "firmware": "1.8.0", "chip": "calculet-2c"}


def test_a_target_inside_every_range_has_no_problems():
    assert compat.check(MANIFEST, TARGET) == []


def test_each_range_is_checked():
    target = TARGET | {"calrt": "0.8.0", "driver": "3.0", "firmware": "1.7.9", "chip": "calculet-4c"}
    problems = compat.problems(MANIFEST, target)
    assert [(p.field, p.code) for p in problems] == [
        ("calrt", ErrorCode.CALRT_VERSION_INCOMPATIBLE),
        ("driver", ErrorCode.DRIVER_VERSION_INCOMPATIBLE),
        ("firmware", ErrorCode.FIRMWARE_VERSION_INCOMPATIBLE),
        ("chip", ErrorCode.CHIP_INCOMPATIBLE),
    ]
    assert compat.check(MANIFEST, target)[0] == "calrt 0.8.0 is outside the calbin's range >=0.7.6,<0.8"


def test_prereleases_count_and_bad_versions_are_problems():
    assert compat.check(MANIFEST, TARGET | {"calrt": "0.7.7rc1"}) == []
    assert compat.check(MANIFEST, TARGET | {"calrt": "0.7.6-vendor-build"}) != []
    assert compat.check({"compatibility": MANIFEST["compatibility"] | {"driver": "2.3 or so"}}, TARGET) != []


def test_missing_information_is_a_problem_not_a_pass():
    assert compat.check({}, TARGET) == ["the calbin declares no compatibility"]
    target = {k: v for k, v in TARGET.items() if k != "firmware"}
    assert compat.check(MANIFEST, target) == ["the target states no firmware version"]
