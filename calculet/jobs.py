"""When periodic jobs last ran: each job records its end, the health checks read how long ago that was."""

import datetime

from django.utils import timezone

from calculet.models import JobRun


def job_finished(name: str) -> None:
    JobRun.objects.update_or_create(name=name, defaults={"finished_at": timezone.now()})


def job_last_finished(name: str) -> datetime.datetime | None:
    return JobRun.objects.filter(name=name).values_list("finished_at", flat=True).first()


def job_staleness(name: str, *, stale_after: float, now: datetime.datetime | None = None) -> str | None:
    """Why the job `name` looks stopped (it never finished, or last finished more than `stale_after` seconds
    ago, or as far in the future), or None while it runs on time."""
    finished_at = job_last_finished(name)
    if finished_at is None:
        return f"the {name} has not run yet"
    age = ((now or timezone.now()) - finished_at).total_seconds()
    if age < -stale_after:
        # A finish in the future: the clock that recorded it runs ahead of this one, and every minute it does
        # would keep a stopped job looking on time.
        return (
            f"the {name} last finished {-age:.0f} s in the future (at {finished_at:%Y-%m-%d %H:%M:%S} UTC): "
            "the clocks of its worker and of this host disagree by more than "
            f"{stale_after:g} s"
        )
    if age > stale_after:
        return (
            f"the {name} last finished {age:.0f} s ago (at {finished_at:%Y-%m-%d %H:%M:%S} UTC), "
            f"more than {stale_after:g} s"
        )
    return None
