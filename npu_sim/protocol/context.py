"""What a running job shares: the device it opens, the packages it loads, the golden it compares with,
and the recorders that collect checks, metrics and files for the stage and for each probe."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_sim import compat
from npu_sim.calbin import Finding, read_manifest, validate
from npu_sim.calbin.goldens import GoldenError, GoldenSet, golden_problems, read_golden
from npu_sim.calbin.layout import VENDOR_FORM
from npu_sim.device import DeviceIdentity, ModelHandle, VirtualDevice
from npu_sim.device.identity import identity_report
from npu_sim.errors import CalrtError, ErrorCode
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin, validation_error_code
from npu_sim.protocol.job import Job

Progress = Callable[[float, str], None]
Log = Callable[[str], None]


class NotExercised(Exception):
    """A probe cannot exercise what it proves here; the message says why (finding `not_exercised`)."""


@dataclass
class Session:
    """A fresh device with the job's package configured, and a KV manager for it."""

    device: VirtualDevice
    calbin: Calbin
    handle: ModelHandle
    kv: KvManager


class JobContext:
    def __init__(
        self,
        job: Job,
        stage_params: dict[str, Any],
        identity: DeviceIdentity,
        progress: Progress,
        log_sink: Log | None,
        workdir: Path | None,
    ) -> None:
        self.job = job
        self.stage_params = stage_params
        self.identity = identity
        self._progress = progress
        self._percent = 0.0
        self.log_sink = log_sink
        self.workdir = workdir
        self.logs: list[str] = []
        self.files: list[str] = []
        self._loaded: dict[str, Calbin] = {}
        self._findings: dict[str, list[Finding]] = {}

    def progress(self, percent: float, text: str) -> None:
        """Report progress; it never goes down, whichever part of the job (or thread) reports it."""
        self._percent = max(self._percent, percent)
        self._progress(self._percent, text)

    def log(self, line: str) -> None:
        self.logs.append(line)
        if self.log_sink:
            self.log_sink(line)

    def device_identity(self) -> DeviceIdentity:
        """Schema 2: the device's own configuration. Schema 1 kept its old meaning: the target's versions,
        defaults for what it leaves out."""
        if self.job.schema_version == 2:
            return self.identity
        target = self.job.target
        return DeviceIdentity(
            calrt=target.get("calrt", self.identity.calrt),
            driver=target.get("driver", self.identity.driver),
            firmware=target.get("firmware", self.identity.firmware),
            chip=target.get("chip", self.identity.chip),
            serial=self.identity.serial,
        )

    def make_device(self, **options: Any) -> VirtualDevice:
        i = self.device_identity()
        return VirtualDevice(
            calrt_version=i.calrt,
            driver_version=i.driver,
            firmware_version=i.firmware,
            chip=i.chip,
            serial=i.serial,
            calrt_features=i.calrt_features,
            **options,
        )

    def device_for(self, calbin: Calbin, **options: Any) -> VirtualDevice:
        """A device for this package: over as many boards as it spans when the runtime can drive them; a
        runtime that cannot refuses the second board itself when the package is configured (I09)."""
        if "multi_board" in self.device_identity().calrt_features:
            options.setdefault("physical_devices", calbin.boards)
        return self.make_device(**options)

    def device_report(self) -> dict[str, Any]:
        return identity_report(self.device_identity(), chiplets=2, boards=1)

    def validation(self, path: str) -> list[Finding]:
        """The package's findings, validated once per job: its check and its loading read the same files."""
        if path not in self._findings:
            self._findings[path] = validate(path)
        return self._findings[path]

    def load(self, path: str) -> Calbin:
        """The package loaded on the host (once per job); CalrtError when it cannot be."""
        if path not in self._loaded:
            self._loaded[path] = self.make_device().create_calbin(path, self.validation(path))
        return self._loaded[path]

    def golden(self, calbin: Calbin) -> GoldenSet:
        """The golden a comparison uses, per the job's golden_source; NotExercised when there is none."""
        if self.job.golden_source == "package":
            return calbin.goldens
        if self.job.golden is None:
            raise NotExercised("the job's golden_source is vendor but it names no golden file")
        try:
            golden = read_golden(Path(self.job.golden).read_bytes(), self.job.golden)
        except (OSError, GoldenError) as error:
            raise NotExercised(f"the vendor's golden {self.job.golden} cannot be used: {error}") from error
        problems = golden_problems(golden, calbin.config.vocab, calbin.max_seq_len)
        if problems:
            raise NotExercised(f"the vendor's golden does not fit the package: {'; '.join(problems)}")
        return golden

    def session(self, path: str | None = None, **device_options: Any) -> Session:
        """A fresh device with a package configured; NotExercised when that cannot be done."""
        path = path or self.job.calbin
        if path is None:
            raise NotExercised("the job names no package")
        try:
            calbin = self.load(path)
            device = self.device_for(calbin, **device_options)
            handle = device.configure(calbin)
        except CalrtError as error:
            raise NotExercised(f"{path} cannot be configured: {error}") from error
        return Session(device, calbin, handle, device.create_kv_manager(calbin))


