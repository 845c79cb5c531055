"""The soak's clients: vendor engineers on the REST API (tus uploads, answers, following their runs) and PMs in
the browser pages (session login) and on the promotion API. Each client is one thread with its own HTTP
session, talks only to the server on 127.0.0.1, and stops at the deadline or after `max_requests`."""

import base64
import hashlib
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests
from django.urls import Resolver404, resolve

from evidence.seed.deliverables import QUESTION_DELIVERABLES

TUS = {"Tus-Resumable": "1.0.0"}
CHUNK_BYTES = 256 * 1024
ERROR_EXAMPLES = 20
COMPATIBILITY = {"calrt": ">=0.7.6,<0.8", "driver": ">=2.3,<3", "firmware": ">=1.8,<2", "chip": "calculet-2c"}
ERROR_PATHS = [
    {"scenario": "kv_apply_failure", "expect_code": 15, "recovery": "free the sequence and submit it again"},
    {"scenario": "core_exception", "expect_code": 21, "recovery": "reset the faulted core"},
]


class Recorder:
    """Every request's latency by route pattern, and what went wrong."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter] = defaultdict(Counter)
        self.failures: Counter = Counter()  # kind -> count
        self.examples: list[str] = []
        self.blocked = 0  # promotions the gate refused (409 "blocked"): expected
        self.events: Counter = Counter()
        self.turnarounds: list[float] = []  # a complete answer's POST to its chain's last verdict, as a vendor saw it
        self._routes: dict[tuple[str, str], str] = {}

    def route(self, method: str, path: str) -> str:
        key = (method, path)
        if key not in self._routes:
            try:
                pattern = "/" + resolve(path).route
            except Resolver404:
                pattern = path
            self._routes[key] = f"{method} {pattern}"
        return self._routes[key]

    def record(self, route: str, status: int | None, milliseconds: float) -> None:
        with self.lock:
            self.latencies[route].append(milliseconds)
            self.statuses[route][status] += 1

    def fail(self, kind: str, detail: str) -> None:
        with self.lock:
            self.failures[kind] += 1
            if len(self.examples) < ERROR_EXAMPLES:
                self.examples.append(f"{kind}: {detail}")

    def event(self, name: str) -> None:
        with self.lock:
            self.events[name] += 1

    def refused(self) -> None:
        with self.lock:
            self.blocked += 1

    def turnaround(self, seconds: float) -> None:
        with self.lock:
            self.turnarounds.append(seconds)


class Http:
    """A client's HTTP session. `call` measures one request and checks its status: anything outside `expect`
    is an error, except a 409 the promotion gate answers with code "blocked" when `blocked_ok`."""

    def __init__(self, base: str, recorder: Recorder, stop: threading.Event, deadline: float, max_requests: int):
        split = urlsplit(base)
        if split.hostname != "127.0.0.1":
            raise ValueError(f"the soak talks to 127.0.0.1 only, not {base}")
        self.base = base
        self.netloc = split.netloc
        self.recorder = recorder
        self.stop = stop
        self.deadline = deadline
        self.max_requests = max_requests
        self.made = 0
        self.session = requests.Session()
        self.session.trust_env = False  # never through a proxy from the environment

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline and self.made < self.max_requests

    def local_path(self, url: str) -> str:
        split = urlsplit(url)
        if split.netloc and split.netloc != self.netloc:
            raise ValueError(f"the server pointed to {url}, not to {self.base}")
        return split.path

    def call(self, method: str, path: str, *, expect: set[int], blocked_ok: bool = False, **kwargs):
        """The response when its status was expected, else None (the failure is recorded)."""
        route = self.recorder.route(method, urlsplit(path).path)
        self.made += 1
        started = time.perf_counter()
        try:
            response = self.session.request(method, self.base + path, timeout=120, allow_redirects=False, **kwargs)
        except requests.RequestException as error:
            self.recorder.record(route, None, (time.perf_counter() - started) * 1000)
            self.recorder.fail("connection", f"{method} {path}: {error.__class__.__name__}: {error}")
            return None
        self.recorder.record(route, response.status_code, (time.perf_counter() - started) * 1000)
        if response.status_code in expect:
            return response
        if blocked_ok and response.status_code == 409 and _error_code(response) == "blocked":
            self.recorder.refused()
            return response
        kind = "5xx" if response.status_code >= 500 else "unexpected status"
        self.recorder.fail(kind, f"{method} {path} -> {response.status_code}: {response.text[:300]!r}")
        return None

    def pause(self, rng: random.Random, low: float, high: float) -> None:
        self.stop.wait(rng.uniform(low, high))


def _error_code(response) -> str:
    try:
        return response.json()["errors"][0]["code"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


@dataclass
class Package:
    """A calbin built by the simulator and its golden file (`--golden-out`), as bytes."""

    calbin: bytes
    goldens: bytes


@dataclass
class VendorPlan:
    organisation: str
    key: str
    questions: dict[str, str]  # question code -> the capability the vendor answers about
    package: Package


@dataclass
class Watch:
    """A question whose complete answer's chain the vendor follows."""

    answer: int
    submitted: float
    supersede_after: float | None
    runs_seen: set = field(default_factory=set)


