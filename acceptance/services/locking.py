"""The one lock order of every service that writes (docs/acceptance.md, "Lock order"):

    target → question → chain → run → capability → the row a service changes alone → the audit head

A transaction takes the rows it needs in this order and may skip any, never go back: a service holding a run
never waits for its question, and nothing waits for another row while holding the audit head, which every
audit row takes last (`calculet.audit`). Two transactions that both follow the order cannot deadlock.
"""

from acceptance.models import Chain, Run, Target
from calculet.db import lock_rows
from vendor.models import Question


def question_lock(question_id: int) -> Question:
    return lock_rows(Question.objects).select_related("organisation").get(pk=question_id)


def run_lock(run_id: int, *, skip_locked: bool = False) -> Run | None:
    """Lock a run after what comes before it in the order: a chain run's question and chain, a health run's
    target (its verdict writes the target's health). None when the run does not exist, or, with
    `skip_locked`, when another transaction holds it."""
    found = Run.objects.filter(pk=run_id).values("chain_id", "chain__question_id", "target_id").first()
    if found is None:
        return None
    if found["chain_id"] is not None:
        question_lock(found["chain__question_id"])
        lock_rows(Chain.objects).get(pk=found["chain_id"])
    else:
        lock_rows(Target.objects).get(pk=found["target_id"])
    return lock_rows(Run.objects, skip_locked=skip_locked).select_related("target", "answer").filter(pk=run_id).first()
