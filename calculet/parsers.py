"""The API's body parser for JSON operations (its own module: DRF imports it while its views load)."""

import json

from django.conf import settings
from django.utils.translation import gettext_noop
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from calculet.errors import DomainError
from calculet.json_text import JSON_MAX_DEPTH, json_depth_exceeded


def _object_without_repeated_keys(pairs: list[tuple[str, object]]) -> dict:
    """An object whose keys are unique: JSON lets a parser keep any one of a repeated key's values, so a
    repeated key is refused rather than read as the sender may not have meant."""
    data: dict = {}
    for key, value in pairs:
        if key in data:
            raise DomainError(
                gettext_noop("The key %(key)r appears more than once in one object."),
                field=key,
                code="duplicate_key",
                params={"key": key},
            )
        data[key] = value
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


class JsonParser(JSONParser):
    """The API's only body format for JSON operations. A body nested deeper than JSON_MAX_DEPTH is refused
    before parsing (Python's parser would recurse until the interpreter gives up); a key repeated in one
    object, and NaN or Infinity, are refused."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read()
        if json_depth_exceeded(body, JSON_MAX_DEPTH):
            raise exceptions.ParseError(f"JSON nested deeper than {JSON_MAX_DEPTH} levels.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.loads(
                body.decode(encoding), object_pairs_hook=_object_without_repeated_keys, parse_constant=_no_constant
            )
        except ValueError as error:  # bad JSON, bad UTF-8
            raise exceptions.ParseError(f"JSON parse error - {error}") from error
