"""`calculet-agent`: serve one target from its host, holding only the server's URL and the target's token.

    CALCULET_TARGET_TOKEN=clt_target_… calculet-agent --server https://calculet.example.org \\
        --state-dir /var/lib/calculet-agent --runner-command /opt/board-runner/run

It registers the host (its key pair made in the state directory on the first start), then polls for the
target's next run, runs it and posts the result signed, until stopped. Exit status 3: the server refused the
target token (unknown or revoked), and polling again cannot help; 1: it refused the registration or a claim.
"""

import argparse
import fcntl
import json
import logging
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from calculet_agent import __version__
from calculet_agent.cache import Cache, DigestMismatchError
from calculet_agent.client import Client, RefusedError, UnreachableError
from calculet_agent.digest import runner_digest
from calculet_agent.runner import run_job, runs_left_over_remove
from calculet_agent.signing import SIGNATURE_HEADER, key_load_or_create, public_key_text, sign

logger = logging.getLogger("calculet_agent")

TOKEN_REFUSED_EXIT = 3
RETRY_SECONDS = 2.0
RETRY_MAX_SECONDS = 30.0


class TokenRefusedError(Exception):
    pass


def _retrying(call, what: str):
    """`call()` until the server answers; a refusal of the target token ends the agent."""
    pause = RETRY_SECONDS
    while True:
        try:
            return call()
        except UnreachableError as error:
            logger.warning("%s: the server did not answer (%s); trying again in %.0f s", what, error, pause)
            time.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_SECONDS)
        except RefusedError as error:
            if error.status == 401:
                raise TokenRefusedError(error.message) from error
            raise


def state_lock(state: Path) -> int:
    """Hold the state directory for this process (an open descriptor with an exclusive lock, released when the
    process ends, killed or not): a second agent on the same directory is refused rather than sharing its key,
    cache and run directories."""
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SystemExit(f"calculet-agent: another agent is running with the state directory {state}") from None
    return fd


def serve(args) -> None:
    state = Path(args.state_dir)
    state_lock(state)
    key = key_load_or_create(state)
    cache = Cache(state / "cache" / "sha256")
    run_dir = state / "runs"
    run_dir.mkdir(parents=True, exist_ok=True)
    removed = runs_left_over_remove(run_dir)
    if removed:
        logger.info("removed %s working director(ies) a stopped agent left in %s", removed, run_dir)
    client = Client(args.server, args.token)
    registration = {
        "host": args.host or platform.node(),
        "public_key": public_key_text(key),
        "agent_version": __version__,
        "platform": platform.platform()[:200],
        "calrt_version": args.calrt,
        "driver_version": args.driver,
        "firmware_version": args.firmware,
        "chip": args.chip,
        "runner_command": args.runner_command,
        "runner_digest": runner_digest(args.runner_command),
    }
    try:
        agent = _retrying(lambda: client.post("register/", registration).json(), "register")
    except RefusedError as error:
        raise SystemExit(f"calculet-agent: the server refused the registration: {error}") from error
    logger.info("registered as agent %s of target %s (%s)", agent["agent"], agent["target"], agent["kind"])
    runner_command = shlex.split(args.runner_command)
    while True:
        claim = {"agent": agent["agent"], "cache_bytes": cache.size_bytes()}
        try:
            answer = _retrying(lambda claim=claim: client.post("claim/", claim), "claim")
        except RefusedError as error:
            raise SystemExit(f"calculet-agent: the server refused the claim: {error}") from error
        if answer.status == 204:
            if args.once:
                return
            time.sleep(args.poll_seconds)
            continue
        claimed = answer.json()
        logger.info("run %s (%s) claimed", claimed["run"], claimed["job"]["stage"])
        try:
            report, reporter = run_job(client, cache, run_dir, claimed, runner_command, tuple(args.device))
        except (DigestMismatchError, RefusedError, UnreachableError, OSError) as error:
            logger.exception("run %s could not be run", claimed["run"])
            report, reporter = _not_run(f"the agent could not prepare or start the run: {error}"), None
        if report is None:
            if reporter is not None and reporter.lost is not None and reporter.lost.status == 401:
                raise TokenRefusedError(reporter.lost.message)
            continue
        _post_result(client, key, claimed, report, reporter.take() if reporter is not None else [])
        if args.once:
            return


def _post_result(client: Client, key, claimed: dict, report: dict, chunks: list[dict]) -> None:
    """Post the signed result until the server answers; the same bytes each time, so a result sent again
    after a cut connection is one verdict."""
    # The body names the run and attempt it is for, so a signed result cannot be posted for another.
    body = json.dumps(
        {"run": claimed["run"], "attempt": claimed["job"]["attempt"], "chunks": chunks, **report}
    ).encode()
    headers = {SIGNATURE_HEADER: sign(key, body)}
    path = f"runs/{claimed['run']}/result/"
    try:
        posted = _retrying(
            lambda: client.post(path, body, run_token=claimed["run_token"], headers=headers).json(), "result"
        )
    except RefusedError as error:
        logger.error("run %s: the result was refused: %s", claimed["run"], error)
        if error.status == 401:
            raise TokenRefusedError(error.message) from error
        return
    logger.info("run %s: %s %s", posted["run"], posted["verdict"], posted["reason"][:200])


def _not_run(reason: str) -> dict:
    return {"exit_code": None, "limit_hit": None, "reason": reason[:2000], "sandbox": {}, "result_file": None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="calculet-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("CALCULET_SERVER", ""), help="or CALCULET_SERVER")
    parser.add_argument("--token-file", help="a file holding the target token (else CALCULET_TARGET_TOKEN)")
    parser.add_argument(
        "--state-dir",
        default=os.environ.get("CALCULET_AGENT_STATE", str(Path.home() / ".local/state/calculet-agent")),
        help="the agent's key, its input cache and its runs' working directories (or CALCULET_AGENT_STATE)",
    )
    parser.add_argument(
        "--runner-command",
        default=os.environ.get("CALCULET_RUNNER_COMMAND", ""),
        help="the runner this host runs (docs/runner-protocol.md), or CALCULET_RUNNER_COMMAND",
    )
    parser.add_argument("--device", action="append", default=[], help="a device node the runner may open")
    parser.add_argument("--host", default="", help="the host's name as evidence shows it (default its hostname)")
    for version in ("calrt", "driver", "firmware", "chip"):
        parser.add_argument(f"--{version}", default="", help=f"the board's {version}, registered as the target's")
    parser.add_argument("--poll-seconds", type=float, default=5.0)
    parser.add_argument("--once", action="store_true", help="run at most one run, then stop")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.token = (
        Path(args.token_file).read_text().strip() if args.token_file else os.environ.get("CALCULET_TARGET_TOKEN", "")
    )
    if not args.server or not args.token or not args.runner_command:
        parser.error("give the server's URL, the target token and the runner command")
    try:
        serve(args)
    except TokenRefusedError as error:
        logger.error("the server refused the target token: %s; stopping", error)
        sys.exit(TOKEN_REFUSED_EXIT)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
