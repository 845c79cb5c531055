"""The server's API as the agent calls it, with the standard library only (urllib)."""

import hashlib
import json
import queue
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from calculet_agent import __version__

TIMEOUT_SECONDS = 60
# A download holds RECEIVE_BUFFERS blocks of RECEIVE_BYTES in memory at most, whatever the input's size.
# 128 KiB rather than 1 MiB: each block is written into the page cache in one copy, and blocks of 512 KiB and
# more cost two to four times the CPU there on the bench's host (docs/performance.md, "Agent input fetch").
RECEIVE_BYTES = 128 * 1024
RECEIVE_BUFFERS = 4
# Reading back the bytes a resumed download already holds.
BLOCK_BYTES = 1024 * 1024


class RefusedError(Exception):
    """The server refused the call (4xx): retrying it unchanged cannot help. `status` and the server's words."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class UnreachableError(Exception):
    """No answer, or a 5xx: the server may be restarting; the call can be tried again."""


@dataclass
class Response:
    status: int
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body) if self.body else {}


def _message(body: bytes) -> str:
    try:
        errors = json.loads(body).get("errors", [])
        return "; ".join(f"{e.get('field') or ''}: {e.get('message')}".lstrip(": ") for e in errors) or body.decode()
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:500]


class Client:
    def __init__(self, server: str, target_token: str):
        self.base = server.rstrip("/") + "/api/v1/agent/"
        self.target_token = target_token

    def _call(self, method: str, path: str, *, auth: str, body: bytes | None = None, headers: dict | None = None):
        request = urllib.request.Request(self.base + path, data=body, method=method)
        request.add_header("Authorization", auth)
        request.add_header("User-Agent", f"calculet-agent/{__version__}")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)
        except urllib.error.HTTPError as error:
            text = error.read()
            if error.code >= 500:
                raise UnreachableError(f"{error.code}: {_message(text)}") from error
            raise RefusedError(error.code, _message(text)) from error
        except (urllib.error.URLError, OSError) as error:
            raise UnreachableError(str(error)) from error

    def post(self, path: str, payload: dict | bytes, *, run_token: str | None = None, headers=None) -> Response:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        auth = f"Run {run_token}" if run_token else f"Target {self.target_token}"
        try:
            with self._call("POST", path, auth=auth, body=body, headers=headers) as answer:
                return Response(answer.status, answer.read())
        except (OSError, ValueError) as error:  # the connection was cut while the answer was read
            raise UnreachableError(str(error)) from error

    def download(self, run: int, run_token: str, sha256: str, partial: Path) -> str:
        """Fetch the input into `partial`, resuming from the bytes it already holds (HTTP Range); returns the
        SHA-256 of the whole file, computed as it is written (the bytes already held are read once more)."""
        have = partial.stat().st_size if partial.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        digest = hashlib.sha256()
        try:
            answer = self._call("GET", f"runs/{run}/inputs/{sha256}/", auth=f"Run {run_token}", headers=headers)
        except RefusedError as error:
            if error.status != 416:
                raise
            answer = None  # the partial file already holds every byte
        if answer is None or answer.status == 206:
            with open(partial, "rb") as held:
                while block := held.read(BLOCK_BYTES):
                    digest.update(block)
        if answer is None:
            return digest.hexdigest()
        with answer, open(partial, "ab" if answer.status == 206 else "wb") as handle:
            try:
                _receive(answer, handle, digest)
            except OSError as error:
                raise UnreachableError(f"the download of {sha256} was cut: {error}") from error
        return digest.hexdigest()


def _receive(answer, handle, digest) -> None:
    """Receive each block and write it in this thread, and hash it in another: hashlib lets the GIL go for a
    large buffer, so hashing one block overlaps receiving the next. The blocks are a few buffers received
    into again and again (`read(n)` would copy every block once more); the hash takes them in order."""
    free: queue.Queue[memoryview] = queue.Queue()
    written: queue.Queue[tuple[memoryview, int] | None] = queue.Queue()  # None: no more blocks
    for _ in range(RECEIVE_BUFFERS):
        free.put(memoryview(bytearray(RECEIVE_BYTES)))

    def hash_blocks() -> None:
        while (block := written.get()) is not None:
            view, count = block
            digest.update(view[:count])
            free.put(view)

    hasher = threading.Thread(target=hash_blocks, name="calculet-agent-sha256", daemon=True)
    hasher.start()
    try:
        while count := answer.readinto(view := free.get()):
            handle.write(view[:count])
            written.put((view, count))
    finally:
        written.put(None)
        hasher.join()