class Recorder:
    """The checks, metrics and produced files of a stage, or of one probe within it."""

    def __init__(self, ctx: JobContext, params: dict[str, Any], label: str = "") -> None:
        self.ctx = ctx
        self.params = params
        self.label = label  # "" for the stage; "<probe>: " for a probe, in log lines and file names
        self.checks: list[dict[str, Any]] = []
        self.metrics: dict[str, Any] = {}

    @property
    def workdir(self) -> Path | None:
        return self.ctx.workdir

    @property
    def stage_params(self) -> dict[str, Any]:
        return self.ctx.stage_params

    def session(self, path: str | None = None, **device_options: Any) -> Session:
        return self.ctx.session(path, **device_options)

    def part(self, name: str) -> "Recorder":
        """A recorder for one part of this one's work (a thread, a model, a reset scope); `take` merges it."""
        return Recorder(self.ctx, self.params, f"{self.label}{name}: ")

    def take(self, part: "Recorder") -> None:
        prefix = part.label.removeprefix(self.label)
        self.checks += [check | {"name": f"{prefix}{check['name']}"} for check in part.checks]

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append({"name": name, "passed": bool(passed), "detail": detail})
        self.log(f"{'PASS' if passed else 'FAIL'} {self.label}{name}: {detail}")
        return bool(passed)

    def log(self, line: str) -> None:
        self.ctx.log(line)

    def progress(self, percent: float, text: str) -> None:
        self.ctx.progress(percent, text)

    def file_path(self, name: str) -> Path | None:
        """Where a produced file goes (next to the result), or None when the job writes no files."""
        if self.ctx.workdir is None:
            return None
        prefix = self.label.removesuffix(": ").replace(": ", "-").replace(" ", "-")
        return self.ctx.workdir / (f"{prefix}-{name}" if prefix else name)

    def add_file(self, path: Path) -> None:
        self.ctx.files.append(path.name)

    def fail_with_code(self, code: ErrorCode) -> None:
        """Record the runtime code that ended the stage."""
        self.metrics["error_code"] = int(code)
        self.metrics["error_name"] = code.name


def open_checked_session(ctx: JobContext, rec: Recorder) -> Session | None:
    """Validate the package, check it against the device, load and configure it, each step a check.

    On a failure the stage ends there with a fail verdict and the runtime's code in its metrics.
    """
    path = ctx.job.calbin
    if path is None:
        rec.check("calbin_valid", False, "the job names no package")
        return None
    rec.progress(2, "validating calbin")
    errors = [f for f in ctx.validation(path) if f.severity == "error"]
    detail = "; ".join(f"{f.code} at {f.field or '(package)'}: {f.message}" for f in errors[:5])
    if not rec.check("calbin_valid", not errors, detail or "no errors"):
        rec.fail_with_code(validation_error_code(errors))
        return None
    manifest = read_manifest(path)
    # A vendor-form package declares no ranges (the answer does); loading it below says why it cannot run here.
    if manifest["form"] != VENDOR_FORM:
        device = ctx.make_device()
        problems = compat.problems(manifest, device.target())
        detail = "; ".join(p.message for p in problems) or f"device {device.target()} is inside every range"
        if not rec.check("compatibility", not problems, detail):
            rec.fail_with_code(problems[0].code)
            return None
    rec.progress(5, "loading calbin")
    try:
        calbin = ctx.load(path)
        device = ctx.device_for(calbin)
        handle = device.configure(calbin)
    except CalrtError as error:
        rec.check("load_and_configure", False, str(error))
        rec.fail_with_code(error.code)
        return None
    kv = device.create_kv_manager(calbin)
    chiplets = ", ".join(map(str, calbin.chiplets))
    rec.check(
        "load_and_configure",
        True,
        f"{calbin.name}: {kv.lanes} KV lanes x {kv.max_seq_len} tokens on chiplets {chiplets} ({calbin.layout})",
    )
    return Session(device, calbin, handle, kv)
