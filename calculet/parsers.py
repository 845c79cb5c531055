"""The API's body parser for JSON operations (its own module: DRF imports it while its views load)."""

import json
from decimal import Decimal

from django.conf import settings
from django.utils.translation import gettext, gettext_noop
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from calculet.errors import DomainError
from calculet.json_text import JSON_MAX_DEPTH, json_depth_exceeded, refuse_constant


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


# A whole number written with a fraction or an exponent is read as the integer it is up to this many digits
# (an id, a count or an error code has at most 19); past it, as JSON's float: making the integer of `1e999999`
# would cost what the body's size limit is there to prevent.
WHOLE_NUMBER_MAX_DIGITS = 19


def _number(text: str) -> int | float:
    """A JSON number with a fraction or an exponent: the integer it is when it is whole (`16.0`, `2.3e+16`,
    read from its text, since a float above 2**53 is not the number written), a float otherwise. So every
    spelling of a whole number is one value for an integer field, and a fraction (`16.5`) is refused there."""
    number = Decimal(text)
    if number.adjusted() < WHOLE_NUMBER_MAX_DIGITS and number == number.to_integral_value():
        return int(number)
    return float(text)


class JsonParser(JSONParser):
    """The API's only body format for JSON operations. A body nested deeper than JSON_MAX_DEPTH is refused
    before parsing (Python's parser would recurse until the interpreter gives up); a key repeated in one
    object (the error names its path, `golden.tolerances.max_abs`), and NaN or Infinity, are refused. A whole
    number is an integer however it is written (`_number`)."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read()
        if json_depth_exceeded(body, JSON_MAX_DEPTH):
            raise exceptions.ParseError(
                gettext("JSON nested deeper than %(depth)s levels.") % {"depth": JSON_MAX_DEPTH}
            )
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            document = json.loads(
                body.decode(encoding),
                object_pairs_hook=_object_without_repeated_keys,
                parse_constant=refuse_constant,
                parse_float=_number,
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
