"""The browser pages."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from acceptance.views import capabilities, comments, dashboard, deliverables, questions, reports, targets
from evidence import views as evidence_views
from vendor.views import audit, login, notifications

urlpatterns = [
    path("login/", login.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", dashboard.dashboard, name="dashboard"),
    path("vendor/", dashboard.vendor_home, name="vendor-home"),
    path("questions/", questions.question_list, name="question-list"),
    path("questions/bulk-edit", questions.question_bulk_edit, name="question-bulk-edit"),
    path("questions/<str:code>/", questions.question_detail, name="question-detail"),
    path("questions/<str:code>/edit", questions.question_edit, name="question-edit"),
    path("questions/<str:code>/ticket", questions.question_ticket, name="question-ticket"),
    path("questions/<str:code>/comments", comments.comment_thread, name="comment-thread"),
    path(
        "questions/<str:code>/deliverables/<slug:key>/review",
        deliverables.deliverable_review,
        name="deliverable-review",
    ),
    path("questions/<str:code>/comments/<int:comment_id>/edit", comments.comment_edit_view, name="comment-edit"),
    path("evidence/", evidence_views.evidence_register, name="evidence-register"),
    path("capabilities/", evidence_views.capability_matrix, name="capability-matrix"),
    path("capabilities/<slug:slug>/", capabilities.capability_detail, name="capability-detail"),
    path("capabilities/<slug:slug>/promote", capabilities.capability_promote_view, name="capability-promote"),
    path("capabilities/<slug:slug>/approve", capabilities.capability_approve_view, name="capability-approve"),
    path("runs/<int:run_id>/rerun", questions.run_rerun_view, name="run-rerun"),
    path(
        "targets/<slug:slug>/registration/approve",
        targets.target_registration_approve_view,
        name="target-registration-approve",
    ),
    path("targets/<slug:slug>/health-schedule", targets.target_health_schedule_view, name="target-health-schedule"),
    path("audit/", audit.audit_log, name="audit-log"),
    path("notifications/", notifications.notification_preferences, name="notifications"),
    path("webhooks/", notifications.webhook_list_page, name="webhook-list"),
    path("webhooks/<int:hook_id>/", notifications.webhook_detail, name="webhook-detail"),
    path("webhooks/<int:hook_id>/test", notifications.webhook_test_view, name="webhook-test"),
    path("reports/", reports.reports, name="reports"),
    path("reports/checklist.<str:fmt>", reports.report_checklist, name="report-checklist"),
    path("reports/capability-matrix.csv", evidence_views.report_capability_matrix, name="report-capability-matrix"),
]
