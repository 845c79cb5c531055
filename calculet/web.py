"""What the browser pages share: who may open which page, rendering a page or one of its partials, labels."""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from vendor import states
from vendor.access import user_is_pm, user_role, user_sees_all

LABELS = {
    "role": {"pm": _("PM"), "vendor": _("Vendor engineer"), "operator": _("Operator"), "viewer": _("Viewer")},
    "state": {
        states.NEW: pgettext_lazy("question state", "New"),
        states.ASKED: pgettext_lazy("question state", "Asked"),
        states.ANSWERED: pgettext_lazy("question state", "Answered"),
        states.VERIFYING: pgettext_lazy("question state", "Verifying"),
        states.CLOSED: pgettext_lazy("question state", "Closed"),
        states.DEFERRED: pgettext_lazy("question state", "Deferred"),
    },
    "priority": {
        "p0": _("P0 — blocking"),
        "p1": _("P1 — high"),
        "p2": _("P2 — normal"),
        "p3": _("P3 — low"),
    },
    "grade": {
        "E0": _("measured on the current prototype"),
        "E1": _("current image, binaries, source and model artifacts"),
        "E2": _("CalRT 0.7.6 headers and same-version dynamic symbols"),
        "E3": _("PDF or non-production git history"),
        "E4": _("engineering inference or proposal"),
    },
    "status": {
        "C0": _("confirmed now"),
        "C1": _("in the SDK but not integrated"),
        "C2": _("can be engineered by us"),
        "C3": _("depends on the vendor toolchain"),
        "C4": _("unsupported or must not be opened"),
    },
    "artifact_kind": {
        "calbin": _("calbin package"),
        "sdk": _("SDK"),
        "container_image": _("container image"),
        "golden": _("golden tensors"),
        "runner_bundle": _("runner bundle"),
        "document": _("document"),
    },
    "artifact_state": {
        "pending": pgettext_lazy("artifact state", "Pending"),
        "verifying": pgettext_lazy("artifact state", "Verifying"),
        "verified": pgettext_lazy("artifact state", "Verified"),
        "rejected": pgettext_lazy("artifact state", "Rejected"),
    },
    "stage": {
        "claim": _("Claim"),
        "artifact": _("Versioned artifact"),
        "runner": _("Isolated runner"),
        "golden": _("Numerical golden"),
        "failure": _("Failure and recovery"),
        "integration": _("Service integration"),
        "soak": _("Load, soak and performance"),
        "health": _("Target health check"),
        "done": _("Every stage passed"),
    },
    "run_state": {
        "pending": pgettext_lazy("run state", "Pending"),
        "queued": pgettext_lazy("run state", "Queued"),
        "running": pgettext_lazy("run state", "Running"),
        "passed": pgettext_lazy("run state", "Passed"),
        "failed": pgettext_lazy("run state", "Failed"),
        "error": pgettext_lazy("run state", "Error"),
        "stale": pgettext_lazy("run state", "Stale"),
    },
    "target_kind": {"simulator": _("Simulator"), "hardware": _("Hardware")},
    "health": {"ok": _("OK"), "degraded": _("Degraded"), "offline": _("Offline")},
    "element": {
        "version": _("version"),
        "executable_asset": _("executable asset"),
        "minimal_example": _("minimal example"),
        "error_path": _("error path"),
        "golden": _("golden"),
        "compatibility_range": _("compatibility range"),
    },
}


def label(kind: str, value) -> str:
    """The translated label of a stored value, or the value itself when it has none."""
    return LABELS.get(kind, {}).get(value, value)


def choices(kind: str) -> list[tuple[str, str]]:
    """(value, label) pairs, translated once into the active language."""
    return [(value, str(text)) for value, text in LABELS[kind].items()]


def _page_for(may_open):
    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not may_open(request.user):
                raise Http404
            request.web_role = user_role(request.user)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def _is_vendor_member(user) -> bool:
    return user_role(user) is not None and not user_sees_all(user)


# Anyone else gets 404, as for anything that is not theirs.
member_page = _page_for(lambda user: user_role(user) is not None)
internal_page = _page_for(user_sees_all)
pm_page = _page_for(user_is_pm)
vendor_page = _page_for(_is_vendor_member)


def wants_partial(request) -> bool:
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page(request, template: str, context: dict, *, partial: str | None = None, nav: str = "", status=200):
    """The whole page, or only the named partial of the same template when htmx asks for it."""
    name = f"{template}#{partial}" if partial and wants_partial(request) else template
    role = getattr(request, "web_role", None)
    context = {**context, "web_role": role, "web_role_label": label("role", role), "nav": nav}
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response
