"""The endpoints calculet-agent calls (docs/deploy.md, "Workers on another host"). A target token
(`Authorization: Target <key>`) registers the agent and claims runs; the run token a claim returns
(`Authorization: Run <key>`) fetches that run's inputs, renews its lease and posts its result."""

import base64
import time
from pathlib import Path

from calculet_agent.signing import SIGNATURE_HEADER
from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import authentication, exceptions, permissions, serializers, status, throttling
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from acceptance.models import RunToken, TargetToken
from acceptance.protocol import MEASUREMENT_MAX_BYTES, RESULT_MAX_BYTES, RunnerEnd
from acceptance.services.agents import (
    AgentRegistration,
    RunReport,
    agent_claim_next,
    agent_for_token,
    agent_register,
    run_heartbeat,
    run_input_blob,
    run_result,
    run_token_for_key,
    target_token_for_key,
)
from calculet.api import Api, BinaryRenderer, ErrorSerializer, StrictSerializer
from calculet.downloads import file_response
from calculet.json_text import storable_json_loads
from vendor.authentication import FailedAuthenticationThrottle
from vendor.storage import artifact_storage

# Base64 of the result file and the measurement files (at most one each stage), and the output's chunks.
RESULT_BODY_MAX_BYTES = (RESULT_MAX_BYTES + MEASUREMENT_MAX_BYTES) * 2 + 4 * 1024**2


class _KeyAuthentication(authentication.BaseAuthentication):
    keyword = ""

    def find(self, key: str):
        raise NotImplementedError

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace") != self.keyword:
            return None
        key = header[1].decode(errors="replace") if len(header) == 2 else ""
        throttle = FailedAuthenticationThrottle(request, key)
        found = self.find(key) if key else None
        if found is None:
            throttle.check_failure(prefix_known=False)
            raise exceptions.AuthenticationFailed(
                gettext("The %(kind)s token is unknown or revoked.") % {"kind": self.keyword.lower()}
            )
        return AnonymousUser(), found

    def authenticate_header(self, request):
        return self.keyword


class TargetTokenAuthentication(_KeyAuthentication):
    keyword = "Target"

    def find(self, key):
        return target_token_for_key(key)


class RunTokenAuthentication(_KeyAuthentication):
    keyword = "Run"

    def find(self, key):
        return run_token_for_key(key)


class TargetTokenScheme(OpenApiAuthenticationExtension):
    target_class = TargetTokenAuthentication
    name = "targetToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization", "description": "`Target <key>`"}


class RunTokenScheme(OpenApiAuthenticationExtension):
    target_class = RunTokenAuthentication
    name = "runToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization", "description": "`Run <key>`"}


class HoldsTargetToken(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.auth, TargetToken)


class HoldsRunToken(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.auth, RunToken) and request.auth.run_id == view.kwargs.get("run_id")


class AgentRateThrottle(throttling.SimpleRateThrottle):
    """Per target: its agents poll, on one host or many, apart from the people's tokens and addresses."""

    scope = "token"

    def get_cache_key(self, request, view):
        target_id = request.auth.target_id if isinstance(request.auth, TargetToken) else request.auth.run.target_id
        return self.cache_format % {"scope": self.scope, "ident": f"target-{target_id}"}


class _AgentApi(Api):
    throttle_classes = [AgentRateThrottle]


class _TargetApi(_AgentApi):
    authentication_classes = [TargetTokenAuthentication]
    permission_classes = [HoldsTargetToken]


class _RunApi(_AgentApi):
    authentication_classes = [RunTokenAuthentication]
    permission_classes = [HoldsRunToken]


