"""The promotion gate over the API: POST asks it to move a capability's status; GET lists every attempt. The
approvals some moves need are given and listed beside it."""

from django.db.models import Prefetch
from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from acceptance.inputs import NOTE_MAX_CHARS, REASON_MAX_CHARS, ApprovalRequest, PromotionRequest
from acceptance.models import CapabilityApproval, PromotionAttempt, Run
from acceptance.services import capability_promote
from acceptance.services.approvals import capability_approve
from calculet.api import Api, ReasonSerializer, StrictSerializer
from calculet.errors import ConflictError, ForbiddenError
from evidence.grades import STATUS_CHOICES
from evidence.selectors import capability_get
from vendor.access import may_act_as_pm, may_approve_moves, may_see_all


class PromotionInputSerializer(StrictSerializer):
    to = serializers.ChoiceField(choices=STATUS_CHOICES, help_text="The status asked for, C0–C4.")
    reason = serializers.CharField(
        allow_blank=True, required=False, max_length=REASON_MAX_CHARS, help_text="Required to demote."
    )

    def promotion_request(self) -> PromotionRequest:
        """The validated body as the gate takes it; call only after `is_valid()` held."""
        data = self.validated_data
        return PromotionRequest(to=data["to"], reason=data.get("reason", ""))


class PromotionOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    capability = serializers.CharField(source="capability.slug")
    actor = serializers.CharField(source="actor_label")
    from_status = serializers.CharField()
    to_status = serializers.CharField()
    allowed = serializers.BooleanField()
    reason = serializers.CharField()
    reasons = ReasonSerializer(many=True, help_text="Why the gate blocked it.")
    policy_version = serializers.CharField()
    answer = serializers.IntegerField(source="answer_id", allow_null=True)
    runs = serializers.SerializerMethodField()
    versions = serializers.JSONField(
        help_text="The CalRT, driver, firmware and chip versions of the evidence the new status rests on."
    )
    created_at = serializers.DateTimeField()

    def get_runs(self, attempt) -> list[int]:
        return sorted(run.pk for run in attempt.runs.all())


class PromotionListApi(Api, ListAPIView):
    """Every attempt to move the capability's status, allowed or blocked (integration team only)."""

    queryset = PromotionAttempt.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = PromotionOutputSerializer
    filterset_fields = ["allowed"]
    ordering_fields = ["id", "created_at"]
    ordering = ["-id"]

    def get_queryset(self):
        capability = capability_get(user=self.request.user, slug=self.kwargs["slug"])
        if not may_see_all(self.request.user):
            raise ForbiddenError(gettext_noop("Promotion attempts are for the integration team."))
        return (
            PromotionAttempt.objects.filter(capability=capability)
            .select_related("capability")
            .prefetch_related(Prefetch("runs", queryset=Run.objects.only("id")))
        )

    @extend_schema(request=PromotionInputSerializer, responses={201: PromotionOutputSerializer})
    def post(self, request, slug):
        """Ask the promotion gate to move the status: 201 when it moved, 409 with the reasons when blocked."""
        capability = capability_get(user=request.user, slug=slug)
        if not may_act_as_pm(request.user):  # before reading the body, as the page does
            raise ForbiddenError(gettext_noop("Only a PM asks the promotion gate."))
        serializer = PromotionInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        attempt = capability_promote(actor=request.user, capability=capability, request=serializer.promotion_request())
        if not attempt.allowed:
            raise ConflictError(
                gettext_noop("The gate blocked %(capability)s from moving to %(to_status)s; see reasons."),
                field="to",
                code="blocked",
                reasons=attempt.reasons,
                params={"capability": capability.slug, "to_status": attempt.to_status},
            )
        return Response(PromotionOutputSerializer(attempt).data, status=status.HTTP_201_CREATED)


class ApprovalInputSerializer(StrictSerializer):
    to = serializers.ChoiceField(choices=STATUS_CHOICES, help_text="The status of the move approved, C0–C4.")
    note = serializers.CharField(allow_blank=True, required=False, max_length=NOTE_MAX_CHARS)

    def approval_request(self) -> ApprovalRequest:
        """The validated body as the approval takes it; call only after `is_valid()` held."""
        data = self.validated_data
        return ApprovalRequest(to=data["to"], note=data.get("note", ""))


class ApprovalOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    capability = serializers.CharField(source="capability.slug")
    approver = serializers.CharField(source="approver.username")
    from_status = serializers.CharField()
    to_status = serializers.CharField()
    answer = serializers.IntegerField(
        source="answer_id", allow_null=True, help_text="The answer the move rested on when approved."
    )
    runs = serializers.SerializerMethodField(help_text="The runs the move rested on when approved.")
    note = serializers.CharField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoked_reason = serializers.CharField()

    def get_runs(self, approval) -> list[int]:
        return sorted(run.pk for run in approval.runs.all())


class ApprovalListApi(Api, ListAPIView):
    """Approvals of the moves that need two members of the integration team (a capability the seed keeps
    closed, a pinned one to or from C4), standing and revoked (integration team only)."""

    queryset = CapabilityApproval.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = ApprovalOutputSerializer
    ordering_fields = ["id", "created_at"]
    ordering = ["-id"]

    def get_queryset(self):
        capability = capability_get(user=self.request.user, slug=self.kwargs["slug"])
        if not may_see_all(self.request.user):
            raise ForbiddenError(gettext_noop("Approvals are for the integration team."))
        return (
            CapabilityApproval.objects.filter(capability=capability)
            .select_related("capability", "approver")
            .prefetch_related(Prefetch("runs", queryset=Run.objects.only("id")))
        )

    @extend_schema(request=ApprovalInputSerializer, responses={201: ApprovalOutputSerializer})
    def post(self, request, slug):
        """Approve moving the capability from its status to `to`, on the evidence the move rests on now: 201
        with the approval; 409 with the gate's reasons when the evidence does not support the move."""
        capability = capability_get(user=request.user, slug=slug)
        if not may_approve_moves(request.user):
            raise ForbiddenError(gettext_noop("Only a PM or an operator of the integration team approves a move."))
        serializer = ApprovalInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approval = capability_approve(actor=request.user, capability=capability, request=serializer.approval_request())
        return Response(ApprovalOutputSerializer(approval).data, status=status.HTTP_201_CREATED)
