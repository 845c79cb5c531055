"""The API's body parser for JSON operations (its own module: DRF imports it while its views load)."""

import io

from rest_framework import exceptions
from rest_framework.parsers import JSONParser

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


class JsonParser(JSONParser):
    """The API's only body format for JSON operations. A body nested deeper than JSON_MAX_DEPTH is refused
    before parsing (Python's parser would recurse until the interpreter gives up)."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read()
        if json_depth_exceeded(body, JSON_MAX_DEPTH):
            raise exceptions.ParseError(f"JSON nested deeper than {JSON_MAX_DEPTH} levels.")
        return super().parse(io.BytesIO(body), media_type, parser_context)
