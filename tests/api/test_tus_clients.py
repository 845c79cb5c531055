"""The tus endpoint as the reference client speaks it: tus-js-client (tests/node, installed by `npm ci` from its
package-lock.json when the suite first needs it) under node, and its browser build in Chromium on a page of
another origin."""

import functools
import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from tests.factories import sha256
from tests.web.conftest import CHROMIUM_ARGS
from vendor.models import Artifact, Upload

pytestmark = pytest.mark.django_db(transaction=True)

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
DATA = os.urandom(3 * 1024 * 1024 + 17)


@pytest.fixture(scope="session")
def tus_js_client() -> Path:
    if not (NODE_DIR / "node_modules" / "tus-js-client" / "package.json").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=600)
    return NODE_DIR / "node_modules" / "tus-js-client"


def node_upload(live_server, account, path: Path, **options) -> dict:
    result = subprocess.run(
        ["node", str(NODE_DIR / "upload.mjs"), f"{live_server.url}/api/v1/uploads/", account.key, str(path)]
        + [json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "options",
    [{}, {"chunkSize": 1024 * 1024, "overridePatchMethod": True}],
    ids=["one-patch-default", "chunks-through-method-override"],
)
def test_tus_js_client_under_node_uploads_a_verified_artifact(live_server, vendor_a, tmp_path, tus_js_client, options):
    path = tmp_path / "golden.bin"
    path.write_bytes(DATA)
    uploaded = node_upload(live_server, vendor_a, path, **options)
    upload = Upload.objects.get(pk=uploaded["url"].rstrip("/").rsplit("/", 1)[1])
    assert (upload.offset, upload.artifact.state) == (len(DATA), Artifact.VERIFIED)
    assert upload.artifact.blob.sha256 == sha256(DATA)


@pytest.fixture
def other_origin(tmp_path, tus_js_client):
    """A static server on another port, so its pages are of another origin than the API's: the page and the
    browser build of tus-js-client."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "cross-origin.html").symlink_to(NODE_DIR / "cross-origin.html")
    (site / "tus.min.js").symlink_to(tus_js_client / "dist" / "tus.min.js")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def browser_page(other_origin):
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's event loop in the test's thread
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = chromium.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{other_origin}/cross-origin.html")
        yield page
        chromium.close()


@pytest.mark.browser
@pytest.mark.parametrize("allowed", [True, False], ids=["allowed-origin", "origin-not-configured"])
def test_a_browser_page_of_another_origin_uploads_with_tus_js_client(
    live_server, vendor_a, settings, other_origin, browser_page, allowed
):
    settings.CORS_ALLOWED_ORIGINS = [other_origin] if allowed else ["https://somewhere.example"]
    result = browser_page.evaluate(
        "([endpoint, token]) => uploadTo(endpoint, token, 3 * 1024 * 1024)",
        [f"{live_server.url}/api/v1/uploads/", vendor_a.key],
    )
    if not allowed:  # the browser refuses to read the answers: nothing is created
        assert "error" in result
        assert not Upload.objects.exists()
        return
    assert "error" not in result, result
    upload = Upload.objects.get(pk=result["url"].rstrip("/").rsplit("/", 1)[1])
    assert (upload.artifact.state, upload.artifact.blob.sha256) == (Artifact.VERIFIED, result["sha256"])
