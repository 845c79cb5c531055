"""The question list with in-place edits, and the question page with its answers, artifacts and live chain."""

import datetime
from dataclasses import dataclass
from urllib.parse import urlsplit

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.db.models import F
from django.http import Http404, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_http_methods, require_POST

from acceptance import stages
from acceptance.models import Run
from acceptance.protocol import tolerance_rule
from acceptance.selectors import (
    ATTENTION_LABELS,
    NOBODY,
    SEARCH_MAX_CHARS,
    AnswerElements,
    QuestionFilters,
    answers_claims,
    answers_elements,
    question_chain_rows,
    question_deliverables,
    question_positions,
    question_standings,
    question_worst_standings,
    questions_filter,
)
from acceptance.services import run_rerun
from acceptance.views.forms import QuestionBulkForm, QuestionRowForm, QuestionTicketForm
from acceptance.views.plots import figure_html, run_plots
from calculet import labels, pagecache, web
from calculet.errors import DomainError
from calculet.web import errors_by_field
from evidence.models import Capability
from evidence.selectors import question_capabilities
from vendor import due
from vendor import selectors as vendor_selectors
from vendor.access import (
    is_vendor_member,
    may_act_as_pm,
    may_discuss,
    may_open_pages,
    may_see_all,
    object_for_user,
)
from vendor.inputs import COMMENT_MAX_CHARS, QuestionChanges
from vendor.models import Answer, Deliverable, Question
from vendor.services.questions import question_bulk_preview, question_bulk_update, question_update

PAGE_SIZE = 25
SORTS = {
    "code": (F("number").asc(),),
    "priority": (F("priority").asc(), F("number").asc()),
    "due": (F("due_date").asc(nulls_last=True), F("number").asc()),
    "-due": (F("due_date").desc(nulls_last=True), F("number").asc()),
    "state": (F("state").asc(), F("number").asc()),
    "assignee": (F("assignee__username").asc(nulls_last=True), F("number").asc()),
    "-updated": (F("updated_at").desc(), F("number").asc()),
}
ROW_FIELDS = frozenset({"assignee", "priority", "due_date", "state"})
TICKET_FIELDS = ROW_FIELDS | {"organisation", "state_reason"}
SORT_CHOICES = [
    ("code", _("Code")),
    ("priority", _("Priority")),
    ("due", _("Due date, soonest first")),
    ("-due", _("Due date, latest first")),
    ("state", _("State")),
    ("assignee", _("Assignee")),
    ("-updated", _("Last changed first")),
]


class QuestionFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=SEARCH_MAX_CHARS, label=_("Text"))
    section = forms.ChoiceField(required=False, label=_("Section"))
    state = forms.ChoiceField(required=False, label=_("State"))
    priority = forms.ChoiceField(required=False, label=_("Priority"))
    due = forms.ChoiceField(required=False, label=_("Due"))
    organisation = forms.ChoiceField(required=False, label=_("Organisation"))
    assignee = forms.ChoiceField(required=False, label=_("Assignee"))
    stage = forms.ChoiceField(required=False, label=_("Chain stage"))
    theme = forms.ChoiceField(required=False, label=_("Blocks"))
    attention = forms.ChoiceField(required=False, label=_("Needs"))
    sort = forms.ChoiceField(required=False, label=_("Sort"))

    def __init__(self, data, *, sections, organisations, assignees):
        super().__init__(data)
        anything = [("", _("any"))]
        self.fields["section"].choices = anything + [(s.code, f"{s.code} {s.title}") for s in sections]
        self.fields["state"].choices = anything + labels.choices("state")
        self.fields["priority"].choices = anything + labels.choices("priority")
        self.fields["due"].choices = anything + labels.choices("due")
        self.fields["organisation"].choices = anything + [(o.slug, o.name) for o in organisations]
        self.fields["assignee"].choices = (
            anything + [(NOBODY, _("nobody"))] + [(u.username, u.username) for u in assignees]
        )
        self.fields["stage"].choices = [
            *anything,
            ("none", _("no chain yet")),
            *((position, labels.label("stage", position)) for position in stages.POSITIONS),
        ]
        themes = sorted({s.blocks for s in sections if s.blocks})
        self.fields["theme"].choices = anything + [(theme, theme) for theme in themes]
        self.fields["attention"].choices = anything + list(ATTENTION_LABELS.items())
        self.fields["sort"].choices = SORT_CHOICES

    def selects(self) -> list[tuple[str, str, str, list]]:
        """(name, label, chosen value, choices) of each select, for the template to write out."""
        return [
            (name, str(field.label), str(self.data.get(name, "")), field.choices)
            for name, field in self.fields.items()
            if isinstance(field, forms.ChoiceField)
        ]

    def filters(self) -> QuestionFilters:
        """The valid filters, as the selector takes them; call only after `is_valid()` held."""
        data = self.cleaned_data
        return QuestionFilters(
            text=data.get("q", "").strip(),
            section=data.get("section", ""),
            state=data.get("state", ""),
            priority=data.get("priority", ""),
            due=data.get("due", ""),
            organisation=data.get("organisation", ""),
            assignee=data.get("assignee", ""),
            stage=data.get("stage", ""),
            theme=data.get("theme", ""),
            attention=data.get("attention", ""),
        )

    def ordering(self) -> tuple:
        return SORTS[self.cleaned_data.get("sort") or "code"]


@dataclass(frozen=True)
class RowCell:
    """A cell of the list between the question and its chain: its value as shown; `field` when a PM edits it
    in place (the value then fetches its control, `label` naming it), `state` when it shows as a state badge."""

    text: str
    field: str = ""
    label: str = ""
    state: str = ""
    badge: str = ""


def _row_texts() -> dict:
    """The words every row repeats, translated once per list rather than once per row."""
    return {
        "state": dict(labels.choices("state")),
        "priority": dict(labels.choices("priority")),
        "due": dict(labels.choices("due")),
        "stage": dict(labels.choices("stage")),
        "fields": {"state": str(_("State")), "priority": str(_("Priority")), "assignee": str(_("Assignee"))}
        | {"due_date": str(_("Due date"))},
    }


@dataclass(frozen=True)
class QuestionRow:
    """A row of the list as the template shows it: the question's own fields it needs, its chains' worst
    standing, due status, who may take it, and its cells as text (prepared here, with `_row_texts`: the list
    renders 25 rows of them)."""

    code: str
    section_code: str
    text: str
    state: str
    priority: str
    due_date: datetime.date | None
    due_status: str
    assignee: User | None
    assignee_name: str
    organisation_name: str
    contacts: list
    standing: str
    position_label: str
    detail_url: str
    edit_url: str
    tick_label: str
    cells: list[RowCell]


def _question_row(question, *, standings: dict[int, tuple[str, str]], people, today, texts: dict) -> QuestionRow:
    code = question.code
    standing = standings.get(question.pk)
    due_status = due.due_status(question.due_date, question.state, today, vendor_selectors.due_soon_days())
    assignee_name = question.assignee.username if question.assignee else ""
    organisation_name = question.organisation.name if question.organisation else ""
    fields = texts["fields"]
    due_badge = (
        format_html('<span class="badge due due-{}">{}</span>', due_status, texts["due"][due_status])
        if due_status
        else ""
    )
    return QuestionRow(
        code=code,
        section_code=question.section.code,
        text=question.question,
        state=question.state,
        priority=question.priority,
        due_date=question.due_date,
        due_status=due_status,
        assignee=question.assignee,
        assignee_name=assignee_name,
        organisation_name=organisation_name,
        contacts=people.for_organisation(question.organisation_id),
        standing=f"{standing[0]}-{standing[1]}" if standing else "",
        position_label=stages.standing_label(standing),
        detail_url=reverse("question-detail", args=[code]),
        edit_url=reverse("question-edit", args=[code]),
        tick_label=_("Tick %(code)s") % {"code": code},
        cells=[
            RowCell(texts["state"][question.state], "state", f"{fields['state']} {code}", question.state),
            RowCell(texts["priority"][question.priority], "priority", f"{fields['priority']} {code}"),
            RowCell(assignee_name or "—", "assignee", f"{fields['assignee']} {code}"),
            RowCell(organisation_name or "—"),
            RowCell(
                question.due_date.isoformat() if question.due_date else "—",
                "due_date",
                f"{fields['due_date']} {code}",
                badge=due_badge,
            ),
        ],
    )


