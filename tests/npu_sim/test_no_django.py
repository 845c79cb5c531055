"""npu_sim stays plain Python + numpy: importing every module of it pulls in none of the Django apps."""

import json
import pkgutil
import subprocess
import sys

import npu_sim

FORBIDDEN = ("django", "rest_framework", "calculet", "vendor", "evidence", "acceptance")


def test_importing_every_module_imports_no_django():
    modules = sorted(
        m.name for m in pkgutil.walk_packages(npu_sim.__path__, "npu_sim.") if not m.name.endswith("__main__")
    )
    assert "npu_sim.probes.sampling" in modules and "npu_sim.device.virtual_device" in modules
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    loaded = json.loads(out.stdout)
    offending = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert offending == []


def test_ml_dtypes_is_imported_by_the_first_bf16_rounding_not_by_importing_the_simulator():
    # Importing ml_dtypes costs about a second of CPU; every Django process imports the simulator's modules.
    modules = sorted(
        m.name for m in pkgutil.walk_packages(npu_sim.__path__, "npu_sim.") if not m.name.endswith("__main__")
    )
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "before = 'ml_dtypes' in sys.modules\n"
        "from npu_sim.dtypes import bf16_to_bits, to_bf16\n"
        "bits = bf16_to_bits(to_bf16([1.0, 1.00390625, -2.5])).tolist()\n"
        "print(json.dumps([before, 'ml_dtypes' in sys.modules, bits]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    # 1.00390625 lies halfway between two BF16 values and rounds to the even one, 1.0.
    assert json.loads(out.stdout) == [False, True, [0x3F80, 0x3F80, 0xC020]]
