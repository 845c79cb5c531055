"""Reporting while a run works: its output and progress streamed into the run, and its lease renewed, every
ACCEPTANCE_RUN_HEARTBEAT_SECONDS — on the condition that the run is still `running` with this attempt."""

import codecs
import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from acceptance import stages
from acceptance.models import Run

logger = logging.getLogger(__name__)

TAIL_CHARS = 8192
PROGRESS_PREFIX = "PROGRESS "


class RunReporter:
    """A run's output and progress as the stage produces them, written with each lease renewal."""

    def __init__(self, run: Run):
        self.run_id = run.pk
        self.attempt = run.attempt
        self.lock = threading.Lock()
        self.pending: list[str] = []
        self.pending_bytes = 0
        self.logged_chars = len(run.log)
        self.tail = run.log_tail
        self.truncation_noted = False
        self.progress: float | None = None
        self.progress_text = ""
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        self.stderr_line = ""
        self.stderr_tail = ""
        self.lost = False
        self.final: dict | None = None
        # The attempt's steps as they took, in seconds (`Run.timing`), and when the verdict's post began.
        self.timing: dict[str, float] = {}
        self.post_started: float | None = None
        # Until when this attempt holds the run, as last written: no other attempt may take it before.
        self.lease_expires_at = run.lease_expires_at

    def output(self, stream: str, chunk: bytes) -> None:
        text = self.decoders[stream].decode(chunk).replace("\x00", "\ufffd")
        with self.lock:
            self.pending.append(text)
            self.pending_bytes += len(chunk)
            if stream == "stderr":
                self.stderr_tail = (self.stderr_tail + text)[-16384:]
                lines = (self.stderr_line + text).split("\n")
                self.stderr_line = lines.pop()[-4096:]
                for line in lines:
                    self._progress_line(line)

    def _progress_line(self, line: str) -> None:
        if not line.startswith(PROGRESS_PREFIX):
            return
        parts = line[len(PROGRESS_PREFIX) :].split(" ", 1)
        try:
            value = float(parts[0])
        except ValueError:
            return
        if value == value:  # not NaN
            self.progress = min(100.0, max(0.0, value))
            self.progress_text = (parts[1] if len(parts) > 1 else "").strip()[:200]

    def note(self, message: str) -> None:
        text = f"[calculet] {message}\n"
        with self.lock:
            self.pending.append(text)
            self.pending_bytes += len(text.encode())

    def set_progress(self, value: float, text: str) -> None:
        with self.lock:
            self.progress, self.progress_text = value, text[:200]

    def _take(self) -> dict:
        """The fields to add to the run since the last write; the caller writes them or puts them back."""
        with self.lock:
            text = "".join(self.pending)
            self.pending.clear()
            written_bytes, self.pending_bytes = self.pending_bytes, 0
            room = max(0, settings.ACCEPTANCE_RUN_LOG_MAX_CHARS - self.logged_chars)
            fit = text[:room]
            if len(text) > room and not self.truncation_noted:
                fit += "\n[calculet] log truncated here; the latest output is in the log tail\n"
                self.truncation_noted = True
            self.logged_chars += len(fit)
            self.tail = (self.tail + text)[-TAIL_CHARS:]
            return {
                "log_append": fit,
                "log_tail": self.tail,
                "log_bytes": written_bytes,
                "progress": self.progress,
                "progress_text": self.progress_text,
            }

    def flush(self) -> bool:
        """Renew the lease and write what is new. False once the run is no longer this attempt's."""
        fields = self._take()
        lease_expires_at = timezone.now() + timedelta(seconds=settings.ACCEPTANCE_RUN_LEASE_SECONDS)
        updates = {
            "lease_expires_at": lease_expires_at,
            "log_tail": fields["log_tail"],
            "log_bytes": F("log_bytes") + fields["log_bytes"],
        }
        if fields["log_append"]:
            updates["log"] = Concat(F("log"), Value(fields["log_append"]))
        if fields["progress"] is not None:
            updates["progress"] = fields["progress"]
            updates["progress_text"] = fields["progress_text"]
        held = Run.objects.filter(pk=self.run_id, attempt=self.attempt, state=stages.RUNNING).update(**updates)
        if held:
            self.lease_expires_at = lease_expires_at
        else:
            self.lost = True
        return bool(held)

    def final_fields(self, run: Run) -> list[str]:
        """Put what is still unwritten onto the locked `run`; returns the fields changed. The same fields each
        time, so a verdict transaction tried again writes the output once."""
        if self.final is None:
            self.final = self._take()
            self.final["timing"] = {key: round(value, 3) for key, value in self.timing.items()}
            if self.post_started is not None:
                self.final["timing"]["post"] = round(time.monotonic() - self.post_started, 3)
        fields = self.final
        run.log += fields["log_append"]
        run.log_tail = fields["log_tail"]
        run.log_bytes += fields["log_bytes"]
        run.timing = {**run.timing, **fields["timing"]}
        changed = ["log", "log_tail", "log_bytes", "timing"]
        if fields["progress"] is not None:
            run.progress, run.progress_text = fields["progress"], fields["progress_text"]
            changed += ["progress", "progress_text"]
        return changed


class LeaseKeeper(threading.Thread):
    """Renews the run's lease and streams its output while the stage works, on its own connection."""

    def __init__(self, reporter: RunReporter):
        super().__init__(name=f"lease-run-{reporter.run_id}", daemon=True)
        self.reporter = reporter
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(settings.ACCEPTANCE_RUN_HEARTBEAT_SECONDS):
                try:
                    if not self.reporter.flush():
                        return
                except Exception:  # a database hiccup: the next renewal may succeed before the lease runs out
                    logger.exception("renewing the lease of run %s failed", self.reporter.run_id)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join()
