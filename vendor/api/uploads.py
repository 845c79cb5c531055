"""The tus 1.0 resumable upload protocol: core, creation, checksum (sha256), termination and expiration.

The body of a PATCH is read straight from the request stream, a chunk at a time, and never through
`request.data`/`request.body`, so Django never holds it in memory. As tus core asks, `X-HTTP-Method-Override`
on a POST names the method meant (PATCH or DELETE, for clients behind proxies that pass only GET and POST),
and OPTIONS tells the protocol's version and extensions without a token.
"""

import base64
import binascii
import io

from django.conf import settings
from django.urls import reverse
from django.utils.http import http_date
from django.utils.translation import gettext_noop
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import MethodNotAllowed
from rest_framework.generics import ListAPIView
from rest_framework.parsers import BaseParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from calculet.api import Api
from calculet.errors import DomainError, PayloadTooLargeError
from vendor.access import object_for_user
from vendor.inputs import ArtifactDeclaration, artifact_declaration
from vendor.models import Upload
from vendor.selectors import upload_list
from vendor.services.artifacts import artifact_uploader_organisation
from vendor.services.uploads import upload_append, upload_check_open, upload_create, upload_terminate

TUS_VERSION = "1.0.0"
TUS_EXTENSIONS = "creation,checksum,termination,expiration"
CHUNK_CONTENT_TYPE = "application/offset+octet-stream"
METADATA_MAX_BYTES = 4096
# A pair: a key of printable ASCII without space or comma, then optionally a space and its value in base64;
# pairs separated by commas (spaces around them allowed). No space leads or ends the value: HTTP drops them.
_METADATA_PAIR = r"[!-+\--~]+( (?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?)?"
METADATA_PATTERN = f"^{_METADATA_PAIR}( *, *{_METADATA_PAIR})*$"
# sha1 because the checksum extension requires every server to support it; sha256 because we want it.
CHECKSUM_ALGORITHMS = {"sha1": 20, "sha256": 32}
# The protocol's own requests carry Tus-Resumable; GET (progress as JSON) is plain REST.
TUS_METHODS = {"POST", "HEAD", "PATCH", "DELETE"}
# The methods a POST may stand for with X-HTTP-Method-Override.
OVERRIDABLE_METHODS = {"PATCH", "DELETE"}


class TusVersionError(DomainError):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    code = "tus_version"


class LengthRequiredError(DomainError):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    code = "length_required"


class UnsupportedMediaTypeError(DomainError):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    code = "unsupported_media_type"


class HeaderTooLargeError(DomainError):
    status_code = status.HTTP_431_REQUEST_HEADER_FIELDS_TOO_LARGE
    code = "header_too_large"


class TokenUnlessOptions(IsAuthenticated):
    """A token for everything but OPTIONS, which only tells what the server speaks (tus clients and browsers'
    CORS preflights send it without one)."""

    def has_permission(self, request, view):
        return request.method == "OPTIONS" or super().has_permission(request, view)


class ChunkParser(BaseParser):
    """Names the chunk media type for content negotiation and the schema. Chunks are never parsed: the
    view reads them from the stream."""

    media_type = CHUNK_CONTENT_TYPE

    def parse(self, stream, media_type=None, parser_context=None):
        raise DomainError(gettext_noop("A chunk is not parsed."), field="body")


def _unsigned(request, header: str) -> int:
    value = request.headers.get(header)
    if value is None:
        raise DomainError(gettext_noop("The %(header)s header is required."), field=header, params={"header": header})
    if not (value.isascii() and value.isdigit()) or len(value) > 20:
        raise DomainError(
            gettext_noop("%(header)s must be a non-negative integer."), field=header, params={"header": header}
        )
    return int(value)


def metadata_parse(header: str) -> dict[str, str]:
    """Upload-Metadata: comma-separated `key base64(value)` pairs, keys unique."""
    if len(header.encode()) > METADATA_MAX_BYTES:
        raise HeaderTooLargeError(
            gettext_noop("Upload-Metadata holds at most %(limit)s bytes."),
            field="Upload-Metadata",
            params={"limit": METADATA_MAX_BYTES},
        )
    metadata = {}
    for pair in header.split(","):
        parts = pair.strip().split(" ")
        key = parts[0]
        if not key or len(parts) > 2 or not key.isascii() or not key.isprintable():
            raise DomainError(
                gettext_noop("Malformed Upload-Metadata pair %(pair)r."),
                field="Upload-Metadata",
                params={"pair": pair.strip()},
            )
        if key in metadata:
            raise DomainError(
                gettext_noop("Upload-Metadata repeats %(key)s."), field=f"Upload-Metadata.{key}", params={"key": key}
            )
        try:
            value = base64.b64decode(parts[1], validate=True).decode() if len(parts) == 2 else ""
        except (binascii.Error, UnicodeDecodeError) as error:
            raise DomainError(
                gettext_noop("%(key)s is not base64-encoded UTF-8."),
                field=f"Upload-Metadata.{key}",
                params={"key": key},
            ) from error
        metadata[key] = value
    return metadata


