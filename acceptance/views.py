"""Browser pages for acceptance: the dashboard, live run progress, the audit log."""

import datetime

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import OuterRef, Subquery
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from acceptance import stages
from acceptance.models import Chain, Run, Target
from acceptance.selectors import (
    RUN_SUMMARY_DEFER,
    chains_for_question,
    chains_stages,
    promotions_blocked_since,
    runs_in_progress,
)
from acceptance.services import run_rerun
from calculet import plots, web
from calculet.errors import DomainError
from calculet.models import AuditEntry
from evidence.grades import STATUSES
from evidence.views import capabilities_with_grades
from npu_sim.stages import SOAK_CONTEXTS
from npu_sim.timing import TimingModel, context_rows
from vendor.access import user_is_pm, user_organisation, user_role, user_sees_all
from vendor.models import Question, Section

AUDIT_PAGE_SIZE = 50
DONE = "done"
POSITIONS = [*stages.CHAIN_STAGES, DONE]
LIVE_RUN_LIMIT = 50
BLOCKED_LIMIT = 50
BLOCKED_WINDOW = datetime.timedelta(days=7)
RUN_HISTORY_LIMIT = 200
RUNS_PER_STAGE = 5


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, label=_("Actor"))
    object_type = forms.CharField(required=False, label=_("Object type"))
    object_id = forms.CharField(required=False, label=_("Object id"))
    action = forms.CharField(required=False, label=_("Action"))

    def filter(self, entries):
        data = self.cleaned_data if self.is_valid() else {}
        if actor := data.get("actor", "").strip():
            entries = entries.filter(actor_label=actor)
        if object_type := data.get("object_type", "").strip():
            entries = entries.filter(object_type=object_type)
        if object_id := data.get("object_id", "").strip():
            entries = entries.filter(object_id=object_id)
        if action := data.get("action", "").strip():
            entries = entries.filter(action__startswith=action)
        return entries


def _changes(entry):
    """The fields an entry changed, as (field, before, after), from its before/after snapshots."""
    before = entry.before if isinstance(entry.before, dict) else {}
    after = entry.after if isinstance(entry.after, dict) else {}
    keys = list(dict.fromkeys([*before, *after]))
    return [(key, before.get(key), after.get(key)) for key in keys if before.get(key) != after.get(key)]