def _row_choices() -> dict:
    return {"state_choices": labels.choices("state"), "priority_choices": labels.choices("priority")}


def _question_list_context(request, params: QueryDict):
    sections = list(vendor_selectors.section_list())
    people = vendor_selectors.assignees()
    organisations = list(vendor_selectors.vendor_organisations())
    form = QuestionFilterForm(params, sections=sections, organisations=organisations, assignees=people.everyone())
    today = timezone.localdate()

    def rows_page():
        standings = question_standings()
        positions, worst = question_positions(standings), question_worst_standings(standings)
        questions = vendor_selectors.question_list(user=request.user)
        # Filters the page cannot apply are shown as errors, and nothing is listed until they are fixed.
        if form.is_valid():
            questions = questions_filter(questions, form.filters(), positions).order_by(*form.ordering())
        else:
            questions = questions.none()
        page = Paginator(questions, PAGE_SIZE).get_page(params.get("page"))
        texts = _row_texts()
        page.object_list = [
            _question_row(question, standings=worst, people=people, today=today, texts=texts) for question in page
        ]
        return page

    return {
        "form": form,
        "filter_selects": form.selects(),
        # Read when the rows are rendered, not when they come from the cache (`question_list`).
        "page": SimpleLazyObject(rows_page),
        "today": today,
        "params": params,
        "list_url": f"{request.path}?{params.urlencode()}" if params else request.path,
        "assignees": people.team,
        "people": people,
        **_row_choices(),
        "search_max_chars": SEARCH_MAX_CHARS,
        "can_edit": may_act_as_pm(request.user),
        "sort": form.cleaned_data.get("sort") if form.is_valid() else "",
    }


@web.page_for(may_open_pages)
def question_list(request):
    if is_vendor_member(request.user):  # a vendor's own questions are on their landing page
        return redirect("vendor-home")
    data_version = pagecache.data_version()  # before anything the cached rows show is read
    context = {**_question_list_context(request, request.GET), "data_version": data_version}
    status = 400 if context["form"].errors and not web.wants_partial(request) else 200
    return web.render_page(
        request, "acceptance/question-list.html", context, partial="question-table", nav="questions", status=status
    )


def _safe_next(request, fallback: str) -> str:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


def _row_context(question, **extra) -> dict:
    """What a row of the list (or one of its cells' controls) needs: the row, and the choices of its controls."""
    people = vendor_selectors.assignees()
    row = _question_row(
        question,
        standings=question_worst_standings(),
        people=people,
        today=timezone.localdate(),
        texts=_row_texts(),
    )
    return {"question": row, "assignees": people.team, **_row_choices(), "can_edit": True, **extra}


def _refused_field(error: DomainError, fields: frozenset) -> str:
    """Where a service's refusal is shown: beside the field it names when the form has it, else for the form."""
    return error.field if error.field in fields else "form"


