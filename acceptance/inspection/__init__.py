"""Static checks of what a vendor delivers, each a pure function over files on disk (no ORM, no settings).

Each check returns a report: the `findings` (what is wrong, each with a code, a message that names the
part, and details) and `checked` (what was looked at, JSON-ready), so a passing report still says what
it rests on. A report passes when it has no findings.

- `sdk.check_sdk`, `sdk.sdk_library`, `sdk.build_example`: headers, a library and their versions (seed
  section 2's `nm -D | c++filt`).
- `oci.check_oci_archive`: an OCI image archive, its digests, SBOM and licence.
- `schema.check_schema`: a vendor's JSON Schema against the simulator's metadata or trace and the seed's defects.
- `reproduce.reproduce`: a build command run twice in fresh sandboxes, its outputs compared.
- `delivered.check_built_is_delivered`: a build's outputs hold the delivered image or package, by digest.
"""

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.findings

    def add(self, code: str, message: str, **detail: Any) -> None:
        self.findings.append(Finding(code, message, detail))

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "findings": [asdict(f) for f in self.findings], "checked": self.checked}
