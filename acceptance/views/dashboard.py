"""The landing pages: the team's dashboard, and a vendor's view of their own questions, artifacts and runs."""

import datetime
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.views.decorators.cache import never_cache

from acceptance import stages
from acceptance.selectors import (
    ATTENTION_LABELS,
    AnswerElements,
    answers_elements,
    attention,
    promotions_blocked_since,
    question_worst_standings,
    run_reason,
    runs_in_progress,
    section_progress,
    target_list,
    vendor_overview,
)
from calculet import labels, pagecache, web
from evidence.grades import STATUSES
from evidence.selectors import capabilities_with_grades
from vendor import due
from vendor.access import is_vendor_member, may_approve_moves, may_see_all, user_organisation
from vendor.selectors import due_counts, due_soon_days

LIVE_RUN_LIMIT = 50
BLOCKED_LIMIT = 50
BLOCKED_WINDOW = datetime.timedelta(days=7)


@never_cache
@login_required
def dashboard(request):
    """The team's front page; a vendor lands on their organisation's questions instead. Not kept by the
    browser, as no page is (`web.page_for`)."""
    if is_vendor_member(request.user):
        return redirect("vendor-home")
    return _team_dashboard(request)


def _runs_in_progress_context():
    runs = list(runs_in_progress()[:LIVE_RUN_LIMIT])
    return {"live_runs": runs, "runs_active": bool(runs)}


@web.page_for(may_see_all)
def _team_dashboard(request):
    if web.wants_partial(request):
        return web.render_page(request, "acceptance/dashboard.html", _runs_in_progress_context(), partial="live-runs")
    data_version = pagecache.data_version()  # before anything the cached parts show is read
    # The window starts on a whole minute, so the blocked attempts it shows follow from the data and the minute.
    blocked_since = (timezone.now() - BLOCKED_WINDOW).replace(second=0, microsecond=0)
    # What the cached parts show is read only when a part is rendered, not when it comes from the cache.
    context = {
        "data_version": data_version,
        "today": timezone.localdate(),
        "blocked_since": blocked_since,
        "attention_counts": SimpleLazyObject(_attention_counts),
        "sections": SimpleLazyObject(section_progress),
        "due_counts": SimpleLazyObject(lambda: list(due_counts(user=request.user).items())),
        "due_soon_days": due_soon_days(),
        "state_choices": labels.choices("state"),
        "positions": stages.POSITIONS,
        "capabilities": SimpleLazyObject(lambda: capabilities_with_grades(user=request.user)),
        "statuses": STATUSES,
        "blocked": SimpleLazyObject(lambda: list(promotions_blocked_since(blocked_since)[:BLOCKED_LIMIT])),
        "targets": target_list(),
        "can_manage_targets": may_approve_moves(request.user),
        "health_check_every_runs": settings.ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS,
        "health_check_every_hours": settings.ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS,
        **_runs_in_progress_context(),
    }
    return web.render_page(request, "acceptance/dashboard.html", context, nav="dashboard")


def _attention_counts() -> list[tuple[str, str, int]]:
    counts = attention().counts
    return [(kind, label, counts[kind]) for kind, label in ATTENTION_LABELS.items()]


@dataclass(frozen=True)
class VendorQuestionRow:
    """A question on a vendor's landing page: what its row shows, its due status and chain standing, and its
    latest answer's revision and section 13 elements (both None: not answered yet)."""

    code: str
    question: str
    state: str
    due_date: datetime.date | None
    due_status: str
    position_label: str
    answer_revision: int | None
    section13: AnswerElements | None


@dataclass(frozen=True)
class VendorRunRow:
    """One of a vendor's latest runs on their landing page, its reason in the reader's language
    (`run_reason`: composed again from calculet's findings when they compose it, otherwise as stored)."""

    pk: int
    question_code: str
    stage: str
    target_name: str
    state: str
    progress: float
    reason: str


@web.page_for(is_vendor_member)
def vendor_home(request):
    """A vendor's view: the questions put to their organisation (overdue and due-soon ones marked), their
    answers, artifacts and runs."""
    overview = vendor_overview(user=request.user)
    today, soon_days = timezone.localdate(), due_soon_days()
    elements = answers_elements([answer for _question, answer in overview["questions"] if answer])
    standings = question_worst_standings()
    rows = [
        VendorQuestionRow(
            code=question.code,
            question=question.question,
            state=question.state,
            due_date=question.due_date,
            due_status=due.due_status(question.due_date, question.state, today, soon_days),
            position_label=stages.standing_label(standings.get(question.pk)),
            answer_revision=answer.revision if answer else None,
            section13=elements[answer.pk] if answer else None,
        )
        for question, answer in overview["questions"]
    ]
    runs = [
        VendorRunRow(
            pk=run.pk,
            question_code=run.chain.question.code,
            stage=run.stage,
            target_name=run.target.name,
            state=run.state,
            progress=run.progress,
            reason=run_reason(run)[0],
        )
        for run in overview["runs"]
    ]
    context = {"organisation": user_organisation(request.user), **overview, "questions": rows, "runs": runs}
    return web.render_page(request, "acceptance/vendor-home.html", context, nav="vendor")