# The keys Upload-Metadata must hold, by the name `artifact_declaration` gives each.
DECLARATION_KEYS = {"kind": "kind", "version": "version", "filename": "file_name", "sha256": "sha256"}


def upload_declaration(metadata: dict[str, str]) -> ArtifactDeclaration:
    """The artifact an Upload-Metadata header declares; DomainError on Upload-Metadata.<key> when a key is
    missing or its value cannot be one. Keys besides these are ignored."""
    for key in DECLARATION_KEYS:
        if key not in metadata:
            raise DomainError(
                gettext_noop("Upload-Metadata lacks %(key)s."), field=f"Upload-Metadata.{key}", params={"key": key}
            )
    return artifact_declaration(
        **{name: metadata[key] for key, name in DECLARATION_KEYS.items()},
        field_names={key: f"Upload-Metadata.{key}" for key in DECLARATION_KEYS},
    )


def metadata_header(metadata: dict[str, str]) -> str:
    return ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in metadata.items())


def _chunk_checksum(request) -> tuple[str, bytes] | None:
    value = request.headers.get("Upload-Checksum")
    if value is None:
        return None
    algorithm, _, encoded = value.strip().partition(" ")
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise DomainError(
            gettext_noop("Upload-Checksum supports %(algorithms)s."),
            field="Upload-Checksum",
            code="unsupported",
            params={"algorithms": list(CHECKSUM_ALGORITHMS)},
        )
    try:
        digest = base64.b64decode(encoded.strip(), validate=True)
    except binascii.Error:
        digest = b""
    if len(digest) != CHECKSUM_ALGORITHMS[algorithm]:
        raise DomainError(
            gettext_noop("Upload-Checksum is `%(algorithm)s <base64 digest>`."),
            field="Upload-Checksum",
            params={"algorithm": algorithm},
        )
    return algorithm, digest


class UploadOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.CharField(source="metadata.kind")
    version = serializers.CharField(source="metadata.version")
    filename = serializers.CharField(source="metadata.filename")
    sha256 = serializers.CharField(source="metadata.sha256")
    length = serializers.IntegerField()
    offset = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    artifact = serializers.IntegerField(source="artifact.pk", allow_null=True, default=None)
    artifact_state = serializers.CharField(source="artifact.state", allow_null=True, default=None)
    rejection_reason = serializers.CharField(source="artifact.rejection_reason", allow_null=True, default=None)


TUS_RESUMABLE = OpenApiParameter(
    "Tus-Resumable", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True, enum=[TUS_VERSION]
)
TUS_HEADERS_204 = OpenApiResponse(description="Done; see the Upload-Offset and Upload-Expires headers.")


class TusApi(Api):
    max_body_bytes = None
    parser_classes = [ChunkParser]
    permission_classes = [TokenUnlessOptions]
    error_statuses = ["410", "412", "431"]

    def dispatch(self, request, *args, **kwargs):
        override = request.headers.get("X-HTTP-Method-Override", "").strip().upper()
        if request.method == "POST" and override in OVERRIDABLE_METHODS:
            request.method = override
        return super().dispatch(request, *args, **kwargs)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method == "POST" and "X-HTTP-Method-Override" in request.headers:  # one it could not take
            raise DomainError(
                gettext_noop("X-HTTP-Method-Override names %(methods)s on a POST."),
                field="X-HTTP-Method-Override",
                params={"methods": sorted(OVERRIDABLE_METHODS)},
            )
        # A method the URL does not take is 405 whatever the tus headers say.
        if not hasattr(self, request.method.lower()) or request.method.lower() not in self.http_method_names:
            raise MethodNotAllowed(request.method)
        if request.method in TUS_METHODS and request.headers.get("Tus-Resumable") != TUS_VERSION:
            raise TusVersionError(
                gettext_noop("This server speaks tus %(version)s."),
                field="Tus-Resumable",
                params={"version": TUS_VERSION},
            )

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Tus-Resumable"] = TUS_VERSION
        response["Cache-Control"] = "no-store"
        if request.method == "OPTIONS" or response.status_code == status.HTTP_412_PRECONDITION_FAILED:
            response["Tus-Version"] = TUS_VERSION
        return response

    @extend_schema(exclude=True)
    def options(self, request, *args, **kwargs):
        response = Response(status=status.HTTP_204_NO_CONTENT)
        response["Tus-Extension"] = TUS_EXTENSIONS
        response["Tus-Max-Size"] = str(settings.UPLOAD_MAX_BYTES)
        response["Tus-Checksum-Algorithm"] = ",".join(CHECKSUM_ALGORITHMS)
        return response