class AgentRegisterApi(_TargetApi):
    class AgentRegisterInputSerializer(StrictSerializer):
        host = serializers.CharField(max_length=200)
        public_key = serializers.CharField(max_length=64, help_text="Ed25519, base64 of the 32 raw bytes.")
        agent_version = serializers.CharField(max_length=50)
        platform = serializers.CharField(allow_blank=True, max_length=200, required=False, default="")
        calrt_version = serializers.CharField(allow_blank=True, max_length=50, required=False, default="")
        driver_version = serializers.CharField(allow_blank=True, max_length=50, required=False, default="")
        firmware_version = serializers.CharField(allow_blank=True, max_length=50, required=False, default="")
        chip = serializers.CharField(allow_blank=True, max_length=100, required=False, default="")
        runner_command = serializers.CharField(
            allow_blank=True,
            max_length=1000,
            required=False,
            default="",
            help_text="A hardware target's: the runner the host runs.",
        )
        runner_digest = serializers.CharField(
            allow_blank=True,
            max_length=64,
            required=False,
            default="",
            help_text="A hardware target's: the SHA-256 of what its runner command runs as the host reads it "
            "(the executable, the files its arguments name, a `-m` module's file; docs/deploy.md).",
        )

    class AgentRegisterOutputSerializer(serializers.Serializer):
        agent = serializers.IntegerField(source="pk")
        target = serializers.CharField(source="target.slug")
        kind = serializers.CharField(source="target.kind")

    @extend_schema(request=AgentRegisterInputSerializer, responses=AgentRegisterOutputSerializer)
    def post(self, request):
        """Register this host's agent by its public key (each start: its host and version may change). A board's
        first registration, and versions, chip or runner that differ from the target's, wait for a PM's or
        operator's approval, the target out of rotation meanwhile (the targets API's `registration_pending`)."""
        data = self.AgentRegisterInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = agent_register(token=request.auth, registration=AgentRegistration(**data.validated_data))
        return Response(self.AgentRegisterOutputSerializer(agent).data)


class AgentClaimApi(_TargetApi):
    class AgentClaimInputSerializer(StrictSerializer):
        agent = serializers.IntegerField()
        cache_bytes = serializers.IntegerField(min_value=0, required=False, default=0)

    class AgentClaimOutputSerializer(serializers.Serializer):
        run = serializers.IntegerField()
        run_token = serializers.CharField(help_text="`Authorization: Run <run_token>` for this attempt's calls.")
        job = serializers.JSONField(help_text="The inputs by SHA-256, the runner's job, its files and limits.")

    @extend_schema(
        request=AgentClaimInputSerializer,
        responses={200: AgentClaimOutputSerializer, 204: OpenApiResponse(description="No run waits for this target.")},
    )
    def post(self, request):
        """Claim the target's next queued run for one attempt (the oldest first); 204 when none waits."""
        data = self.AgentClaimInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = agent_for_token(request.auth, data.validated_data["agent"])
        claimed = agent_claim_next(token=request.auth, agent=agent, cache_bytes=data.validated_data["cache_bytes"])
        if claimed is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        run, key, job = claimed
        return Response(self.AgentClaimOutputSerializer({"run": run.pk, "run_token": key, "job": job}).data)


class AgentRunInputApi(_RunApi):
    renderer_classes = [BinaryRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "Range", OpenApiTypes.STR, OpenApiParameter.HEADER, description="One byte range, e.g. bytes=1024-."
            )
        ],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="The whole file."),
            (206, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="The range asked for."),
            416: OpenApiResponse(ErrorSerializer, description="The range lies outside the file (field `Range`)."),
        },
    )
    def get(self, request, run_id, sha256):
        """One input of the run by its SHA-256, resumable with a single HTTP Range."""
        found = run_input_blob(request.auth, sha256)
        if isinstance(found, Path):  # the health job's known-good package, on the server's disk
            path = found
            return file_response(
                request, open_file=lambda: path.open("rb"), size=path.stat().st_size, sha256=sha256, file_name=sha256
            )
        storage, name = artifact_storage(), found.storage_name
        return file_response(
            request, open_file=lambda: storage.open(name, "rb"), size=found.size, sha256=sha256, file_name=sha256
        )


class _Chunk(StrictSerializer):
    index = serializers.IntegerField(min_value=0)
    stream = serializers.ChoiceField(choices=["stdout", "stderr"])
    text = serializers.CharField(allow_blank=True, trim_whitespace=False)


class AgentHeartbeatApi(_RunApi):
    class AgentHeartbeatInputSerializer(StrictSerializer):
        chunks = _Chunk(many=True, required=False, default=list)

    @extend_schema(
        request=AgentHeartbeatInputSerializer, responses={204: OpenApiResponse(description="The lease is renewed.")}
    )
    def post(self, request, run_id):
        """Renew the run's lease and add its output (chunks numbered from 0; one sent again is written once)."""
        data = self.AgentHeartbeatInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_heartbeat(token=request.auth, chunks=data.validated_data["chunks"])
        return Response(status=status.HTTP_204_NO_CONTENT)


