from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from calculet.api import Api, StrictSerializer
from calculet.errors import NotFoundError
from vendor.access import user_membership
from vendor.inputs import TOKEN_NAME_MAX_CHARS
from vendor.models import ApiToken, Organisation
from vendor.selectors import organisation_list, token_list
from vendor.services.organisations import token_create, token_revoke


class MeOutputSerializer(serializers.Serializer):
    username = serializers.CharField()
    organisation = serializers.CharField(allow_null=True)
    organisation_kind = serializers.CharField(allow_null=True)
    role = serializers.CharField(allow_null=True)


class MeApi(Api):
    @extend_schema(responses=MeOutputSerializer)
    def get(self, request):
        """Who the token or session belongs to."""
        membership = user_membership(request.user)
        data = {
            "username": request.user.get_username(),
            "organisation": membership.organisation.slug if membership else None,
            "organisation_kind": membership.organisation.kind if membership else None,
            "role": membership.role if membership else None,
        }
        return Response(MeOutputSerializer(data).data)


class OrganisationOutputSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Organisation.KINDS)


class OrganisationListApi(Api, ListAPIView):
    """Every organisation for the integration team; your own for a vendor."""

    queryset = Organisation.objects.none()  # names the model for the filters; get_queryset scopes it
    serializer_class = OrganisationOutputSerializer
    filterset_fields = ["kind"]
    ordering_fields = ["slug", "name"]

    def get_queryset(self):
        return organisation_list(user=self.request.user)


class TokenOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first characters, to recognise it.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)


class TokenCreatedSerializer(TokenOutputSerializer):
    key = serializers.CharField(help_text="Shown this once; only its hash is stored.")


class TokenCreateInputSerializer(StrictSerializer):
    name = serializers.CharField(max_length=TOKEN_NAME_MAX_CHARS)
    expires_at = serializers.DateTimeField(required=False, help_text="At most a year ahead; 90 days by default.")


class TokenListApi(Api, ListAPIView):
    """Your own API tokens."""

    queryset = ApiToken.objects.none()  # names the model for the schema; get_queryset scopes it
    serializer_class = TokenOutputSerializer
    ordering_fields = ["created_at", "name"]
    ordering = ["-created_at"]

    def get_queryset(self):
        return token_list(user=self.request.user)

    @extend_schema(request=TokenCreateInputSerializer, responses={201: TokenCreatedSerializer})
    def post(self, request):
        serializer = TokenCreateInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, key = token_create(actor=request.user, user=request.user, **serializer.validated_data)
        token.key = key
        return Response(TokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)


class TokenDetailApi(Api):
    @extend_schema(responses={204: None})
    def delete(self, request, token_id):
        """Revoke one of your tokens, for good."""
        token = token_list(user=request.user).filter(pk=token_id).first()
        if token is None:
            raise NotFoundError(gettext_noop("Token %(value)s not found."), params={"value": token_id})
        token_revoke(actor=request.user, token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
