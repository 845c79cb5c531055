import json
import logging
import os
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from acceptance.services import runs_sweep
from calculet.logs import JsonFormatter, request_id_var
from calculet.models import JobRun

ROOT = Path(__file__).resolve().parents[2]


def test_healthz_answers_without_touching_the_database(client):
    # No django_db mark: any database access here would raise.
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_each_dependency(client, settings):
    runs_sweep()
    response = client.get(reverse("readyz"))
    body = response.json()
    assert set(body["checks"]) == {"database", "migrations", "broker", "storage", "sweeper"}
    assert response.status_code == 200, body
    assert body["status"] == "ready"


@pytest.mark.django_db
def test_readyz_fails_when_the_sweeper_stopped(client, settings):
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["sweeper"] == "error: the sweeper has not run yet"
    runs_sweep()
    assert client.get(reverse("readyz")).json()["checks"]["sweeper"] == "ok"
    settings.ACCEPTANCE_SWEEP_STALE_AFTER = 60
    JobRun.objects.filter(name="sweeper").update(finished_at=timezone.now() - timedelta(seconds=61))
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    stale = response.json()["checks"]["sweeper"]
    assert stale.startswith("error: the sweeper last finished 61 s ago (at ") and stale.endswith("more than 60 s")


@pytest.mark.django_db
def test_readyz_fails_when_plain_uploads_cannot_be_spooled(client, settings, tmp_path):
    runs_sweep()
    settings.FILE_UPLOAD_TEMP_DIR = tmp_path / "not-made"
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["storage"] == (
        f"error: FILE_UPLOAD_TEMP_DIR {tmp_path / 'not-made'} is not a directory calculet can write to"
    )


def test_plain_uploads_are_spooled_on_the_uploads_volume():
    # The settings module as configured from the environment (the suite moves each test's storage elsewhere).
    from calculet import settings as configured

    assert configured.FILE_UPLOAD_TEMP_DIR == configured.UPLOAD_TEMP_DIR == configured.STORAGE_ROOT / "uploads"


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_unreachable(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    from calculet.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = settings.REDIS_URL
    try:
        response = client.get(reverse("readyz"))
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("error")


def test_request_id_is_echoed_and_logged(client):
    response = client.get(reverse("healthz"), HTTP_X_REQUEST_ID="abc123")
    assert response["X-Request-ID"] == "abc123"
    generated = client.get(reverse("healthz"))["X-Request-ID"]
    assert len(generated) == 32


def test_json_log_lines_carry_the_context_ids():
    token = request_id_var.set("req-1")
    try:
        record = logging.LogRecord("calculet", logging.INFO, __file__, 1, "hello %s", ("world",), None)
        from calculet.logs import ContextFilter

        ContextFilter().filter(record)
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id_var.reset(token)
    assert line["message"] == "hello world"
    assert line["request_id"] == "req-1"
    assert "run_id" not in line


def test_production_settings_pass_check_deploy():
    env = {
        key: value
        for key, value in os.environ.items()
        # DJANGO_ALLOW_ASYNC_UNSAFE is set for the browser tests' event loop, never in production.
        if key
        not in {
            "DEBUG",
            "SECRET_KEY",
            "SECURE_SSL_REDIRECT",
            "SECURE_COOKIES",
            "SECURE_HSTS_SECONDS",
            "DJANGO_ALLOW_ASYNC_UNSAFE",
        }
    }
    env.update(
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        SECURE_SSL_REDIRECT="1",
        SECURE_COOKIES="1",
        SECURE_HSTS_SECONDS="31536000",
        ALLOWED_HOSTS="calculet.example.org",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