@require_http_methods(["GET", "POST"])
@web.page_for(may_act_as_pm)
def question_edit(request, code):
    """GET `?field=`: one cell's control, fetched when the cell is clicked (the list renders values, not 100
    controls). POST: apply a row's change (assignee, priority, due date or state) through the question service."""
    question = question_page(request, code)
    if request.method == "GET":
        field = request.GET.get("field", "")
        if field not in ROW_FIELDS:
            raise Http404
        context = _row_context(question, field=field, errors={})
        return web.render_page(request, "acceptance/question-list.html", context, partial="question-control")
    form = QuestionRowForm(request.POST, question=question)
    changes = form.changes() if form.is_valid() else QuestionChanges()
    errors = errors_by_field(form)
    if changes.given() and not errors:
        try:
            question_update(actor=request.user, question=question, changes=changes)
        except DomainError as error:
            # The row has no reason box: a missing reason is shown under the state it is needed for.
            errors["state" if error.field == "state_reason" else _refused_field(error, ROW_FIELDS)] = error.message
        else:
            question = question_page(request, code)
    next_url = _safe_next(request, reverse("question-list"))

    def row() -> dict:
        return _row_context(question, errors=errors, saved=bool(changes.given()) and not errors, list_url=next_url)

    def whole_list() -> dict:
        # Without htmx the whole list comes back, with the errors beside the row that caused them.
        context = _question_list_context(request, QueryDict(urlsplit(next_url).query))
        return {**context, "row_errors": {question.code: errors}, "list_url": next_url}

    return web.answer_post(
        request,
        "acceptance/question-list.html",
        row,
        page_context=whole_list,
        partial="question-row",
        nav="questions",
        status=400 if errors else 200,
        redirect_to="" if errors else next_url,
    )


BULK_LABELS = {
    "assignee": _("Assignee"),
    "priority": _("Priority"),
    "due_date": _("Due date"),
    "state": _("State"),
    "state_reason": _("Reason"),
}


@dataclass(frozen=True)
class PreviewRow:
    """A ticked question in the bulk edit's preview: why it refuses, or its changes as (field, before, after)
    in words."""

    code: str
    error: DomainError | None
    lines: list[tuple[str, str, str]]


def _preview_row(row) -> PreviewRow:
    def shown(field, value) -> str:
        if value is None or value == "":
            return "—"
        return labels.label(field, value) if field in ("priority", "state") else value

    before, after = row.before, row.after
    lines = [(BULK_LABELS[name], shown(name, before[name]), shown(name, after[name])) for name in row.changes]
    return PreviewRow(code=row.question.code, error=row.error, lines=lines)


@require_POST
@web.page_for(may_act_as_pm)
def question_bulk_edit(request):
    """Change the ticked questions' assignee, priority, due date or state: a first post shows what would
    change for confirmation, the confirming post (`confirm=yes`) changes all of them or none."""
    next_url = _safe_next(request, reverse("question-list"))
    codes = request.POST.getlist("code")
    questions = list(vendor_selectors.question_list(user=request.user).filter(code__in=codes))
    if len(questions) != len(set(codes)):
        raise Http404
    form = QuestionBulkForm(request.POST)
    valid = form.is_valid()
    errors = errors_by_field(form)
    bulk = {"codes": codes, "input": form.typed(), "errors": errors}
    done = ""
    if valid and request.POST.get("confirm") != "yes":
        try:
            preview = question_bulk_preview(actor=request.user, questions=questions, changes=form.changes())
        except DomainError as error:
            errors[_refused_field(error, ROW_FIELDS)] = error.message
        else:
            bulk["preview"] = [_preview_row(row) for row in preview]
            bulk["refused"] = any(row.error for row in preview)
    elif valid:
        try:
            changed = question_bulk_update(actor=request.user, questions=questions, changes=form.changes())
        except DomainError as error:
            errors[_refused_field(error, ROW_FIELDS)] = error.message
        else:
            done = ngettext("Changed %(count)d question.", "Changed %(count)d questions.", changed) % {"count": changed}
            bulk = {"done": done}
    return web.answer_post(
        request,
        "acceptance/question-list.html",
        lambda: (
            {**_question_list_context(request, QueryDict(urlsplit(next_url).query)), "bulk": bulk}
            | {"list_url": next_url}
        ),
        partial="question-table",
        nav="questions",
        status=400 if errors else 200,
        redirect_to=next_url if done else "",
        message=done,
    )


