"""The probes of all 33 seed capabilities on the tiny preset, through the five chain stages, in one process.

    .venv/bin/python bench/sim_probes.py [--json FILE]

Builds the packages the probes need in a temporary directory (timed apart), then runs every probe that
some capability of evidence/seed/capabilities.py names, through runner, golden, failure, integration and
soak, with the stage parameters the acceptance side sends by default (its DEFAULT_SOAK and the stages'
own defaults). Prints each probe's wall time over the five stages and its verdict per stage, which
capabilities it proves, the capabilities no probe proves (an SDK, container, schema or document
deliverable), and the total (goal <= 60 s). Wall time of this machine; the device time the probes
report is modelled.
"""

# ruff: noqa: E402 (the imports must follow the environment set just below)
import os

# As `python -m npu_sim` does (npu_sim/__main__.py): one BLAS thread, set before numpy is imported.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")


import argparse
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence.seed.capabilities import CAPABILITIES
from npu_sim.calbin import build_calbin
from npu_sim.device import DeviceIdentity
from npu_sim.probes import PROBES
from npu_sim.runner import run_job

CHAIN = ("runner", "golden", "failure", "integration", "soak")
# The acceptance side's defaults when an answer sets none (acceptance/protocol.py, DEFAULT_SOAK).
STAGE_PARAMS: dict[str, dict[str, Any]] = {
    "soak": {
        "requests": 16,
        "concurrency": 4,
        "prompt_tokens": 128,
        "output_tokens": 32,
        "min_decode_tokens_per_s": 10.0,
    }
}
TWO_BOARDS = DeviceIdentity(calrt="0.9.0", calrt_features=("multi_board",))
# Capabilities proven by a deliverable other than a package: nothing to run on a device.
NOT_A_PACKAGE = {
    "pdf-relocate-alloc": "sdk (headers and symbols: the PDF-only calls are absent) and document",
    "reproducible-compile": "container_image and document",
    "calbin-metadata-schema": "schema (JSON Schema against the current metadata and the A16/A17 defects)",
    "enginecore": "sdk and document",
}


@dataclass
class Case:
    """One probe run: its parameters, the package's build options, and what else the job needs."""

    probe: str
    params: dict[str, Any] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)
    second: dict[str, Any] | None = None
    device: DeviceIdentity | None = None

    @property
    def label(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.probe}({extra})" if extra else self.probe


def cases_for(capability: str) -> list[Case]:
    """The probe runs that prove a capability."""
    features = {
        "sampling": ("sampling",),
        "s8": ("s8",),
        "single_chiplet": ("single_chiplet",),
        "multi_model": ("single_chiplet", "multi_model"),
        "models_per_chiplet": ("single_chiplet", "multi_model"),
        "residency": ("single_chiplet", "multi_model", "residency"),
        "expert_parallel": ("ep",),
        "pipeline_parallel": ("pp",),
        "multi_board": ("multi_board",),
    }
    cases = []
    for spec in PROBES.values():
        if capability not in spec.capabilities:
            continue
        build: dict[str, Any] = {"features": features.get(spec.name, ()), "decode_batch": 4}
        two_packages = spec.name in ("multi_model", "residency", "models_per_chiplet")
        second = {"chip_affinity": 1, "seed": 1} if two_packages else None
        if spec.name == "decode_batch":
            batch = int(capability.rsplit("-", 1)[-1]) if capability.startswith("decode-batch-") else 4
            cases.append(Case(spec.name, {"batch": batch}, build | {"decode_batch": batch}))
        elif spec.name == "multi_board":
            device = None if capability.startswith("multi-physical-device") else TWO_BOARDS
            cases.append(Case(spec.name, {}, build, device=device))
        elif spec.name == "cpu_fallback":
            cases.append(Case(spec.name, {}, build | {"cpu_fallback": ("rope",)}))
        else:
            cases.append(Case(spec.name, {}, build, second))
    return cases


def package_key(build: dict[str, Any]) -> str:
    return json.dumps(build, sort_keys=True, default=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    plan: dict[str, tuple[Case, list[str]]] = {}
    for capability in CAPABILITIES:
        for case in cases_for(capability.slug):
            key = f"{case.label}{' on CalRT 0.7.6' if case.probe == 'multi_board' and case.device is None else ''}"
            plan.setdefault(key, (case, []))[1].append(capability.slug)
    unproven = [c.slug for c in CAPABILITIES if not cases_for(c.slug)]
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        started = time.perf_counter()
        packages: dict[str, Path] = {}
        for case, _ in plan.values():
            for build in filter(None, (case.build, case.build | (case.second or {}) if case.second else None)):
                key = package_key(build)
                if key not in packages:
                    packages[key] = build_calbin(root / f"p{len(packages)}", **build)
        build_s = time.perf_counter() - started
        rows, total = [], 0.0
        for key, (case, capabilities) in plan.items():
            job = {
                "schema_version": 2,
                "calbin": str(packages[package_key(case.build)]),
                "packages": {"second": str(packages[package_key(case.build | case.second)])} if case.second else {},
                "probes": [{"name": case.probe, "params": case.params}],
            }
            verdicts, started = [], time.perf_counter()
            for stage in CHAIN:
                result = run_job(job | {"stage": stage, "params": STAGE_PARAMS.get(stage, {})}, device=case.device)
                verdicts.append(result["probes"][0]["verdict"])
            seconds = time.perf_counter() - started
            total += seconds
            rows.append(
                {
                    "probe": key,
                    "seconds": round(seconds, 2),
                    "verdicts": dict(zip(CHAIN, verdicts, strict=True)),
                    "capabilities": capabilities,
                }
            )
            print(
                f"{key:40s} {seconds:6.2f} s  {' '.join(v[0] for v in verdicts)}  {', '.join(capabilities)}", flush=True
            )
    cpu = time.process_time()
    print(f"\n{len(rows)} probe runs x {len(CHAIN)} stages: {total:.1f} s wall (goal <= 60 s)")
    print(f"packages built in {build_s:.1f} s")
    print(f"this process's CPU time, building included: {cpu:.1f} s; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"capabilities with probes: {len(CAPABILITIES) - len(unproven)} of {len(CAPABILITIES)}")
    for slug in unproven:
        print(f"  no probe: {slug}: {NOT_A_PACKAGE.get(slug, 'not proven by a package')}")
    if args.json:
        figures = {"rows": rows, "total_s": total, "build_s": build_s, "cpu_s": cpu, "unproven": unproven}
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