def _upload_headers(response, upload) -> Response:
    response["Upload-Offset"] = str(upload.offset)
    if upload.artifact_id is None:
        response["Upload-Expires"] = http_date(upload.expires_at.timestamp())
    else:
        response["Upload-Artifact"] = reverse("api:artifact-detail", kwargs={"artifact_id": upload.artifact_id})
    return response


class UploadListApi(TusApi, ListAPIView):
    """Resumable uploads (tus 1.0). POST creates one; its bytes then go by PATCH to the returned Location."""

    serializer_class = UploadOutputSerializer
    ordering_fields = ["created_at"]
    ordering = ["-created_at"]

    def get_queryset(self):
        return upload_list(user=self.request.user)

    @extend_schema(
        request=None,
        parameters=[
            TUS_RESUMABLE,
            OpenApiParameter(
                "Upload-Length", {"type": "integer", "minimum": 1}, OpenApiParameter.HEADER, required=True
            ),
            OpenApiParameter(
                "Upload-Metadata",
                {"type": "string", "maxLength": METADATA_MAX_BYTES, "pattern": METADATA_PATTERN},
                OpenApiParameter.HEADER,
                required=True,
                description="Comma-separated `key base64(value)` pairs, each key once: kind, version, filename and "
                f"sha256 (hex) are required. At most {METADATA_MAX_BYTES} bytes (431 beyond).",
            ),
        ],
        responses={201: OpenApiResponse(description="Created; the upload's URL is in the Location header.")},
    )
    def post(self, request):
        if "Upload-Defer-Length" in request.headers:
            raise DomainError(
                gettext_noop("Give the length with Upload-Length."),
                field="Upload-Defer-Length",
                code="unsupported",
            )
        length = _unsigned(request, "Upload-Length")
        if length == 0:
            raise DomainError(gettext_noop("An artifact has at least one byte."), field="Upload-Length")
        if "Upload-Metadata" not in request.headers:
            raise DomainError(gettext_noop("The Upload-Metadata header is required."), field="Upload-Metadata")
        metadata = metadata_parse(request.headers["Upload-Metadata"])
        # Before the declaration is read, so one who may not upload is told so whatever they declare.
        artifact_uploader_organisation(request.user)
        declaration = upload_declaration(metadata)
        if length > settings.UPLOAD_MAX_BYTES:
            raise PayloadTooLargeError(
                gettext_noop("At most %(limit)s bytes may be uploaded; %(size)s declared."),
                field="Upload-Length",
                params={"limit": settings.UPLOAD_MAX_BYTES, "size": length},
            )
        upload = upload_create(actor=request.user, length=length, declaration=declaration)
        response = _upload_headers(Response(status=status.HTTP_201_CREATED), upload)
        response["Location"] = request.build_absolute_uri(reverse("api:upload-detail", kwargs={"upload_id": upload.pk}))
        return response