@web.internal_page
def audit_log(request):
    form = AuditFilterForm(request.GET)
    entries = form.filter(AuditEntry.objects.order_by("-id"))
    page = Paginator(entries, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    for entry in page:
        entry.changes = _changes(entry)
    context = {"form": form, "page": page, "params": request.GET}
    return web.render_page(request, "acceptance/audit-log.html", context, partial="audit-table", nav="audit")


def _sections_with_counts():
    """Each section with its questions counted by state and by chain position."""
    positions = question_positions()
    by_state: dict[int, dict[str, int]] = {}
    by_position: dict[int, dict[str, int]] = {}
    for question_id, section_id, state in Question.objects.values_list("id", "section_id", "state"):
        states_here = by_state.setdefault(section_id, {})
        states_here[state] = states_here.get(state, 0) + 1
        if question_id in positions:
            positions_here = by_position.setdefault(section_id, {})
            positions_here[positions[question_id]] = positions_here.get(positions[question_id], 0) + 1
    sections = list(Section.objects.all())
    for section in sections:
        states_here = by_state.get(section.pk, {})
        positions_here = by_position.get(section.pk, {})
        section.state_counts = [states_here.get(state, 0) for state, _label in web.choices("state")]
        section.position_counts = [positions_here.get(position, 0) for position in POSITIONS]
        section.total = sum(states_here.values())
    return sections


@login_required
def dashboard(request):
    """The team's front page; a vendor lands on their organisation's questions instead."""
    if user_role(request.user) is not None and not user_sees_all(request.user):
        return redirect("vendor-home")
    return _team_dashboard(request)


def _runs_in_progress_context():
    runs = list(runs_in_progress()[:LIVE_RUN_LIMIT])
    return {"live_runs": runs, "runs_active": bool(runs)}


@web.internal_page
def _team_dashboard(request):
    if web.wants_partial(request):
        return web.render_page(request, "acceptance/dashboard.html", _runs_in_progress_context(), partial="live-runs")
    context = {
        "sections": _sections_with_counts(),
        "state_choices": web.choices("state"),
        "positions": POSITIONS,
        "capabilities": capabilities_with_grades(),
        "statuses": STATUSES,
        "blocked": promotions_blocked_since(timezone.now() - BLOCKED_WINDOW)[:BLOCKED_LIMIT],
        "targets": Target.objects.all(),
        **_runs_in_progress_context(),
    }
    return web.render_page(request, "acceptance/dashboard.html", context, nav="dashboard")


def chain_position(rows) -> str:
    """Where a chain stands: its first stage that has not passed, or DONE when all seven have."""
    for stage, state, _run in rows:
        if state != stages.PASSED:
            return stage
    return DONE


def _newest_run(stage: str, field: str) -> Subquery:
    return Subquery(Run.objects.filter(chain=OuterRef("pk"), stage=stage).order_by("-id").values(field)[:1])


def question_positions() -> dict[int, str]:
    """For each question with a chain, the furthest position any of its chains has reached.

    One query: the newest run of each (chain, stage) is found by one index probe each, so the cost follows
    the number of chains, not of runs.
    """
    newest = {}
    for stage in stages.CHAIN_STAGES:
        newest[f"newest_{stage}_state"] = _newest_run(stage, "state")
        newest[f"newest_{stage}_digest"] = _newest_run(stage, "inputs_digest")
    positions: dict[int, str] = {}
    for chain in Chain.objects.only("id", "question_id", "stage_digests").annotate(**newest):
        rows = [
            (
                stage,
                stages.stage_state(
                    getattr(chain, f"newest_{stage}_state"),
                    getattr(chain, f"newest_{stage}_digest"),
                    chain.stage_digests.get(stage, ""),
                ),
                None,
            )
            for stage in stages.CHAIN_STAGES
        ]
        position = chain_position(rows)
        known = positions.get(chain.question_id)
        if known is None or POSITIONS.index(position) > POSITIONS.index(known):
            positions[chain.question_id] = position
    return positions


def question_chain_context(question, user, *, rerun_errors: dict | None = None) -> dict:
    """The question's chains, each as its seven stages with the latest run and the runs before it.

    `rerun_errors` maps (chain id, stage) to why a re-run of that stage was refused."""
    rerun_errors = rerun_errors or {}
    chains = chains_for_question(question)
    if not user_sees_all(user):
        # A question once put to another vendor keeps that vendor's chains; only the user's own are shown.
        organisation = user_organisation(user)
        chains = [chain for chain in chains if organisation and chain.answer.organisation_id == organisation.pk]
    stage_rows = chains_stages(chains)
    history = {}
    recent = (
        Run.objects.filter(chain__in=chains)
        .defer(*RUN_SUMMARY_DEFER)
        .only("id", "chain_id", "stage", "state", "verdict", "created_at", "finished_at", "attempt")
        .order_by("-id")[:RUN_HISTORY_LIMIT]
    )
    for run in recent:
        history.setdefault((run.chain_id, run.stage), []).append(run)
    any_active = False
    for chain in chains:
        chain.rows = []
        for stage, state, run in stage_rows[chain.pk]:
            active = run is not None and run.state in stages.ACTIVE_STATES
            any_active = any_active or active
            earlier = [r for r in history.get((chain.pk, stage), []) if run is None or r.pk != run.pk]
            chain.rows.append(
                {
                    "stage": stage,
                    "state": state,
                    "run": run,
                    "active": active,
                    "earlier": earlier[:RUNS_PER_STAGE],
                    "plots": run_plots(run) if run is not None and not active else [],
                    "rerun_error": rerun_errors.get((chain.pk, stage), ""),
                }
            )
    return {
        "chains": chains,
        "chains_active": any_active,
        "can_rerun": user_is_pm(user),
    }


@require_POST
@web.pm_page
def run_rerun_view(request, run_id):
    run = get_object_or_404(Run.objects.select_related("chain__question", "target"), pk=run_id)
    if run.chain is None:
        raise Http404
    question = run.chain.question
    errors = {}
    try:
        run_rerun(actor=request.user, run=run)
    except DomainError as error:
        errors[(run.chain_id, run.stage)] = error.message
    if not web.wants_partial(request):
        for message in errors.values():
            messages.error(request, message)
        return redirect("question-detail", question.code)
    context = {"question": question, **question_chain_context(question, request.user, rerun_errors=errors)}
    return web.render_page(request, "vendor/question-detail.html", context, partial="question-chain")


def _histogram_bars(histogram: dict) -> list[tuple[str, float]]:
    """Golden error bins: exact, one per [edge, next edge), at or above the last edge, NaN."""
    edges = histogram.get("edges", [])
    bars = [("= 0", histogram.get("exact", 0))]
    bars += [(f"< {upper:g}", count) for upper, count in zip(edges[1:], histogram.get("counts", []), strict=False)]
    if edges:
        bars.append((f"≥ {edges[-1]:g}", histogram.get("above", 0)))
    bars.append(("NaN", histogram.get("nan", 0)))
    return bars


def _golden_plots(metrics: dict) -> list[plots.Plot]:
    result = []
    for name, report in sorted((metrics.get("tensors") or {}).items()):
        if not isinstance(report, dict):
            continue
        if isinstance(report.get("histogram"), dict):
            result.append(
                plots.bar_plot(
                    _("Absolute error of %(tensor)s against the golden") % {"tensor": name},
                    _("|error|"),
                    _("elements"),
                    _histogram_bars(report["histogram"]),
                    log=True,
                )
            )
        by_k = [item for item in report.get("topk_by_k") or [] if isinstance(item, dict)]
        if by_k:
            result.append(
                plots.bar_plot(
                    _("Top-k agreement of %(tensor)s with the golden") % {"tensor": name},
                    "k",
                    _("agreement"),
                    [(f"top-{item['k']}", item["agreement"]) for item in by_k],
                    top_value=1,
                )
            )
    return result


def _percentile_bars(figures: dict) -> list[tuple[str, float]]:
    return [(key, figures[key]) for key in ("p50", "p95", "p99") if isinstance(figures.get(key), int | float)]


def _soak_plots(run) -> list[plots.Plot]:
    metrics = run.metrics
    result = []
    for key, title, unit in (
        ("ttft_ms", _("Time to first token"), "ms"),
        ("decode_tokens_per_s", _("Decode rate per request"), _("token/s")),
    ):
        bars = _percentile_bars(metrics.get(key) or {})
        if bars:
            result.append(plots.bar_plot(title, _("percentile"), unit, bars))
    rows = metrics.get("context_rows") or context_rows(TimingModel(), SOAK_CONTEXTS)
    curve = [(row["context"], row["decode_tokens_per_s"]) for row in rows]
    measured = (metrics.get("decode_tokens_per_s") or {}).get("p50")
    context = metrics.get("prompt_tokens")
    required = (run.params or {}).get("min_decode_tokens_per_s")
    result.append(
        plots.line_plot(
            _("Decode token/s against context length (timing model)"),
            _("context tokens"),
            _("token/s"),
            curve,
            marks=[(context, measured)] if isinstance(measured, int | float) and context else [],
            threshold=required if isinstance(required, int | float) else None,
            threshold_label=_("required %(rate)s token/s") % {"rate": required},
        )
    )
    return result


def run_plots(run) -> list[plots.Plot]:
    """The charts of a finished golden or soak run, drawn from its stored metrics."""
    if not isinstance(run.metrics, dict) or not run.metrics:
        return []
    if run.stage == stages.GOLDEN:
        return _golden_plots(run.metrics)
    if run.stage == stages.SOAK:
        return _soak_plots(run)
    return []
