"""The REST API's routes, mounted at /api/v1/."""

from django.http import JsonResponse
from django.urls import path, re_path, register_converter
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from acceptance.api import agent, answers, deliverables, promotions, questions, runs
from evidence import api as evidence
from vendor.api import accounts, artifacts, audit, comments, notifications, uploads

app_name = "api"


class CodeConverter:
    """Question and evidence codes (V18, B01, …): letters, digits, '.', '_' and '-'. Anything else is no
    endpoint at all, so control characters never reach a query."""

    regex = r"[A-Za-z0-9._-]{1,40}"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


register_converter(CodeConverter, "code")


@csrf_exempt
def not_found(request, *args, **kwargs):
    """Anything under /api/v1/ that matches no endpoint (a malformed id too) answers in the API's error format."""
    return JsonResponse(
        {"errors": [{"field": None, "code": "not_found", "message": f"No endpoint at {request.path}."}]}, status=404
    )


urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    path("me/", accounts.MeApi.as_view(), name="me"),
    path(
        "me/notification-preferences/",
        notifications.NotificationPreferencesApi.as_view(),
        name="notification-preferences",
    ),
    path("me/notifications/", notifications.NotificationListApi.as_view(), name="notification-list"),
    path("organisations/", accounts.OrganisationListApi.as_view(), name="organisation-list"),
    path("tokens/", accounts.TokenListApi.as_view(), name="token-list"),
    path("tokens/<int:token_id>/", accounts.TokenDetailApi.as_view(), name="token-detail"),
    path("questions/", questions.QuestionListApi.as_view(), name="question-list"),
    path("questions/<code:code>/", questions.QuestionDetailApi.as_view(), name="question-detail"),
    path("questions/<code:code>/answers/", answers.AnswerListApi.as_view(), name="answer-list"),
    path("questions/<code:code>/answers/<int:answer_id>/", answers.AnswerDetailApi.as_view(), name="answer-detail"),
    path("questions/<code:code>/deliverables/", deliverables.DeliverableListApi.as_view(), name="deliverable-list"),
    path(
        "questions/<code:code>/deliverables/<slug:key>/reviews/",
        deliverables.DeliverableReviewApi.as_view(),
        name="deliverable-review",
    ),
    path("questions/<code:code>/comments/", comments.CommentListApi.as_view(), name="comment-list"),
    path(
        "questions/<code:code>/comments/<int:comment_id>/", comments.CommentDetailApi.as_view(), name="comment-detail"
    ),
    path("artifacts/", artifacts.ArtifactListApi.as_view(), name="artifact-list"),
    path("artifacts/<int:artifact_id>/", artifacts.ArtifactDetailApi.as_view(), name="artifact-detail"),
    path("artifacts/<int:artifact_id>/download/", artifacts.ArtifactDownloadApi.as_view(), name="artifact-download"),
    path("uploads/", uploads.UploadListApi.as_view(), name="upload-list"),
    path("uploads/<uuid:upload_id>/", uploads.UploadDetailApi.as_view(), name="upload-detail"),
    path("evidence/", evidence.EvidenceListApi.as_view(), name="evidence-list"),
    path("evidence/<code:code>/", evidence.EvidenceDetailApi.as_view(), name="evidence-detail"),
    path("capabilities/", evidence.CapabilityListApi.as_view(), name="capability-list"),
    path("capabilities/<slug:slug>/", evidence.CapabilityDetailApi.as_view(), name="capability-detail"),
    path("capabilities/<slug:slug>/promotions/", promotions.PromotionListApi.as_view(), name="promotion-list"),
    path("capabilities/<slug:slug>/approvals/", promotions.ApprovalListApi.as_view(), name="approval-list"),
    path("runs/", runs.RunListApi.as_view(), name="run-list"),
    path("runs/<int:run_id>/", runs.RunDetailApi.as_view(), name="run-detail"),
    path("runs/<int:run_id>/rerun/", runs.RunRerunApi.as_view(), name="run-rerun"),
    path("targets/", runs.TargetListApi.as_view(), name="target-list"),
    path("agent/register/", agent.AgentRegisterApi.as_view(), name="agent-register"),
    path("agent/claim/", agent.AgentClaimApi.as_view(), name="agent-claim"),
    path("agent/runs/<int:run_id>/inputs/<str:sha256>/", agent.AgentRunInputApi.as_view(), name="agent-run-input"),
    path("agent/runs/<int:run_id>/heartbeat/", agent.AgentHeartbeatApi.as_view(), name="agent-run-heartbeat"),
    path("agent/runs/<int:run_id>/result/", agent.AgentResultApi.as_view(), name="agent-run-result"),
    path("targets/<slug:slug>/", runs.TargetDetailApi.as_view(), name="target-detail"),
    path(
        "targets/<slug:slug>/registration/approve/",
        runs.TargetRegistrationApproveApi.as_view(),
        name="target-registration-approve",
    ),
    path("audit/", audit.AuditListApi.as_view(), name="audit-list"),
    path("webhooks/", notifications.WebhookListApi.as_view(), name="webhook-list"),
    path("webhooks/<int:hook_id>/", notifications.WebhookDetailApi.as_view(), name="webhook-detail"),
    path("webhooks/<int:hook_id>/test/", notifications.WebhookTestApi.as_view(), name="webhook-test"),
    path(
        "webhooks/<int:hook_id>/deliveries/",
        notifications.WebhookDeliveryListApi.as_view(),
        name="webhook-delivery-list",
    ),
    re_path(r"", not_found),
]
