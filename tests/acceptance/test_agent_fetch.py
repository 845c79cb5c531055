"""calculet-agent's input fetch (`Client.download` into `Cache.fetch`): the SHA-256 is computed as the bytes
arrive, a cut download resumes from the bytes it holds, and bytes that are not the input's are never cached.
Against a small HTTP server that answers single ranges as the agent API does."""

import hashlib
import http.server
import os
import threading
import tracemalloc

import pytest
from calculet_agent.cache import Cache, DigestMismatchError
from calculet_agent.client import RECEIVE_BUFFERS, RECEIVE_BYTES, Client

BODY = os.urandom(3 * 1024 * 1024 + 17)
SHA256 = hashlib.sha256(BODY).hexdigest()


class RangeHandler(http.server.BaseHTTPRequestHandler):
    served: list[str] = []

    def do_GET(self):
        start = int(self.headers.get("Range", "bytes=0-").removeprefix("bytes=").rstrip("-"))
        self.served.append(self.headers.get("Range", ""))
        if start >= len(BODY):
            self.send_response(416)
            self.end_headers()
            return
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(BODY) - start))
        self.end_headers()
        self.wfile.write(memoryview(BODY)[start:])  # no copy: the memory test below traces this thread too

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    RangeHandler.served = []
    yield Client(f"http://127.0.0.1:{httpd.server_address[1]}", "clt_target_test")
    httpd.shutdown()


def test_a_fetch_is_checked_as_it_arrives_and_cached_once(server, tmp_path):
    cache = Cache(tmp_path / "cache")
    assert cache.fetch(SHA256, lambda partial: server.download(1, "run", SHA256, partial)).read_bytes() == BODY
    cache.fetch(SHA256, lambda partial: server.download(1, "run", SHA256, partial))
    assert RangeHandler.served == [""]  # the second run's fetch found it in the cache


def test_a_cut_fetch_resumes_from_the_bytes_it_holds(server, tmp_path):
    cache = Cache(tmp_path / "cache")
    partial = cache.path(SHA256).with_name(f"{SHA256}.partial")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(BODY[:1_000_000])
    assert cache.fetch(SHA256, lambda into: server.download(1, "run", SHA256, into)).read_bytes() == BODY
    assert RangeHandler.served == ["bytes=1000000-"]
    # A partial file that already holds every byte is answered 416, and still checked.
    other = Cache(tmp_path / "other")
    whole = other.path(SHA256).with_name(f"{SHA256}.partial")
    whole.parent.mkdir(parents=True)
    whole.write_bytes(BODY)
    assert other.fetch(SHA256, lambda into: server.download(1, "run", SHA256, into)).read_bytes() == BODY


def test_bytes_that_are_not_the_input_s_are_refused_and_not_cached(server, tmp_path):
    cache = Cache(tmp_path / "cache")
    partial = cache.path(SHA256).with_name(f"{SHA256}.partial")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"x" * 1000)  # a held prefix that is not the input's: the digest of the whole shows it
    with pytest.raises(DigestMismatchError, match=f"the input fetched as {SHA256} has SHA-256"):
        cache.fetch(SHA256, lambda into: server.download(1, "run", SHA256, into))
    assert not cache.path(SHA256).exists() and not partial.exists()


def test_a_fetch_holds_a_few_receive_buffers_whatever_the_input_s_size(server, tmp_path):
    """The input (3 MiB here, 17 GiB in the field) passes through RECEIVE_BUFFERS buffers of RECEIVE_BYTES
    (512 KiB): a download that held the whole body, or a buffer of 1 MiB as it once did, peaks above it."""
    cache = Cache(tmp_path / "cache")
    tracemalloc.start()
    try:
        cache.fetch(SHA256, lambda partial: server.download(1, "run", SHA256, partial))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    in_flight = RECEIVE_BUFFERS * RECEIVE_BYTES
    assert in_flight <= peak < in_flight + 64 * 1024, peak
    assert cache.path(SHA256).read_bytes() == BODY
