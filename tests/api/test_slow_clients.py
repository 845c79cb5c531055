"""No slow client holds the server (issue 24.2 in small; bench/slow_clients.py measures it at scale): served
as deployed (gunicorn.conf.py's gevent worker), connections that send their headers or an answer's body a
byte at a time leave /healthz and an API call answering. A sync or gthread worker fails this: one worker is
held by the first slow connection (a sync worker) or by as many as it has threads."""

import socket
import time
from urllib.parse import urlsplit

import requests

SLOW_HEADERS = 8
SLOW_BODIES = 8
ANSWER_WITHIN_S = 1.0


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def test_slow_headers_and_slow_bodies_leave_the_server_answering(gunicorn_server, vendor_a, question_a):
    with gunicorn_server(workers=1) as (url, _):
        held = []
        try:
            for _ in range(SLOW_HEADERS):  # headers never finished; no token needed
                connection = _connect(url)
                connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                held.append(connection)
            for _ in range(SLOW_BODIES):  # an authenticated answer whose body comes a byte at a time
                connection = _connect(url)
                connection.sendall(
                    (
                        f"POST /api/v1/questions/{question_a.code}/answers/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Authorization: Token {vendor_a.key}\r\nContent-Type: application/json\r\n"
                        "Content-Length: 100000\r\n\r\n{"
                    ).encode()
                )
                held.append(connection)
            time.sleep(1)  # every slow connection accepted and waiting on its next byte
            timings = []
            for _ in range(3):
                for connection in held:  # one more byte each, so none is idle
                    connection.sendall(b"a" if connection in held[:SLOW_HEADERS] else b" ")
                for path in ("/healthz", "/api/v1/me/"):
                    started = time.monotonic()
                    response = requests.get(
                        f"{url}{path}", headers={"Authorization": f"Token {vendor_a.key}"}, timeout=10
                    )
                    timings.append(time.monotonic() - started)
                    assert response.status_code == 200, path
            assert max(timings) < ANSWER_WITHIN_S, timings
        finally:
            for connection in held:
                connection.close()
