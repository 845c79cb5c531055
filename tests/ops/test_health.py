import json
import logging
import os
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django import db
from django.urls import reverse
from django.utils import timezone

from acceptance.services import runs_sweep
from calculet import health
from calculet.health import FAILED
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
def test_readyz_fails_when_the_sweeper_stopped(client, settings, caplog):
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["sweeper"] == FAILED["sweeper"]
    runs_sweep()
    assert client.get(reverse("readyz")).json()["checks"]["sweeper"] == "ok"
    settings.ACCEPTANCE_SWEEP_STALE_AFTER = 60
    JobRun.objects.filter(name="sweeper").update(finished_at=timezone.now() - timedelta(seconds=61))
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["sweeper"] == FAILED["sweeper"]
    assert "the sweeper last finished 61 s ago (at " in caplog.text and "more than 60 s" in caplog.text


@pytest.mark.django_db
def test_readyz_fails_when_the_sweepers_last_run_is_recorded_in_the_future(client, settings, caplog):
    """A worker whose clock runs an hour ahead records its sweeps an hour ahead: a stopped beat would then
    look on time for an hour past ACCEPTANCE_SWEEP_STALE_AFTER."""
    runs_sweep()
    settings.ACCEPTANCE_SWEEP_STALE_AFTER = 60
    JobRun.objects.filter(name="sweeper").update(finished_at=timezone.now() + timedelta(seconds=30))
    assert client.get(reverse("readyz")).json()["checks"]["sweeper"] == "ok"  # within the window: ordinary skew
    JobRun.objects.filter(name="sweeper").update(finished_at=timezone.now() + timedelta(hours=1))
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["sweeper"] == FAILED["sweeper"]
    assert "s in the future (at " in caplog.text and "disagree by more than 60 s" in caplog.text


@pytest.mark.django_db
def test_readyz_fails_when_plain_uploads_cannot_be_spooled(client, settings, tmp_path, caplog):
    runs_sweep()
    settings.FILE_UPLOAD_TEMP_DIR = tmp_path / "not-made"
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["storage"] == FAILED["storage"]
    # The path is for the operator's log, not for whoever asks.
    assert str(tmp_path) not in response.content.decode()
    assert f"FILE_UPLOAD_TEMP_DIR {tmp_path / 'not-made'} is not a directory calculet can write to" in caplog.text


def test_plain_uploads_are_spooled_on_the_uploads_volume():
    # The settings module as configured from the environment (the suite moves each test's storage elsewhere).
    from calculet import settings as configured

    assert configured.FILE_UPLOAD_TEMP_DIR == configured.UPLOAD_TEMP_DIR == configured.STORAGE_ROOT / "uploads"


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_unreachable(client, settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    from calculet.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = settings.REDIS_URL
    try:
        response = client.get(reverse("readyz"))
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["checks"]["broker"] == FAILED["broker"]
    # The refused address is named in the log only.
    assert "127.0.0.1:1" not in response.content.decode()
    assert "127.0.0.1:1" in caplog.text


@pytest.mark.django_db
def test_readyz_names_a_failed_check_without_the_errors_text(client, monkeypatch, caplog):
    """A database outage's message names the server, the port and the user: /readyz is public, so the body
    says only which check failed and the log keeps the message."""
    runs_sweep()
    leak = (
        'connection to server at "db-7.internal.example" (10.20.30.40), port 5432 failed: '
        'FATAL: password authentication failed for user "calculet_owner"'
    )

    def down():
        raise db.OperationalError(leak)

    monkeypatch.setattr(health, "_check_database", down)
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["database"] == FAILED["database"]
    assert body["checks"]["storage"] == "ok"
    text = response.content.decode()
    for secret in ("db-7.internal.example", "10.20.30.40", "5432", "calculet_owner", "password"):
        assert secret not in text
    assert leak in caplog.text
    assert "the database check failed: OperationalError" in caplog.text


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
