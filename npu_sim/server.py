"""A server-style scheduling loop on the virtual device, for the integration and soak stages.

Clients form a closed loop: each of `concurrency` clients sends a request, waits for its last token,
then sends the next. The server admits a waiting request when a KV lane is free and prefills it
alone (prefill and decode cannot share a call, R08), then runs one decode step over every active
sequence. Finished sequences free their KV at once. Time is the device's modelled clock, so a
token's time is when the client receives it, queueing included (not predicted_ms + prompt_ms, P03).
"""

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npu_sim.client import TIMEOUT_FACTOR, greedy, recover, run_call
from npu_sim.device import CallRecord, OutputBuffer, VirtualDevice
from npu_sim.errors import SERVICE_ERRORS, CalrtError, ErrorCode, ServiceAction
from npu_sim.kv import KvManager
from npu_sim.loaded_calbin import Calbin
from npu_sim.sampling import SamplingParams

# A retried request waits this long (modelled), doubling with each attempt.
BACKOFF_MS = 1.0


@dataclass
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    arrival_ms: float = 0.0
    tokens: list[int] = field(default_factory=list)
    token_ms: list[float] = field(default_factory=list)  # device time each token reached the client
    logits: list[np.ndarray] = field(default_factory=list)  # only when the loop records them
    error: ErrorCode | None = None
    finish_ms: float | None = None
    sampling: SamplingParams | None = None  # sample on the device (V17) instead of greedy on the host
    prefill_record: CallRecord | None = None
    host_sampling_s: float = 0.0  # measured: wall time of greedy choices made on the host
    attempts: int = 0  # runs again after a failed call (serve with retries)
    service_status: int | None = None  # what the client got when the request failed for good
    forced: list[int] | None = None  # decode inputs fed instead of the request's own tokens (a golden's)

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.tokens) >= self.max_new_tokens


@dataclass
class ServeTrace:
    requests: list[Request]
    prefill_calls: int = 0
    decode_calls: int = 0
    max_active: int = 0
    prefills_during_decode: int = 0  # prefills admitted while other sequences were mid-decode
    recoveries: list[str] = field(default_factory=list)
    retries: int = 0


def serve(
    device: VirtualDevice,
    calbin: Calbin,
    kv: KvManager,
    requests: list[Request],
    concurrency: int,
    record_logits: bool = False,
    on_finish: Callable[[Request], None] | None = None,
    retries: int = 0,
) -> ServeTrace:
    """Run every request to completion or failure; a failed call fails the requests in it, the
    device is recovered, and the loop goes on.

    With `retries`, a request whose code SERVICE_ERRORS maps to retry or recover runs again from its
    prompt, up to that many times (after a modelled back-off for retry); what is not retried fails with
    its mapped HTTP status.
    """
    trace = ServeTrace(requests)
    prefill, decode = calbin.model_of_type("llm_prefill"), calbin.model_of_type("llm_decode")
    timing = device.handle_of(calbin).timing
    unsent = deque(requests)
    waiting: deque[Request] = deque()
    active: dict[int, Request] = {}

    def send_next() -> None:
        if unsent:
            request = unsent.popleft()
            request.arrival_ms = device.clock_ms
            waiting.append(request)

    def finish(request: Request) -> None:
        request.finish_ms = device.clock_ms
        active.pop(request.rid, None)
        if request.rid in kv.sequences():
            kv.free(request.rid)
        if on_finish:
            on_finish(request)
        send_next()

    def give_up_or_retry(request: Request, code: ErrorCode) -> None:
        service = SERVICE_ERRORS[code]
        if request.attempts < retries and service.action in (ServiceAction.RETRY, ServiceAction.RECOVER):
            request.attempts += 1
            trace.retries += 1
            active.pop(request.rid, None)
            if request.rid in kv.sequences():
                kv.free(request.rid)
            request.tokens.clear()
            request.token_ms.clear()
            request.logits.clear()
            waiting.appendleft(request)
            if service.action == ServiceAction.RETRY:
                device.advance(BACKOFF_MS * 2 ** (request.attempts - 1))
            return
        request.error = code
        request.service_status = service.http_status
        finish(request)

    def fail(batch: list[Request], error: CalrtError) -> None:
        for request in batch:
            give_up_or_retry(request, error.code)
        trace.recoveries += recover(device, calbin, error.code)
        # A device reset empties the KV cache: sequences that were not in the failed call go too.
        for request in [r for r in active.values() if r.rid not in kv.sequences()]:
            give_up_or_retry(request, error.code)

    for _ in range(concurrency):
        send_next()
    while waiting or active:
        if waiting and kv.can_allocate(waiting[0].rid, len(waiting[0].prompt)):
            request = waiting.popleft()
            trace.prefills_during_decode += bool(active)
            trace.prefill_calls += 1
            try:
                start = kv.allocate(request.rid, len(request.prompt))
                timeout = TIMEOUT_FACTOR * timing.prefill_call(len(request.prompt), start).total_ms
                buffer = run_call(device, kv, prefill, {request.rid: request.prompt}, timeout, request.sampling)
            except CalrtError as error:
                fail([request], error)
            else:
                active[request.rid] = request
                request.prefill_record = buffer.record
                _deliver(device, request, buffer, record_logits)
                if request.done:
                    finish(request)
        elif waiting and not active:
            fail([waiting.popleft()], CalrtError(ErrorCode.KV_NO_CAPACITY, "the prompt does not fit a KV lane"))
        if not active:
            continue
        batch = list(active.values())[: decode.batch]
        trace.max_active = max(trace.max_active, len(batch))
        trace.decode_calls += 1
        try:
            contexts = [kv.allocate(r.rid, 1) + 1 for r in batch]
            timeout = TIMEOUT_FACTOR * timing.decode_call(contexts).total_ms
            sampling = {r.rid: r.sampling for r in batch if r.sampling is not None}
            inputs = {r.rid: [r.forced[len(r.tokens) - 1] if r.forced else r.tokens[-1]] for r in batch}
            buffer = run_call(device, kv, decode, inputs, timeout, sampling or None)
        except CalrtError as error:
            fail(batch, error)
            continue
        for request in batch:
            _deliver(device, request, buffer, record_logits)
            if request.done:
                finish(request)
    return trace


def _deliver(device: VirtualDevice, request: Request, buffer: OutputBuffer, record: bool) -> None:
    if request.sampling is not None:
        request.tokens.append(buffer.token_ids[request.rid])
    else:
        logits = buffer.logits[request.rid]
        started = time.perf_counter()
        request.tokens.append(greedy(logits))
        request.host_sampling_s += time.perf_counter() - started
        if record or request.forced is not None:
            request.logits.append(logits)
    request.token_ms.append(device.clock_ms)
