"""JSON text from outside read as PostgreSQL's jsonb will store it: a key repeated in one object, NaN or
Infinity, a number past a double's range, a NUL character or a lone surrogate in a string is refused here, with
what was wrong, rather than read one way and failing where it is written (a 500, a task that fails again on
each retry). The API's body parser refuses the first three itself, naming fields; the agent's signed result and
a runner's result file, whose values are stored as sent, are read with `storable_json_loads`."""

import json
import math
import re

# Brackets outside strings nested deeper than this are refused before the parser recurses.
JSON_MAX_DEPTH = 32
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


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


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    data: dict = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"the key {key!r} appears more than once in one object")
        data[key] = value
    return data


def refuse_constant(name: str):
    """`json.loads`'s `parse_constant`: NaN, Infinity and -Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a double's range")
    return value


def _unstorable_text(value, path: str) -> str | None:
    """Where `value` holds a string (or a key) jsonb cannot store, and why; None when it holds none."""
    if isinstance(value, str):
        found = _UNSTORABLE.search(value)
        if found:
            what = "a NUL character" if found.group() == "\x00" else "a lone surrogate"
            return f"{path or 'the document'} holds {what}"
    elif isinstance(value, dict):
        for key, item in value.items():
            where = _unstorable_text(key, f"{path}.{key!r}" if path else repr(key))
            if where:
                return f"a key of {path or 'the document'} holds {where.rsplit(' holds ', 1)[1]}"
            where = _unstorable_text(item, f"{path}.{key}" if path else key)
            if where:
                return where
    elif isinstance(value, list):
        for index, item in enumerate(value):
            where = _unstorable_text(item, f"{path}[{index}]")
            if where:
                return where
    return None


def storable_json_loads(body: bytes, *, max_depth: int = JSON_MAX_DEPTH):
    """The JSON document in `body` (UTF-8), as jsonb stores it. Raises ValueError saying what is wrong: not
    JSON or not UTF-8, nested deeper than `max_depth`, a repeated key, NaN, Infinity or a number past a double's
    range, a NUL character or a lone surrogate in a string or key."""
    if json_depth_exceeded(body, max_depth):
        raise ValueError(f"nested deeper than {max_depth} levels")
    document = json.loads(
        body.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=refuse_constant, parse_float=_finite
    )
    where = _unstorable_text(document, "")
    if where:
        raise ValueError(where)
    return document
