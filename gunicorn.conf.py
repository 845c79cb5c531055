"""How gunicorn serves calculet: `gunicorn -c gunicorn.conf.py calculet.wsgi` (README, docs/deploy.md, the benches).

gevent workers: each connection is a greenlet, not a thread or a process, so a client that sends its headers
or its body a byte at a time costs a socket and a little memory while every other request goes on (a sync
worker is held by one such client, a gthread worker by as many as it has threads). Long requests are not cut
either: `timeout` restarts a worker only when its event loop stops turning (a tus PATCH yields after every
block it reads), so a 20 GiB PATCH at any speed runs to its end. The database driver (psycopg) waits
cooperatively once gevent has patched the standard library, which the worker does before loading the app.
"""

import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# Two per core of a small host; WEB_CONCURRENCY sets it (gunicorn's own variable).
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gevent"
# Open connections per worker, slow ones included; past it a worker stops accepting and the others take them.
worker_connections = 1000
# A worker whose event loop is blocked this long is restarted. Requests themselves have no time limit.
timeout = 30
graceful_timeout = 30
keepalive = 5
# gunicorn refuses a longer header line with an HTML 431; below it the tus endpoint answers 431 in the API's
# error format for an Upload-Metadata over vendor.api.uploads.METADATA_MAX_BYTES.
limit_request_field_size = 32768

# One gunicorn per host in production, several at once on a test machine: none needs the control socket.
control_socket_disable = True
