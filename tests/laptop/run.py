"""Driving the laptop default (`python3 scripts/dev.py run`) from the tests: its environment, its management
commands, and its pages and API over HTTP as the demo's people."""

import os
import re
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.acceptance.workers import ROOT

# What `run` is given: nothing of this suite's services or settings, so it falls back to its own defaults.
NOT_PASSED = ("DATABASE_URL", "REDIS_URL", "CACHE_URL", "SECRET_KEY", "DEBUG", "PORT", "ALLOWED_HOSTS")
NOT_PASSED_PREFIXES = ("ACCEPTANCE_", "CELERY_", "CALCULET_", "DJANGO_", "PYTEST_", "STORAGE_", "UPLOAD_")
# seed_demo waits up to 600 s for its chains; on a loaded machine, installing and migrating come on top.
START_SECONDS = 1200
DEMO_PASSWORD = "calculet-demo"  # calculet/demo.py's, printed by `run`
VIEWER = "vera"  # the viewer the tier makes as a PM would; the demo has none
WEBHOOK = "tracker"  # the webhook the tier makes through the page
LANGUAGES = ("en", "zh-hans")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def laptop_env(data_dir) -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in NOT_PASSED and not key.startswith(NOT_PASSED_PREFIXES)
    }
    # The README's defaults, spelled out only so that a .env file in this checkout cannot change them.
    env.update(
        {
            "CALCULET_DATA_DIR": str(data_dir),
            "DATABASE_URL": f"sqlite:///{data_dir / 'calculet.sqlite3'}",
            "REDIS_URL": "",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def manage(env: dict, *args: str) -> str:
    """A management command against the laptop's database, with the signing key `run` keeps there."""
    command = [str(ROOT / ".venv" / "bin" / "python"), "manage.py", *args]
    key = (Path(env["CALCULET_DATA_DIR"]) / "secret-key").read_text().strip()
    result = subprocess.run(command, cwd=ROOT, env={**env, "SECRET_KEY": key}, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def make_viewer(env: dict, username: str) -> None:
    """A viewer of the integration team, made as a PM makes one (create_api_user), with the demo's password."""
    manage(env, "create_api_user", username, "--org", "integration-team", "--role", "viewer")
    manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        f"viewer = get_user_model().objects.get(username={username!r})\n"
        f"viewer.set_password({DEMO_PASSWORD!r})\n"
        "viewer.save(update_fields=['password'])\n",
    )


@dataclass
class Laptop:
    url: str
    vendor_token: str
    output: str
    data_dir: Path
    sessions: dict[str, requests.Session] = field(default_factory=dict)
    ids: dict[str, object] = field(default_factory=dict)

    def get(self, role: str, path: str, language: str = "en") -> requests.Response:
        """GET `path` as `role` (a session logged in through the login page; the vendor's API calls carry its
        token, as a vendor's scripts do) in `language`."""
        headers = {"Accept-Language": language}
        session = self.sessions[role]
        if role == "vendor" and path.startswith("/api/"):
            session, headers["Authorization"] = requests.Session(), f"Token {self.vendor_token}"
        return session.get(self.url + path, headers=headers, allow_redirects=False, timeout=120)


def serving(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def log_in(url: str, username: str) -> requests.Session:
    session = requests.Session()
    form = session.get(f"{url}/login/", timeout=60).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    response = session.post(
        f"{url}/login/",
        data={"username": username, "password": DEMO_PASSWORD, "csrfmiddlewaretoken": token, "next": ""},
        headers={"Referer": f"{url}/login/"},
        allow_redirects=False,
        timeout=60,
    )
    assert response.status_code == 302, f"{username} could not log in: {response.status_code}"
    return session


def post_form(session: requests.Session, url: str, path: str, data: dict) -> requests.Response:
    """Post a page's form as the browser does: with the CSRF token of the page it is on."""
    page = session.get(url + path, timeout=60).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    return session.post(
        url + path,
        data={**data, "csrfmiddlewaretoken": token},
        headers={"Referer": url + path},
        allow_redirects=False,
        timeout=60,
    )


def demo_ids(laptop: Laptop, *, webhook: int) -> dict:
    """The ids of the demo's rows the detail pages and endpoints need, read through the API."""

    def results(path):
        response = laptop.get("pm", path)
        assert response.status_code == 200, (path, response.status_code)
        body = response.json()
        return body if isinstance(body, list) else body["results"]  # a list is not paginated

    v18_comments = results("/api/v1/questions/V18/comments/")
    vendor_uploads = laptop.get("vendor", "/api/v1/uploads/").json()["results"]
    return {
        "webhook": webhook,
        "pm_comment": next(comment["id"] for comment in v18_comments if comment["author"] == "pm"),
        "document": results("/api/v1/questions/V60/deliverables/")[0]["key"],
        "answer": results("/api/v1/questions/V18/answers/")[0]["id"],
        "artifact": results("/api/v1/artifacts/")[0]["id"],
        "upload": vendor_uploads[0]["id"],
        "run": results("/api/v1/runs/?question=V18")[0]["id"],
        "evidence": results("/api/v1/evidence/")[0]["code"],
    }
