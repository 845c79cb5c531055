"""Acceptance runs (read; a PM re-runs) and the targets they run on (read)."""

import django_filters
from django.conf import settings
from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from acceptance.models import Run, Target
from acceptance.selectors import run_list, target_list
from acceptance.services import run_rerun, target_registration_approve
from acceptance.services.targets import target_accepts_runs
from calculet.api import Api
from calculet.errors import NotFoundError
from calculet.query import IdFilter
from vendor.access import object_for_user


class RunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    stage = serializers.ChoiceField(choices=Run.STAGES)
    state = serializers.ChoiceField(choices=Run.STATES)
    verdict = serializers.CharField(help_text="pass, fail or error once finished; empty before.")
    reason = serializers.CharField()
    target = serializers.CharField(source="target.slug")
    question = serializers.CharField(source="chain.question.code", allow_null=True, default=None)
    capability = serializers.CharField(source="chain.capability.slug", allow_null=True, default=None)
    answer = serializers.IntegerField(source="answer_id", allow_null=True)
    artifacts = serializers.SerializerMethodField()
    attempt = serializers.IntegerField()
    priority = serializers.IntegerField(
        help_text="Lowest first among its target's waiting runs: 0 a health check, 3 a PM's re-run or an "
        "automatic retry, 6 the backlog; the oldest first within one."
    )
    retry = serializers.IntegerField(
        help_text="0, or which automatic retry of an infrastructure error this run is (rerun_of is the run that "
        "ended in error)."
    )
    progress = serializers.FloatField()
    progress_text = serializers.CharField()
    metrics = serializers.JSONField()
    log_tail = serializers.CharField()
    rerun_of = serializers.IntegerField(source="rerun_of_id", allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    timing = serializers.JSONField(
        help_text="The last attempt's time split in seconds: queue_wait (until claimed), fetch (the inputs into "
        "its working directory), runner, example (the minimal example, when run) and post (the result to the "
        "verdict written); a step not reached yet is absent."
    )

    def get_artifacts(self, run) -> list[int]:
        return sorted(artifact.pk for artifact in run.artifacts.all())


class RunDetailOutputSerializer(RunOutputSerializer):
    log = serializers.CharField()
    findings = serializers.JSONField(
        help_text="Each {code, severity, field, message}, message the English sentence; calculet's own judging "
        "findings add template (its English template) and params (the figures that fill it)."
    )
    result = serializers.JSONField()
    inputs = serializers.JSONField(help_text="The artifact and target versions the run was made for.")
    params = serializers.JSONField()
    probes = serializers.JSONField(
        help_text="The capability's recipe probes the job sent, thresholds among their params; each probe's "
        "verdict, checks, metrics and findings are in result.probes."
    )
    recipe_version = serializers.IntegerField(allow_null=True)


class RunFilter(django_filters.FilterSet):
    stage = django_filters.ChoiceFilter(choices=Run.STAGES)
    state = django_filters.ChoiceFilter(choices=Run.STATES)
    verdict = django_filters.ChoiceFilter(choices=Run.VERDICTS)
    target = django_filters.CharFilter(field_name="target__slug")
    question = django_filters.CharFilter(field_name="chain__question__code")
    capability = django_filters.CharFilter(field_name="chain__capability__slug")
    answer = IdFilter(field_name="answer_id")
    artifact = IdFilter(field_name="artifacts", distinct=True)

    class Meta:
        model = Run
        fields = ["stage", "state", "verdict", "target", "question", "capability", "answer", "artifact"]


class RunListApi(Api, ListAPIView):
    """Runs of your organisation's answers (every run for the integration team), newest first."""

    queryset = Run.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = RunOutputSerializer
    filterset_class = RunFilter
    ordering_fields = ["id", "created_at", "finished_at"]
    ordering = ["-id"]

    def get_queryset(self):
        return run_list(user=self.request.user)


def _run_detail(run: Run) -> dict:
    run = Run.objects.select_related("target", "chain__question", "chain__capability").get(pk=run.pk)
    return RunDetailOutputSerializer(run).data


class RunDetailApi(Api):
    @extend_schema(responses=RunDetailOutputSerializer)
    def get(self, request, run_id):
        return Response(_run_detail(object_for_user(request.user, Run.objects, pk=run_id)))


class RunRerunApi(Api):
    @extend_schema(request=None, responses={201: RunDetailOutputSerializer})
    def post(self, request, run_id):
        """Run the stage again on the chain's current inputs (PMs only)."""
        new = run_rerun(actor=request.user, run=object_for_user(request.user, Run.objects, pk=run_id))
        return Response(_run_detail(new), status=status.HTTP_201_CREATED)


class TargetAgentOutputSerializer(serializers.Serializer):
    host = serializers.CharField()
    agent_version = serializers.CharField()
    registered_at = serializers.DateTimeField()
    last_poll_at = serializers.DateTimeField(allow_null=True)
    current_run = serializers.IntegerField(
        source="current_run_id", allow_null=True, help_text="The run it holds; null between runs."
    )
    cache_bytes = serializers.IntegerField(help_text="The size of its input cache as it last reported.")


class TargetOutputSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Target.KINDS)
    calrt_version = serializers.CharField()
    driver_version = serializers.CharField()
    firmware_version = serializers.CharField()
    chip = serializers.CharField()
    runner_digest = serializers.CharField(help_text="A board's runner's SHA-256 as its agent read it; may be empty.")
    registration_pending = serializers.JSONField(
        help_text="What an agent registered that waits for a PM's or operator's approval ({} when nothing waits): "
        "`host`, `first` (a board's first agent registration), `changes` (field: [registered, sent]), `reason`. "
        "While it waits the target is out of rotation and none of its runs is claimed."
    )
    hardware_runner = serializers.SerializerMethodField(
        help_text="Whether a hardware target has its runner command registered; without one it runs nothing "
        "(it never falls back to the simulator). Always false for a simulator."
    )
    health = serializers.ChoiceField(choices=Target.HEALTH_STATES)
    health_reason = serializers.CharField()
    maintenance = serializers.BooleanField()
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)
    last_health_check_at = serializers.DateTimeField(allow_null=True)
    last_health_check_passed = serializers.BooleanField(allow_null=True)
    in_rotation = serializers.SerializerMethodField(
        help_text="Whether the target is given runs now: out of maintenance, no agent registration waits for "
        "approval, its last health check did not fail, and an agent or worker serving it reported lately. "
        "health_reason says why not."
    )
    health_check_every_runs = serializers.SerializerMethodField(
        help_text="A health check is due after this many runner-stage runs since the last one."
    )
    health_check_every_hours = serializers.SerializerMethodField(
        help_text="A health check is due this many hours after the last one."
    )
    pulled = serializers.BooleanField(help_text="Whether its runs are pulled by calculet-agent (a live token).")
    agents = TargetAgentOutputSerializer(many=True, help_text="The calculet-agents registered for it.")

    def get_hardware_runner(self, target) -> bool:
        return target.kind == Target.HARDWARE and bool(target.runner_command)

    def get_in_rotation(self, target) -> bool:
        return target_accepts_runs(target)

    def get_health_check_every_runs(self, target) -> int:
        return target.health_check_every_runs or settings.ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS

    def get_health_check_every_hours(self, target) -> int:
        return target.health_check_every_hours or settings.ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS


class TargetListApi(Api, ListAPIView):
    """Where runs execute: the simulator and hardware hosts."""

    queryset = Target.objects.none()  # names the model for the schema; get_queryset lists them
    serializer_class = TargetOutputSerializer
    filterset_fields = ["kind", "health", "maintenance"]
    ordering_fields = ["slug", "kind"]

    def get_queryset(self):
        return target_list()


class TargetRegistrationApproveApi(Api):
    @extend_schema(request=None, responses=TargetOutputSerializer)
    def post(self, request, slug):
        """Approve what an agent registered of the target (PMs and operators): its values become the target's
        and the target is back in rotation. 409 when nothing waits."""
        target = target_list().filter(slug=slug).first()
        if target is None:
            raise NotFoundError(gettext_noop("Target %(slug)s not found."), params={"slug": slug})
        target_registration_approve(actor=request.user, target=target)
        return Response(TargetOutputSerializer(target_list().get(pk=target.pk)).data)


class TargetDetailApi(Api):
    @extend_schema(responses=TargetOutputSerializer)
    def get(self, request, slug):
        target = target_list().filter(slug=slug).first()
        if target is None:
            raise NotFoundError(gettext_noop("Target %(slug)s not found."), params={"slug": slug})
        return Response(TargetOutputSerializer(target).data)