@dataclass(frozen=True)
class AnswerPanel:
    """An answer as the question page shows it: the row, section 13's elements as its reviews judged them, the
    capability it claims (None: none named), and its golden tolerances as the runner applies them."""

    answer: Answer
    section13: AnswerElements
    claimed_capability: Capability | None
    tolerance_rules: list[str]


def question_page_context(request, question, *, thread: dict | None = None):
    """The question page's context; `thread` is the discussion's when the caller has built it (a refused
    comment, an edit), so the thread is read once."""
    answers = vendor_selectors.answer_list(user=request.user, question=question)
    answers = list(answers.order_by("organisation__slug", "-revision"))
    elements, claims = answers_elements(answers), answers_claims(answers)
    panels = [
        AnswerPanel(
            answer=answer,
            section13=elements[answer.pk],
            claimed_capability=claims.get(answer.pk),
            tolerance_rules=[tolerance_rule(name, value) for name, value in answer.golden_tolerances.items()],
        )
        for answer in answers
    ]
    artifacts = {}
    for answer in answers:
        linked = [*answer.executable_assets.all(), *answer.golden_artifacts.all()]
        if answer.minimal_example_artifact:
            linked.append(answer.minimal_example_artifact)
        for artifact in linked:
            artifacts.setdefault(artifact.pk, artifact)
    sees_all = may_see_all(request.user)
    deliverables = question_deliverables(question)
    return {
        **_chain_context(question, request.user),
        **(thread if thread is not None else thread_context(request, question)),
        "question": question,
        "due_status": _due_status(question),
        "answers": panels,
        "artifacts": sorted(artifacts.values(), key=lambda artifact: (artifact.kind, artifact.version, artifact.pk)),
        "capabilities": question_capabilities(question, user=request.user) if sees_all else [],
        "deliverables": deliverables,
        # Alternatives still owed count once: one of them is what is owed.
        "owed_count": len({view.owed_as for view in deliverables if view.owed}),
        # Only a model package runs through the chain; the other kinds are checked statically or reviewed.
        "checked_without_chain": any(
            panel.section13.closes and panel.answer.deliverable and panel.answer.deliverable.kind != Deliverable.CALBIN
            for panel in panels
        ),
        "sees_all": sees_all,
        "can_edit": may_act_as_pm(request.user),
    }


def thread_context(request, question, *, form=None, errors=None, editing=None, edit_form=None, edit_errors=None):
    """The question's discussion as its page shows it: the thread, the form to add to it (with what was
    typed and why it was refused), and the comment being edited, if any."""
    can_comment = may_discuss(request.user)
    return {
        "comments": list(vendor_selectors.comment_list(user=request.user, question=question)),
        "can_comment": can_comment,
        "attachable": list(vendor_selectors.attachable_artifacts(user=request.user, question=question))
        if can_comment
        else [],
        "comment_form": form or {"body": "", "artifacts": []},
        "comment_errors": errors or {},
        "editing": editing,
        "edit_form": edit_form or {},
        "edit_errors": edit_errors or {},
        "body_max_chars": COMMENT_MAX_CHARS,
    }


def _ticket_context(question, errors=None, saved=False):
    people = vendor_selectors.assignees()
    return {
        "ticket_errors": errors or {},
        "ticket_saved": saved,
        "organisations": list(vendor_selectors.vendor_organisations()),
        "assignees": people.team,
        "contacts": people.for_organisation(question.organisation_id),
        "state_choices": labels.choices("state"),
        "priority_choices": labels.choices("priority"),
    }


def question_page(request, code) -> Question:
    return object_for_user(request.user, vendor_selectors.question_list(user=request.user), code=str(code).upper())


