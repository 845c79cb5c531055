"""Serving stored bytes to an HTTP client: one byte range (RFC 9110) for a resumed download, and
If-None-Match against an ETag, streamed in blocks. The artifact download and the agent's input fetch share it."""

import re
from collections.abc import Callable
from typing import IO

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header
from django.utils.translation import gettext

RANGE_PATTERN = re.compile(r"^bytes=(\d*)-(\d*)$")
BLOCK_BYTES = 1024 * 1024


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The (first, last) bytes a single-range `Range` header asks for; None to send the whole file.
    Raises ValueError when the range cannot be satisfied."""
    match = RANGE_PATTERN.match(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None  # unsupported or malformed: RFC 9110 lets the server ignore it
    first, last = match.group(1), match.group(2)
    if first == "":
        length = int(last)
        if length == 0:
            raise ValueError("empty suffix range")
        return max(size - length, 0), size - 1
    first_byte = int(first)
    last_byte = min(int(last), size - 1) if last else size - 1
    if first_byte >= size or first_byte > last_byte:
        raise ValueError("range outside the file")
    return first_byte, last_byte


def etag_matches(header: str, etag: str) -> bool:
    """Whether If-None-Match names `etag` (weakly compared, RFC 9110 13.1.2) or is `*`."""
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


def _stream(handle: IO[bytes], first: int, length: int):
    try:
        handle.seek(first)
        remaining = length
        while remaining:
            chunk = handle.read(min(BLOCK_BYTES, remaining))
            if not chunk:
                break
            remaining -= len(chunk)
            yield chunk
    finally:
        handle.close()


def file_response(
    request, *, open_file: Callable[[], IO[bytes]], size: int, sha256: str, file_name: str
) -> HttpResponse:
    """The file's bytes, or the range asked for (206), 304 when If-None-Match holds its ETag (the SHA-256),
    416 for a range outside it (in the API's error format, naming `Range`)."""
    etag = f'"{sha256}"'
    if etag_matches(request.headers.get("If-None-Match", ""), etag):
        response = HttpResponse(status=304)
        response["ETag"] = etag
        return response
    try:
        asked = byte_range(request.headers.get("Range", ""), size) if "Range" in request.headers else None
    except ValueError:
        # In the API's error format, as every other refusal: never an empty body the client cannot read.
        message = gettext("The range lies outside the file's %(size)s bytes.") % {"size": size}
        response = JsonResponse(
            {"errors": [{"field": "Range", "code": "range_not_satisfiable", "message": message}]}, status=416
        )
        response["Content-Range"] = f"bytes */{size}"
        return response
    first, last = asked if asked is not None else (0, size - 1)
    length = last - first + 1 if size else 0
    status = 206 if asked is not None else 200
    chunks = _stream(open_file(), first, length)
    response = StreamingHttpResponse(chunks, status=status, content_type="application/octet-stream")
    response["Content-Length"] = str(length)
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = etag
    response["Content-Disposition"] = content_disposition_header(True, file_name)
    if asked is not None:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    return response