class VendorClient(threading.Thread):
    """A vendor engineer: a token of its own, then for each question in turn either uploads a new calbin and
    goldens (tus; goldens sometimes in one multipart request) and answers — sometimes first incompletely —, or
    follows the chain of its last complete answer. Occasionally it answers again before the chain has
    finished, which makes the older runs stale."""

    def __init__(self, name: str, plan: VendorPlan, http: Http, seed: int, supersede_share: float):
        super().__init__(name=name, daemon=True)
        self.plan = plan
        self.http = http
        self.rng = random.Random(seed)
        self.supersede_share = supersede_share
        self.watching: dict[str, Watch] = {}
        self.uploads = 0

    def run(self) -> None:
        http = self.http
        http.session.headers["Authorization"] = f"Token {self.plan.key}"
        created = http.call("POST", "/api/v1/tokens/", expect={201}, json={"name": self.name})
        if created is None:
            return
        token = created.json()
        http.session.headers["Authorization"] = f"Token {token['key']}"
        http.call("GET", "/api/v1/me/", expect={200})
        http.call("GET", "/api/v1/questions/", expect={200}, params={"state": "asked"})
        codes = sorted(self.plan.questions)
        turn = 0
        while http.running():
            code = codes[turn % len(codes)]
            turn += 1
            watch = self.watching.get(code)
            if watch is None or (
                watch.supersede_after is not None and time.monotonic() - watch.submitted > watch.supersede_after
            ):
                if watch is not None:
                    self.http.recorder.event("answers superseded while their chain ran")
                self.answer(code)
            else:
                self.follow(code, watch)
            if self.rng.random() < 0.2:
                http.call("GET", "/api/v1/artifacts/", expect={200}, params={"state": "verified"})
            if self.rng.random() < 0.1:
                http.call("GET", "/api/v1/targets/", expect={200})
            http.pause(self.rng, 0.2, 0.6)
        # Not on the deadline: revoking is part of the traffic, so it is not skipped when time is up.
        http.session.headers["Authorization"] = f"Token {self.plan.key}"
        http.call("DELETE", f"/api/v1/tokens/{token['id']}/", expect={204})

    def version(self) -> str:
        self.uploads += 1
        return f"1.{self.uploads}.{self.rng.randrange(10**6)}"

    def answer(self, code: str) -> None:
        http, package = self.http, self.plan.package
        version = self.version()
        calbin = self.tus_upload(package.calbin, kind="calbin", version=version, filename="qwen3-tiny-b8.tar")
        if calbin is None:
            return
        if self.rng.random() < 0.5:
            golden = self.tus_upload(package.goldens, kind="golden", version=version, filename="golden-b8.npz")
        else:
            golden = self.plain_upload(package.goldens, kind="golden", version=version, filename="golden-b8.npz")
        if golden is None:
            return
        capability = self.plan.questions[code]
        deliverable = deliverable_proving(code, capability)
        path = f"/api/v1/questions/{code}/answers/"
        if self.rng.random() < 0.3:
            draft = {
                "capability": capability,
                "deliverable": deliverable,
                "summary": "Working on it.",
                "version": version,
            }
            response = http.call("POST", path, expect={201}, json=draft)
            if response is not None:
                self.http.recorder.event("incomplete answers")
                if response.json()["complete"]:
                    http.recorder.fail("wrong result", f"{code}: an answer with only a version was stored complete")
        body = {
            "capability": capability,
            "deliverable": deliverable,
            "summary": f"Calbin {version} for {capability}, goldens from our BF16 reference.",
            "version": version,
            "executable_assets": [calbin],
            "minimal_example": {"artifact": calbin, "description": "prefill the goldens prompt, decode 8 lanes"},
            "error_paths": ERROR_PATHS,
            "golden": {"artifacts": [golden], "tolerances": {"cosine_min": 0.9999, "top1_min": 0.99}},
            "compatibility": COMPATIBILITY,
        }
        response = http.call("POST", path, expect={201}, json=body)
        if response is None:
            return
        answer = response.json()
        if not answer["complete"]:
            http.recorder.fail("wrong result", f"{code}: a complete answer was stored with {answer['missing']} missing")
            return
        http.recorder.event("complete answers")
        supersede = self.rng.uniform(3, 20) if self.rng.random() < self.supersede_share else None
        self.watching[code] = Watch(answer=answer["id"], submitted=time.monotonic(), supersede_after=supersede)

    def follow(self, code: str, watch: Watch) -> None:
        http = self.http
        response = http.call("GET", f"/api/v1/questions/{code}/", expect={200})
        if response is None:
            return
        capability = self.plan.questions[code]
        chain = next((c for c in response.json()["chains"] if c["capability"] == capability), None)
        runs = http.call("GET", "/api/v1/runs/", expect={200}, params={"question": code, "answer": watch.answer})
        if runs is not None:
            results = runs.json()["results"]
            if results and self.rng.random() < 0.5:
                http.call("GET", f"/api/v1/runs/{results[0]['id']}/", expect={200})
        if chain is None or chain["answer"] != watch.answer:
            return  # the chain has not moved onto this answer yet
        states = [stage["state"] for stage in chain["stages"]]
        if all(state == "passed" for state in states):
            http.recorder.event("chains seen passing every stage")
            http.recorder.turnaround(time.monotonic() - watch.submitted)
            del self.watching[code]
        elif any(state in ("failed", "error") for state in states):
            failed = [stage for stage in chain["stages"] if stage["state"] in ("failed", "error")]
            http.recorder.fail("chain stopped", f"{code} answer {watch.answer}: {failed}")
            del self.watching[code]

    def tus_upload(self, payload: bytes, *, kind: str, version: str, filename: str) -> int | None:
        http = self.http
        digest = hashlib.sha256(payload).hexdigest()
        metadata = {"kind": kind, "version": version, "filename": filename, "sha256": digest}
        header = ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in metadata.items())
        created = http.call(
            "POST",
            "/api/v1/uploads/",
            expect={201},
            headers={**TUS, "Upload-Length": str(len(payload)), "Upload-Metadata": header},
        )
        if created is None:
            return None
        location = http.local_path(created.headers["Location"])
        for offset in range(0, len(payload), CHUNK_BYTES):
            if self.rng.random() < 0.2:  # what a client resuming after a broken connection asks first
                head = http.call("HEAD", location, expect={200}, headers=TUS)
                if head is None:
                    return None
                if int(head.headers["Upload-Offset"]) != offset:
                    http.recorder.fail("wrong result", f"HEAD {location}: offset {head.headers['Upload-Offset']}")
                    return None
            chunk = payload[offset : offset + CHUNK_BYTES]
            headers = {**TUS, "Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"}
            if self.rng.random() < 0.5:
                headers["Upload-Checksum"] = "sha256 " + base64.b64encode(hashlib.sha256(chunk).digest()).decode()
            if http.call("PATCH", location, expect={204}, data=chunk, headers=headers) is None:
                return None
        state = http.call("GET", location, expect={200})
        if state is None:
            return None
        body = state.json()
        if body.get("artifact_state") != "verified":
            http.recorder.fail("wrong result", f"tus upload {location} ended {body}")
            return None
        http.recorder.event(f"{kind} uploads (tus)")
        return body["artifact"]

    def plain_upload(self, payload: bytes, *, kind: str, version: str, filename: str) -> int | None:
        response = self.http.call(
            "POST",
            "/api/v1/artifacts/",
            expect={201},
            data={"kind": kind, "version": version, "sha256": hashlib.sha256(payload).hexdigest()},
            files={"file": (filename, payload, "application/x-tar")},
        )
        if response is None:
            return None
        body = response.json()
        if body["state"] != "verified":
            self.http.recorder.fail("wrong result", f"multipart upload ended {body}")
            return None
        self.http.recorder.event(f"{kind} uploads (multipart)")
        return body["id"]