class RawJsonParser(BaseParser):
    """The body as sent: the signature is over its exact bytes."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read()


class _Timing(StrictSerializer):
    fetch = serializers.FloatField(min_value=0, required=False, help_text="Seconds fetching the inputs.")
    runner = serializers.FloatField(min_value=0, required=False, help_text="Seconds the runner ran.")


class AgentResultApi(_RunApi):
    parser_classes = [RawJsonParser]
    max_body_bytes = RESULT_BODY_MAX_BYTES

    class AgentResultInputSerializer(StrictSerializer):
        run = serializers.IntegerField(help_text="The run the result is for, as claimed (signed with the rest).")
        attempt = serializers.IntegerField(help_text="The attempt the result is for, as claimed.")
        chunks = _Chunk(many=True, required=False, default=list)
        exit_code = serializers.IntegerField(allow_null=True)
        limit_hit = serializers.CharField(allow_null=True)
        reason = serializers.CharField(allow_blank=True, max_length=2000)
        sandbox = serializers.DictField(help_text="What the sandbox recorded (`detached_processes` among it).")
        result_file = serializers.CharField(
            allow_null=True, help_text="Base64 of the runner's result file; null when it wrote none."
        )
        measurements = serializers.DictField(
            child=serializers.CharField(),
            required=False,
            default=dict,
            help_text="Base64 of each file the job's `measurements` names that the runner wrote, by name.",
        )
        timing = _Timing(required=False, default=dict)

    class AgentResultOutputSerializer(serializers.Serializer):
        run = serializers.IntegerField(source="pk")
        state = serializers.CharField()
        verdict = serializers.CharField()
        reason = serializers.CharField()

    @extend_schema(
        request=AgentResultInputSerializer,
        parameters=[
            OpenApiParameter(
                SIGNATURE_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=True,
                description="Base64 Ed25519 signature of the body's bytes with the agent's registered key.",
            )
        ],
        responses=AgentResultOutputSerializer,
    )
    def post(self, request, run_id):
        """How the runner ended, signed; the server judges the verdict. Sent twice, it is one verdict."""
        received = time.monotonic()  # the post's time starts before its body is read
        body = request.data if isinstance(request.data, bytes) else b""
        try:
            parsed = storable_json_loads(body)  # its sandbox record is stored as sent
        except ValueError as error:  # bad JSON or UTF-8, or what jsonb cannot store
            raise exceptions.ParseError(gettext("The body is not JSON: %(error)s") % {"error": error}) from error
        data = self.AgentResultInputSerializer(data=parsed)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        try:
            result_file = base64.b64decode(fields["result_file"], validate=True) if fields["result_file"] else None
        except ValueError as error:
            raise serializers.ValidationError({"result_file": [gettext("Not base64.")]}) from error
        measurements = {}
        for name, text in fields["measurements"].items():
            try:
                measurements[name] = base64.b64decode(text, validate=True)
            except ValueError as error:
                raise serializers.ValidationError({f"measurements.{name}": [gettext("Not base64.")]}) from error
            if len(measurements[name]) > MEASUREMENT_MAX_BYTES:
                larger = gettext("Larger than %(mib)s MiB.") % {"mib": MEASUREMENT_MAX_BYTES // 1024**2}
                raise serializers.ValidationError({f"measurements.{name}": [larger]})
        detached = fields["sandbox"].get("detached_processes", 0)
        if not isinstance(detached, int) or isinstance(detached, bool) or detached < 0:
            raise serializers.ValidationError({"sandbox.detached_processes": [gettext("A whole number, 0 or more.")]})
        report = RunReport(
            run=fields["run"],
            attempt=fields["attempt"],
            chunks=fields["chunks"],
            end=RunnerEnd(
                fields["exit_code"],
                fields["limit_hit"],
                fields["reason"],
                fields["sandbox"],
                detached,
            ),
            result_file=result_file,
            measurements=measurements,
            timing=dict(fields["timing"]),
        )
        signature = request.headers.get(SIGNATURE_HEADER, "")
        run = run_result(token=request.auth, body=body, signature=signature, report=report, received=received)
        return Response(self.AgentResultOutputSerializer(run).data)
