"""The API's body parser for JSON operations (its own module: DRF imports it while its views load)."""

import json

from django.conf import settings
from django.utils.translation import gettext, gettext_noop
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from calculet.errors import DomainError
from calculet.json_text import JSON_MAX_DEPTH, json_depth_exceeded


class _Repeated(dict):
    """What an object holding a repeated key parses to: the key, and its path below this object, which each
    enclosing object prefixes with its own name as it closes (the parser builds the innermost object first)."""

    def __init__(self, key: str, path: str):
        super().__init__()
        self.key, self.path = key, path


def _joined(name: str, path: str) -> str:
    return f"{name}{path}" if path.startswith("[") else f"{name}.{path}"


def _repeated_in(value) -> _Repeated | None:
    """The repeated key in `value`: an object that held one, or an array (of arrays) holding such an object."""
    if isinstance(value, _Repeated):
        return value
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _repeated_in(item)
            if found is not None:
                return _Repeated(found.key, _joined(f"[{index}]", found.path))
    return None


def _object_without_repeated_keys(pairs: list[tuple[str, object]]) -> dict:
    """An object whose keys are unique: JSON lets a parser keep any one of a repeated key's values, so a
    repeated key is refused (by `JsonParser`, naming its path) rather than read as the sender may not have
    meant."""
    data: dict = {}
    for key, value in pairs:
        if key in data:
            return _Repeated(key, key)
        data[key] = value
    for key, value in pairs:
        found = _repeated_in(value)
        if found is not None:
            return _Repeated(found.key, _joined(key, found.path))
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


class JsonParser(JSONParser):
    """The API's only body format for JSON operations. A body nested deeper than JSON_MAX_DEPTH is refused
    before parsing (Python's parser would recurse until the interpreter gives up); a key repeated in one
    object (the error names its path, `golden.tolerances.max_abs`), and NaN or Infinity, are refused."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read()
        if json_depth_exceeded(body, JSON_MAX_DEPTH):
            raise exceptions.ParseError(
                gettext("JSON nested deeper than %(depth)s levels.") % {"depth": JSON_MAX_DEPTH}
            )
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            document = json.loads(
                body.decode(encoding), object_pairs_hook=_object_without_repeated_keys, parse_constant=_no_constant
            )
        except ValueError as error:  # bad JSON, bad UTF-8
            raise exceptions.ParseError(gettext("JSON parse error - %(error)s") % {"error": error}) from error
        repeated = _repeated_in(document)
        if repeated is not None:
            raise DomainError(
                gettext_noop("The key %(key)r appears more than once in one object."),
                field=repeated.path,
                code="duplicate_key",
                params={"key": repeated.key},
            )
        return document