class UploadDetailApi(TusApi):
    error_statuses = ["410", "411", "412", "415", "423", "431", "460", "507"]

    def head(self, request, upload_id):
        upload = object_for_user(request.user, Upload.objects, pk=upload_id)
        upload_check_open(upload)
        response = _upload_headers(Response(status=status.HTTP_200_OK), upload)
        response["Upload-Length"] = str(upload.length)
        response["Upload-Metadata"] = metadata_header(upload.metadata)
        return response

    @extend_schema(responses=UploadOutputSerializer)
    def get(self, request, upload_id):
        """The upload's progress, and once complete the artifact it became (verified or rejected)."""
        upload = upload_list(user=request.user).get(pk=object_for_user(request.user, Upload.objects, pk=upload_id).pk)
        return _upload_headers(Response(UploadOutputSerializer(upload).data), upload)

    @extend_schema(
        request={CHUNK_CONTENT_TYPE: OpenApiTypes.BINARY},
        parameters=[
            TUS_RESUMABLE,
            OpenApiParameter(
                "Upload-Offset", {"type": "integer", "minimum": 0}, OpenApiParameter.HEADER, required=True
            ),
            OpenApiParameter(
                "Upload-Checksum",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="sha256 <base64 digest> (sha1 too)",
            ),
        ],
        responses={204: TUS_HEADERS_204},
    )
    def patch(self, request, upload_id):
        """Append bytes at Upload-Offset. The last chunk verifies the whole file against the declared SHA-256.
        A chunk gives its Content-Length: a chunked (Transfer-Encoding) body is refused with 411. A termination
        while the chunk is sent ends it with 404."""
        upload = object_for_user(request.user, Upload.objects, pk=upload_id)
        if request.content_type.split(";")[0].strip() != CHUNK_CONTENT_TYPE:
            raise UnsupportedMediaTypeError(
                gettext_noop("A chunk is sent as %(content_type)s."),
                field="Content-Type",
                params={"content_type": CHUNK_CONTENT_TYPE},
            )
        if not request.META.get("CONTENT_LENGTH"):
            raise LengthRequiredError(gettext_noop("Give the chunk's Content-Length."), field="Content-Length")
        content_length = _unsigned(request, "Content-Length")
        offset = _unsigned(request, "Upload-Offset")
        checksum = _chunk_checksum(request)
        upload = upload_append(
            actor=request.user,
            upload=upload,
            offset=offset,
            stream=request.stream or io.BytesIO(),
            content_length=content_length,
            chunk_checksum=checksum,
        )
        return _upload_headers(Response(status=status.HTTP_204_NO_CONTENT), upload)

    @extend_schema(parameters=[TUS_RESUMABLE], responses={204: OpenApiResponse(description="Terminated.")})
    def delete(self, request, upload_id):
        """Terminate the upload: its partial bytes are deleted (tus termination)."""
        upload_terminate(actor=request.user, upload=object_for_user(request.user, Upload.objects, pk=upload_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _header(description: str, schema_type: str = "string") -> dict:
    return {"description": description, "schema": {"type": schema_type}}


OFFSET_HEADER = _header("How many bytes the server holds: the offset to send the next chunk from.", "integer")
EXPIRES_HEADER = _header("When an unfinished upload expires (an HTTP date).")
ARTIFACT_HEADER = _header("The artifact a finished upload became.")
TUS_RESUMABLE_HEADER = _header("The tus version the server speaks: 1.0.0.")


def tus_schema(result, generator, request, public):
    """drf-spectacular leaves HEAD out of every schema, and tus resumes with it: this hook adds the upload's
    HEAD operation and names the headers tus answers with on each tus operation."""
    upload = result["paths"].get("/api/v1/uploads/{upload_id}/")
    if upload is None:
        return result
    delete = upload["delete"]
    upload["head"] = {
        "operationId": "uploads_offset",
        "description": "Where to resume: the offset the server holds, the upload's length and metadata.",
        "parameters": delete["parameters"],
        "tags": delete["tags"],
        "security": delete["security"],
        "responses": {
            "200": {
                "description": "The upload as the server holds it (no body).",
                "headers": {
                    "Upload-Offset": OFFSET_HEADER,
                    "Upload-Length": _header("The upload's whole length in bytes.", "integer"),
                    "Upload-Metadata": _header("The metadata given at creation, each value base64-encoded."),
                    "Upload-Expires": EXPIRES_HEADER,
                    "Upload-Artifact": ARTIFACT_HEADER,
                    "Tus-Resumable": TUS_RESUMABLE_HEADER,
                },
            },
            "401": {"description": "No valid token; no body."},
            "404": {"description": "No such upload (another organisation's included); no body."},
            "410": {"description": "The upload expired; no body."},
            "412": {"description": "Tus-Resumable is missing or names another version; no body."},
        },
    }
    upload["patch"]["responses"]["204"]["headers"] = {
        "Upload-Offset": OFFSET_HEADER,
        "Upload-Expires": EXPIRES_HEADER,
        "Upload-Artifact": ARTIFACT_HEADER,
        "Tus-Resumable": TUS_RESUMABLE_HEADER,
    }
    created = result["paths"]["/api/v1/uploads/"]["post"]["responses"]["201"]
    created["headers"] = {
        "Location": _header("The upload's URL, to PATCH its bytes to."),
        "Upload-Offset": OFFSET_HEADER,
        "Upload-Expires": EXPIRES_HEADER,
        "Tus-Resumable": TUS_RESUMABLE_HEADER,
    }
    return result
