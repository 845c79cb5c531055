"""python -m npu_sim: build-calbin, validate, convert-calbin, timing, probes, run."""

import argparse
import json
import sys
from pathlib import Path

from npu_sim.calbin import CalbinError, build_calbin, validate
from npu_sim.calbin.convert import convert_calbin
from npu_sim.calbin.layout import FEATURES, LAYOUTS
from npu_sim.device import DeviceConfigError, load_device_config
from npu_sim.model import PRESETS
from npu_sim.probes import catalogue
from npu_sim.runner import JobError, run_job
from npu_sim.timing import TimingModel, calibration_rows, capacity_rows, context_rows

# Exit statuses of `run` (docs/runner-protocol.md).
EXIT_VERDICT = 0
EXIT_BROKEN_JOB = 2


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from error
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers")
    return values


def _words(text: str) -> list[str]:
    return [w for w in text.replace(",", " ").split() if w]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _print_table(rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns))


def cmd_build_calbin(args: argparse.Namespace) -> int:
    try:
        path = build_calbin(
            args.out,
            args.preset,
            args.decode_batch,
            args.seed,
            args.tar,
            args.decode_steps,
            features=args.features,
            prefill_batch=args.prefill_batch,
            chip_affinity=args.chip_affinity,
            s8_kv=args.s8_kv,
            prefill_lengths=args.prefill_lengths,
            cpu_fallback=args.cpu_fallback,
            timing_preset=args.timing_preset,
            golden_out=args.golden_out,
        )
    except (ValueError, FileExistsError) as error:
        print(f"build-calbin: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    findings = validate(args.path)
    print(json.dumps([f.as_dict() for f in findings], indent=2))
    return 1 if any(f.severity == "error" for f in findings) else 0


def cmd_convert(args: argparse.Namespace) -> int:
    try:
        print(convert_calbin(args.source, args.out, args.tar))
    except (CalbinError, ValueError, KeyError, FileExistsError) as error:
        print(f"convert-calbin: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_timing(args: argparse.Namespace) -> int:
    model = TimingModel()
    if args.calibration:
        rows = calibration_rows(model)
    elif args.capacity:
        rows = capacity_rows(model)
    else:
        rows = context_rows(model, args.contexts, args.batch)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows)
    return 0


def cmd_probes(args: argparse.Namespace) -> int:
    listed = catalogue()
    if args.json:
        print(json.dumps(listed, indent=2))
        return 0
    for probe in listed["probes"]:
        needs = f" (needs {', '.join(probe['features'])})" if probe["features"] else ""
        print(f"{probe['name']}{needs}: {probe['description']}")
        for param in probe["params"] + probe["thresholds"]:
            print(f"    {param['name']} = {param['default']!r}: {param['meaning']}")
    return 0


def _progress(percent: float, text: str) -> None:
    print(f"PROGRESS {round(percent, 1):g} {text}", file=sys.stderr, flush=True)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        job = json.loads(Path(args.job).read_text())
    except OSError as error:
        print(f"run: cannot read the job file {args.job}: {error.strerror}", file=sys.stderr)
        return EXIT_BROKEN_JOB
    except json.JSONDecodeError as error:
        print(f"run: the job file {args.job} is not valid JSON: {error}", file=sys.stderr)
        return EXIT_BROKEN_JOB
    result_path = Path(args.result)
    if not result_path.parent.is_dir():
        print(f"run: the result's directory {result_path.parent} does not exist", file=sys.stderr)
        return EXIT_BROKEN_JOB
    try:
        device = load_device_config(args.device_config)
    except DeviceConfigError as error:
        print(f"run: device configuration: {error}", file=sys.stderr)
        return EXIT_BROKEN_JOB
    try:
        result = run_job(job, progress=_progress, log=_log, workdir=result_path.parent, device=device)
    except JobError as error:
        print(f"run: broken job: {error}", file=sys.stderr)
        return EXIT_BROKEN_JOB
    result_path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    _log(f"verdict: {result['verdict']}")
    return EXIT_VERDICT


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m npu_sim", description="The bundled Calculet NPU simulator.")
    commands = top.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build-calbin", help="write a calbin package with goldens from the reference model")
    build.add_argument("--preset", choices=sorted(p for p in PRESETS if p != "full"), default="tiny")
    build.add_argument("--decode-batch", type=_positive, default=1, help="lanes of the decode sub-model")
    build.add_argument("--prefill-batch", type=_positive, default=1, help="sequences per prefill call")
    build.add_argument("--out", required=True, help="directory to create, or a .tar path")
    build.add_argument("--tar", action="store_true", help="write OUT.tar (or OUT if it ends in .tar)")
    build.add_argument("--seed", type=int, default=0, help="seed of the weights and the golden prompt")
    build.add_argument("--decode-steps", type=_positive, default=16, help="greedy decode steps in the goldens")
    build.add_argument(
        "--features",
        type=_words,
        default=[],
        help=f"at most one layout of {', '.join(LAYOUTS)} (tp when none) and any of {', '.join(FEATURES)}",
    )
    build.add_argument("--chip-affinity", type=int, default=0, help="single_chiplet: the chip it runs on (0 or 1)")
    build.add_argument("--s8-kv", choices=("v", "kv"), default="v", help="s8: quantise the V cache, or K and V (V25)")
    build.add_argument("--prefill-lengths", type=_int_list, default=[], help="static prefill lengths (default: any)")
    build.add_argument("--cpu-fallback", type=_words, default=[], help="ops the package places on the host CPU")
    build.add_argument("--timing-preset", choices=sorted(PRESETS), help="the scale the timing model predicts it at")
    build.add_argument("--golden-out", help="also write the package's golden file here, as a vendor delivers it")
    build.set_defaults(func=cmd_build_calbin)

    check = commands.add_parser("validate", help="print a package's findings as JSON; exit 1 on any error")
    check.add_argument("path", help="calbin directory or tar")
    check.set_defaults(func=cmd_validate)

    convert = commands.add_parser("convert-calbin", help="rewrite a schema 1 (manifest.json) package in schema 2")
    convert.add_argument("source", help="the schema 1 package, directory or tar")
    convert.add_argument("out", help="directory to create, or a .tar path")
    convert.add_argument("--tar", action="store_true", help="write OUT.tar")
    convert.set_defaults(func=cmd_convert)

    timing = commands.add_parser("timing", help="decode and prefill predictions at full Qwen3-30B-A3B scale")
    timing.add_argument("--contexts", type=_int_list, default=[512, 4096, 33000, 40960], help="e.g. 512,33000,40960")
    timing.add_argument("--batch", type=_positive, default=1, help="decode lanes")
    timing.add_argument("--calibration", action="store_true", help="fit and held-out errors at the seed's P04/P05")
    timing.add_argument("--capacity", action="store_true", help="KV capacity and speed for decode batch 1/4/8/16")
    timing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    timing.set_defaults(func=cmd_timing)

    probes = commands.add_parser("probes", help="the probe catalogue: parameters, metrics, thresholds, stages")
    probes.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    probes.set_defaults(func=cmd_probes)

    run = commands.add_parser("run", help="run a runner-protocol job (docs/runner-protocol.md)")
    run.add_argument("--job", required=True, help="job JSON file")
    run.add_argument("--result", required=True, help="where to write the result JSON")
    run.add_argument(
        "--device-config", help="the simulated device's identity and versions (JSON); also NPU_SIM_DEVICE_CONFIG"
    )
    run.set_defaults(func=cmd_run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    status: int = args.func(args)
    return status