@dataclass
class PmPlan:
    username: str
    password: str
    key: str
    questions: list[str]
    capabilities: list[str]  # the ones vendors answer about; promotions may move them
    pinned: str  # a pinned capability, whose promotions the gate always blocks


class PmClient(threading.Thread):
    """A PM: logs in through the login form, then browses the dashboard, the question list (filtered), the
    vendors' question pages, the capability matrix and capability pages — full pages and the htmx partials
    the live pages poll — and asks the promotion gate for C0, C1 or C2, or demotes back to C3."""

    def __init__(self, name: str, plan: PmPlan, http: Http, seed: int):
        super().__init__(name=name, daemon=True)
        self.plan = plan
        self.http = http
        self.rng = random.Random(seed)

    def login(self) -> bool:
        http = self.http
        page = http.call("GET", "/login/", expect={200})
        if page is None:
            return False
        token = http.session.cookies.get("csrftoken")
        response = http.call(
            "POST",
            "/login/",
            expect={302},
            data={"username": self.plan.username, "password": self.plan.password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{http.base}/login/"},
        )
        return response is not None

    def run(self) -> None:
        if not self.login():
            return
        http, rng, plan = self.http, self.rng, self.plan
        htmx = {"HX-Request": "true"}
        actions = [
            (3, lambda: http.call("GET", "/", expect={200})),
            (3, lambda: http.call("GET", "/", expect={200}, headers=htmx)),
            (2, lambda: http.call("GET", "/questions/", expect={200})),
            (1, lambda: http.call("GET", "/questions/", expect={200}, params={"state": "verifying"})),
            (3, lambda: http.call("GET", f"/questions/{rng.choice(plan.questions)}/", expect={200})),
            (3, lambda: http.call("GET", f"/questions/{rng.choice(plan.questions)}/", expect={200}, headers=htmx)),
            (1, lambda: http.call("GET", "/capabilities/", expect={200})),
            (2, lambda: http.call("GET", f"/capabilities/{rng.choice(plan.capabilities)}/", expect={200})),
            (3, self.promote),
        ]
        weights = [weight for weight, _ in actions]
        while http.running():
            _, action = rng.choices(actions, weights=weights)[0]
            action()
            http.pause(rng, 0.3, 1.0)

    def promote(self) -> None:
        http, rng = self.http, self.rng
        slug = self.plan.pinned if rng.random() < 0.1 else rng.choice(self.plan.capabilities)
        to_status = rng.choices(["C0", "C1", "C2", "C3"], weights=[2, 4, 2, 2])[0]
        response = http.call(
            "POST",
            f"/api/v1/capabilities/{slug}/promotions/",
            expect={201},
            blocked_ok=True,
            json={"to": to_status, "reason": f"soak: the PM asks for {to_status}"},
            headers={"Authorization": f"Token {self.plan.key}"},
        )
        if response is not None and response.status_code == 201:
            http.recorder.event(f"status changes to {to_status}")
        if rng.random() < 0.2:
            http.call(
                "GET",
                f"/api/v1/capabilities/{slug}/promotions/",
                expect={200},
                headers={"Authorization": f"Token {self.plan.key}"},
            )


def deliverable_proving(code: str, capability: str) -> str:
    """The key of the question's deliverable that proves `capability` (the seed data names one for each)."""
    return next(d.key for d in QUESTION_DELIVERABLES[code] if capability in d.capabilities)
