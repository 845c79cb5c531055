"""The API's body parser for JSON operations (its own module: DRF imports it while its views load)."""

import json

from django.conf import settings
from django.utils.translation import gettext, gettext_noop
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from calculet.errors import DomainError

# Answers nest three levels deep; nothing the API reads needs more than a few.
JSON_MAX_DEPTH = 32


def json_depth_exceeded(body: bytes, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than `limit`: one pass, before the parser recurses."""
    depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


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
            raise exceptions.ParseError(
                gettext("JSON nested deeper than %(depth)s levels.") % {"depth": JSON_MAX_DEPTH}
            )
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.loads(
                body.decode(encoding), object_pairs_hook=_object_without_repeated_keys, parse_constant=_no_constant
            )
        except ValueError as error:  # bad JSON, bad UTF-8
            raise exceptions.ParseError(gettext("JSON parse error - %(error)s") % {"error": error}) from error
