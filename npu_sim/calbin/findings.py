"""What validation reports, and the error raised when a package cannot be read at all."""

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # "error" or "warning"
    field: str  # `file:key` in a text file ("model_memory_reserved_info.txt:device_memory_required"), or a member name
    message: str
    line: int | None = None  # the line of a text file the finding points at

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CalbinError(Exception):
    """The package cannot be read at all; `code` is the finding code validation reports for it."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)