def _due_status(question) -> str:
    return due.due_status(question.due_date, question.state, timezone.localdate(), vendor_selectors.due_soon_days())


@web.page_for(may_open_pages)
def question_detail(request, code):
    """The question page; vendors reach only their own organisation's questions, read-only."""
    question = question_page(request, code)
    if web.wants_partial(request):
        # The live part of the page: the chain, polled while one of its runs is waiting or running.
        context = {"question": question, **_chain_context(question, request.user)}
        return web.render_page(request, "acceptance/question-detail.html", context, partial="question-chain")
    return render_question_page(request, question)


def whole_question_page_context(request, question, *, thread: dict | None = None) -> dict:
    """The whole question page's context; `thread` replaces the discussion's (a refused comment, an edit)."""
    context = question_page_context(request, question, thread=thread)
    if context["can_edit"]:
        context.update(_ticket_context(question))
    return {**context, **(thread or {})}


def question_nav(user) -> str:
    """The menu entry the question page sits under: the team's question list, or a vendor's own page."""
    return "questions" if may_see_all(user) else "vendor"


def render_question_page(request, question, *, thread: dict | None = None):
    context = whole_question_page_context(request, question, thread=thread)
    return web.render_page(request, "acceptance/question-detail.html", context, nav=question_nav(request.user))


@require_POST
@web.page_for(may_act_as_pm)
def question_ticket(request, code):
    """The question page's ticket form: organisation, assignee, priority, due date and state."""
    question = question_page(request, code)
    form = QuestionTicketForm(request.POST, question=question)
    changes = form.changes() if form.is_valid() else QuestionChanges()
    errors = errors_by_field(form)
    if changes.given() and not errors:
        try:
            question_update(actor=request.user, question=question, changes=changes)
        except DomainError as error:
            errors[_refused_field(error, TICKET_FIELDS)] = error.message
        else:
            question = question_page(request, code)
    saved = bool(changes.given()) and not errors
    return web.answer_post(
        request,
        "acceptance/question-detail.html",
        lambda: {**question_page_context(request, question), **_ticket_context(question, errors, saved=saved)},
        partial="question-ticket",
        nav="questions",
        status=400 if errors else 200,
        redirect_to="" if errors else reverse("question-detail", args=[question.code]),
    )


def _chain_context(question, user, *, rerun_errors: dict | None = None) -> dict:
    """The question's chains with a chart for each finished golden or soak run. `rerun_errors` maps
    (chain id, stage) to why a re-run of that stage was refused."""
    rerun_errors = rerun_errors or {}
    chains = question_chain_rows(user=user, question=question)
    for view in chains:
        for row in view.rows:
            row["plots"] = (
                [figure_html(plot) for plot in run_plots(row["run"])]
                if row["run"] is not None and not row["active"]
                else []
            )
            row["rerun_error"] = rerun_errors.get((view.chain.pk, row["stage"]), "")
    return {
        "chains": chains,
        "chains_active": any(row["active"] for view in chains for row in view.rows),
        "can_rerun": may_act_as_pm(user),
    }


@require_POST
@web.page_for(may_act_as_pm)
def run_rerun_view(request, run_id):
    """Run a chain's stage again; what refused it is shown beside the stage (in place), or after the redirect
    back to the question page."""
    run = object_for_user(request.user, Run.objects.select_related("chain__question", "target"), pk=run_id)
    if run.chain is None:
        raise Http404
    question = run.chain.question
    refusal = ""
    try:
        run_rerun(actor=request.user, run=run)
    except DomainError as error:
        refusal = error.message
    rerun_errors = {(run.chain_id, run.stage): refusal} if refusal else {}
    return web.answer_post(
        request,
        "acceptance/question-detail.html",
        lambda: {"question": question, **_chain_context(question, request.user, rerun_errors=rerun_errors)},
        partial="question-chain",
        redirect_to=reverse("question-detail", args=[question.code]),
        message=refusal,
        message_level=messages.ERROR,
    )
