"""Serving from several threads at once on one device: the parallel-mode and two-model probes."""

import threading
from collections.abc import Callable, Sequence

from npu_sim.errors import ErrorCode
from npu_sim.protocol.context import Recorder, Session

FIRST_JOB = 0  # the sequence id of each thread's first job, freed before its routine starts


def serve_together(
    run: Recorder, served: Sequence[tuple[str, Session]], routine: Callable[[Recorder, Session], object]
) -> list[Recorder]:
    """`routine(rec, session)` for each (label, session), each in its own thread; their checks come back into
    `run` under their labels.

    Each thread first submits one prefill and meets the others before waiting for it, so the device has held
    a job from every thread at once (its max_queue_depth shows it), whatever the threads' timing after that.
    """
    recorders = [run.part(label) for label, _ in served]
    all_submitted = threading.Barrier(len(served), timeout=60)
    errors: list[BaseException] = []

    def serve(rec: Recorder, session: Session) -> None:
        try:
            session.kv.allocate(FIRST_JOB, 3)
            prefill = session.calbin.model_of_type("llm_prefill")
            first = session.device.infer(prefill, session.kv, {FIRST_JOB: [1, 2, 3]})
            all_submitted.wait()
            code = first.wait(1e9)
            rec.check(
                "first_job_done", code == ErrorCode.SUCCESS, f"the job submitted alongside the others: {code.name}"
            )
            session.kv.free(FIRST_JOB)
            routine(rec, session)
        except BaseException as error:  # the probe reports it; a thread must not swallow it
            all_submitted.abort()
            errors.append(error)

    threads = [
        threading.Thread(target=serve, args=(rec, session)) for rec, (_, session) in zip(recorders, served, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    for rec in recorders:
        run.take(rec)
    return recorders
