import re
import shutil
from pathlib import Path

import pytest

from npu_sim.calbin import build_calbin
from npu_sim.device import VirtualDevice
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin

# How validation creates a finding: error("code", ...), warning("code", ...), Finding("code", ...),
# CalbinError("code", ...), _defect("code", ...), the code as the first argument, possibly on the next line.
FINDING_CALL = re.compile(r"\b(?:error|warning|Finding|CalbinError|_defect)\(\s*\"([a-z0-9_]+)\"")
CALBIN_SOURCE = Path(__file__).resolve().parents[2] / "npu_sim" / "calbin"


@pytest.fixture(scope="session")
def produced_finding_codes() -> set[str]:
    """Every finding code validation can produce, read from its source."""
    source = "".join(path.read_text() for path in CALBIN_SOURCE.glob("*.py"))
    return set(FINDING_CALL.findall(source))


@pytest.fixture(scope="session")
def built_calbin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny calbin with decode batch 8, built once; tests copy it before changing it."""
    return build_calbin(tmp_path_factory.mktemp("calbin") / "tiny-b8", decode_batch=8)


@pytest.fixture(scope="session")
def built_calbin_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_calbin(tmp_path_factory.mktemp("calbin") / "tiny-b8", decode_batch=8, tar=True)


@pytest.fixture(scope="session")
def package(tmp_path_factory: pytest.TempPathFactory):
    """package(*features, **options): a tiny package with these features, built once per session."""
    built: dict[tuple, Path] = {}

    def make(*features: str, **options) -> Path:
        key = (features, tuple(sorted(options.items())))
        if key not in built:
            name = "-".join(features) or "plain"
            out = tmp_path_factory.mktemp("pkg") / name
            built[key] = build_calbin(out, features=features, **{"decode_batch": 4, **options})
        return built[key]

    return make


@pytest.fixture
def calbin_copy(built_calbin: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built_calbin, tmp_path / "calbin"))


@pytest.fixture
def loaded(built_calbin: Path) -> tuple[VirtualDevice, Calbin, KvManager]:
    device = VirtualDevice()
    calbin = device.create_calbin(built_calbin)
    device.configure(calbin)
    return device, calbin, device.create_kv_manager(calbin)
