import django_filters
from django.conf import settings
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_noop
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from calculet.api import Api, BinaryRenderer, ErrorSerializer, StrictSerializer
from calculet.downloads import file_response
from calculet.errors import NotFoundError
from vendor.access import object_for_user
from vendor.inputs import ARTIFACT_FILE_NAME_MAX_CHARS, SHA256_PATTERN, artifact_declaration
from vendor.models import Artifact
from vendor.selectors import artifact_list
from vendor.services.artifacts import artifact_upload, artifact_uploader_organisation
from vendor.storage import artifact_storage

MULTIPART_OVERHEAD_BYTES = 64 * 1024


class ArtifactOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    organisation = serializers.CharField(source="organisation.slug")
    kind = serializers.ChoiceField(choices=Artifact.KINDS)
    version = serializers.CharField()
    file_name = serializers.CharField()
    size = serializers.IntegerField(source="declared_size")
    sha256 = serializers.CharField(source="declared_sha256")
    state = serializers.ChoiceField(choices=Artifact.STATES)
    rejection_reason = serializers.CharField()
    uploaded_by = serializers.CharField(source="uploaded_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()
    verified_at = serializers.DateTimeField(allow_null=True)
    download_url = serializers.SerializerMethodField()

    def get_download_url(self, artifact) -> str | None:
        if artifact.state != Artifact.VERIFIED:
            return None
        return reverse("api:artifact-download", kwargs={"artifact_id": artifact.pk})


class ArtifactUploadInputSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=Artifact.KINDS)
    version = serializers.CharField(max_length=100)
    file_name = serializers.CharField(
        max_length=ARTIFACT_FILE_NAME_MAX_CHARS, required=False, help_text="Defaults to the uploaded file's name."
    )
    sha256 = serializers.RegexField(
        SHA256_PATTERN,
        help_text="The SHA-256 of the file, 64 lowercase hex digits.",
        error_messages={"invalid": "The SHA-256 is 64 lowercase hexadecimal digits."},
    )
    file = serializers.FileField(allow_empty_file=True, use_url=False)


class ArtifactFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=Artifact.KINDS)
    state = django_filters.ChoiceFilter(choices=Artifact.STATES)
    organisation = django_filters.CharFilter(field_name="organisation__slug")
    sha256 = django_filters.CharFilter(field_name="declared_sha256")

    class Meta:
        model = Artifact
        fields = ["kind", "state", "version", "file_name", "organisation", "sha256"]


class ArtifactListApi(Api, ListAPIView):
    """Your organisation's artifacts (every organisation's for the integration team)."""

    serializer_class = ArtifactOutputSerializer
    filterset_class = ArtifactFilter
    ordering_fields = ["created_at", "version", "file_name", "kind"]
    ordering = ["-created_at", "-id"]
    parser_classes = [MultiPartParser]
    error_statuses = ["507"]

    @property
    def max_body_bytes(self):
        return settings.UPLOAD_PLAIN_MAX_BYTES + MULTIPART_OVERHEAD_BYTES

    def get_queryset(self):
        return artifact_list(user=self.request.user)

    @extend_schema(request=ArtifactUploadInputSerializer, responses={201: ArtifactOutputSerializer})
    def post(self, request):
        """Upload a small file in one request (multipart/form-data). Larger files go through /api/v1/uploads/ (tus)."""
        serializer = ArtifactUploadInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        upload = data["file"]
        # Before the declaration is read, so one who may not upload is told so whatever they declare.
        artifact_uploader_organisation(request.user)
        declaration = artifact_declaration(
            kind=data["kind"],
            version=data["version"],
            file_name=data.get("file_name", upload.name),
            sha256=data["sha256"],
        )
        artifact = artifact_upload(actor=request.user, stream=upload, declaration=declaration)
        return Response(ArtifactOutputSerializer(artifact).data, status=status.HTTP_201_CREATED)


class ArtifactDetailApi(Api):
    @extend_schema(responses=ArtifactOutputSerializer)
    def get(self, request, artifact_id):
        artifact = object_for_user(request.user, Artifact.objects, pk=artifact_id)
        return Response(ArtifactOutputSerializer(artifact_list(user=request.user).get(pk=artifact.pk)).data)


def _is_local(storage, name: str) -> bool:
    try:
        storage.path(name)
    except NotImplementedError:
        return False
    return True


class ArtifactDownloadApi(Api):
    renderer_classes = [JSONRenderer, BinaryRenderer]
    query_parameters = ("format",)  # ?format=bin, as Accept: application/octet-stream

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "Range", OpenApiTypes.STR, OpenApiParameter.HEADER, description="One byte range, e.g. bytes=0-1023."
            ),
            OpenApiParameter(
                "If-None-Match",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description='ETags held, e.g. "<sha256>": 304 when one of them (or *) is the file\'s.',
            ),
        ],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="The whole file."),
            (206, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="The range asked for."),
            302: OpenApiResponse(description="With S3 storage: a short-lived signed URL to the bytes."),
            304: OpenApiResponse(description="If-None-Match names the file's ETag (its SHA-256): not sent again."),
            416: OpenApiResponse(ErrorSerializer, description="The range lies outside the file (field `Range`)."),
        },
    )
    def get(self, request, artifact_id):
        """The verified bytes. Honours a single HTTP Range, and If-None-Match against the ETag (the SHA-256)."""
        artifact = object_for_user(request.user, Artifact.objects, pk=artifact_id)
        if artifact.state != Artifact.VERIFIED:
            raise NotFoundError(
                gettext_noop("Artifact %(artifact_id)s has no verified bytes."), params={"artifact_id": artifact_id}
            )
        storage = artifact_storage()
        if not _is_local(storage, artifact.blob.storage_name):
            # A remote store (S3) serves the bytes, ranges included, from a short-lived signed URL made only
            # after the access check above.
            return HttpResponseRedirect(storage.url(artifact.blob.storage_name))
        name = artifact.blob.storage_name
        return file_response(
            request,
            open_file=lambda: storage.open(name, "rb"),
            size=artifact.blob.size,
            sha256=artifact.blob.sha256,
            file_name=artifact.file_name,
        )
