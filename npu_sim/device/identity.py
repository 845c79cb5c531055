"""What a virtual device reports about itself, and the device configuration an operator may give it.

The defaults are CalRT 0.7.6 (the seed's), driver 2.3.0 and firmware 1.8.0 (the seed records none; these
are the simulator's own), chip calculet-2c. `python -m npu_sim run --device-config FILE` (or the
environment variable NPU_SIM_DEVICE_CONFIG naming that file) changes them, so a run can emulate an
upgraded device:

    {"calrt": "0.9.0", "driver": "2.4.0", "firmware": "1.9.0", "chip": "calculet-2c", "serial": "SIM-7",
     "calrt_features": ["multi_board"]}

`calrt_features` lists what the emulated runtime offers beyond 0.7.6. The only one is `multi_board`:
a virtual device spanning two physical devices. CalRT 0.7.x drives exactly one (I09), so a 0.7.x
runtime cannot declare it — that is why the pinned multi-physical-device capability stays C4.
"""

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from npu_sim.chips import CALCULET_2C

CALRT_VERSION = "0.7.6"
DRIVER_VERSION = "2.3.0"
FIRMWARE_VERSION = "1.8.0"
DEFAULT_SERIAL = "SIM-0001"
RUNTIME_FEATURES = ("multi_board",)
DEVICE_CONFIG_ENV = "NPU_SIM_DEVICE_CONFIG"
# CalRT below this drives one physical device (I09 is about 0.7.6; V36 asks which later version adds more).
ONE_DEVICE_BELOW = Version("0.8.0")


class DeviceConfigError(ValueError):
    """The device configuration cannot be used; the message names the field."""


@dataclass(frozen=True)
class DeviceIdentity:
    calrt: str = CALRT_VERSION
    driver: str = DRIVER_VERSION
    firmware: str = FIRMWARE_VERSION
    chip: str = CALCULET_2C.name
    serial: str = DEFAULT_SERIAL
    calrt_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("calrt", "driver", "firmware"):
            try:
                Version(getattr(self, name))
            except InvalidVersion as error:
                raise DeviceConfigError(f"{name}: {error}") from error
        unknown = sorted(set(self.calrt_features) - set(RUNTIME_FEATURES))
        if unknown:
            raise DeviceConfigError(
                f"calrt_features: unknown {', '.join(unknown)}; known: {', '.join(RUNTIME_FEATURES)}"
            )
        if "multi_board" in self.calrt_features and Version(self.calrt) < ONE_DEVICE_BELOW:
            raise DeviceConfigError(f"calrt_features: CalRT {self.calrt} drives one physical device (I09)")

    def versions(self) -> dict[str, str]:
        """What a package's compatibility ranges are checked against."""
        return {"calrt": self.calrt, "driver": self.driver, "firmware": self.firmware, "chip": self.chip}


def identity_from_json(values: Any) -> DeviceIdentity:
    if not isinstance(values, dict):
        raise DeviceConfigError("the device configuration must be a JSON object")
    known = {f.name for f in fields(DeviceIdentity)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise DeviceConfigError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for name, value in values.items():
        if name == "calrt_features":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise DeviceConfigError("calrt_features must be a list of strings")
        elif not isinstance(value, str) or not value:
            raise DeviceConfigError(f"{name} must be a non-empty string")
    features = tuple(values.pop("calrt_features", ()))
    return DeviceIdentity(**values, calrt_features=features)


def load_device_config(path: str | os.PathLike[str] | None = None) -> DeviceIdentity:
    """The identity in `path`, else in the file NPU_SIM_DEVICE_CONFIG names, else the defaults."""
    path = path or os.environ.get(DEVICE_CONFIG_ENV)
    if not path:
        return DeviceIdentity()
    try:
        values = json.loads(Path(path).read_text())
    except OSError as error:
        raise DeviceConfigError(f"cannot read the device configuration {path}: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise DeviceConfigError(f"the device configuration {path} is not valid JSON: {error}") from error
    return identity_from_json(values)


def identity_report(identity: DeviceIdentity, chiplets: int, boards: int) -> dict[str, Any]:
    """The `device` object of a result: identity and versions as the device reports them."""
    report: dict[str, Any] = asdict(identity)
    report["calrt_features"] = list(identity.calrt_features)
    return {
        "kind": "simulator",
        "identity": f"npu_sim virtual device {identity.serial}",
        **report,
        "chiplets": chiplets,
        "boards": boards,
    }
