"""CLI: python -m reclaim.local.pubsub_emulator --host 127.0.0.1 --port 8085 [--admin-port N]."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from reclaim.local.pubsub_emulator.admin import AdminServer
from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.faults import FaultError, Faults
from reclaim.local.pubsub_emulator.policy import INITIAL_PUSH_WINDOW, WINDOW_MODES
from reclaim.local.pubsub_emulator.push import Pusher
from reclaim.local.pubsub_emulator.server import build_server

TICK_SECONDS = 0.25


def _env_fraction(name: str) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw.strip() else 0.0
    except ValueError:
        raise SystemExit(f"{name} must be a number between 0 and 1, got {raw!r}") from None


def _count(raw: str) -> int:
    if not raw.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {raw!r}")
    return int(raw)


def _env_count(name: str) -> int:
    raw = os.environ.get(name, "")
    try:
        return _count(raw) if raw.strip() else 0
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"{name} {exc}") from None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reclaim.local.pubsub_emulator", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8085)
    p.add_argument(
        "--admin-port",
        type=int,
        default=None,
        help="serve GET /stats and POST /faults on this port (0 = any free port)",
    )
    p.add_argument(
        "--push-concurrency",
        type=int,
        default=32,
        help="largest push window (pushes in flight) per subscription (default 32)",
    )
    p.add_argument(
        "--push-window",
        choices=WINDOW_MODES,
        default=os.environ.get("PUBSUB_EMULATOR_PUSH_WINDOW") or "adaptive",
        help="adaptive: the service's flow control (starts small, grows on acks, halves on "
        "failures); fixed: always --push-concurrency (default adaptive)",
    )
    p.add_argument(
        "--push-window-initial",
        type=int,
        default=INITIAL_PUSH_WINDOW,
        help=f"first push window of an adaptive subscription (default {INITIAL_PUSH_WINDOW})",
    )
    p.add_argument(
        "--pull-wait",
        type=float,
        default=2.0,
        help="seconds a Pull without return_immediately waits for messages",
    )
    p.add_argument(
        "--duplicate-fraction",
        type=float,
        default=_env_fraction("PUBSUB_EMULATOR_DUPLICATE_FRACTION"),
        help="test-only: deliver this fraction of messages twice",
    )
    p.add_argument(
        "--drop-publish-fraction",
        type=float,
        default=_env_fraction("PUBSUB_EMULATOR_DROP_PUBLISH_FRACTION"),
        help="test-only: answer OK but drop this fraction of published messages",
    )
    p.add_argument(
        "--max-pull-messages",
        type=_count,
        default=_env_count("PUBSUB_EMULATOR_MAX_PULL_MESSAGES"),
        help="test-only: a Pull answers at most this many messages (0 = what was asked)",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the fault knobs' randomness")
    p.add_argument("--verbose", action="store_true", help="log every call outcome to stderr")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.push_concurrency < 1 or args.push_window_initial < 1:
        print(
            "pubsub emulator: --push-concurrency and --push-window-initial must be >= 1",
            file=sys.stderr,
        )
        return 2
    if args.push_window not in WINDOW_MODES:
        print(f"pubsub emulator: --push-window must be one of {WINDOW_MODES}", file=sys.stderr)
        return 2
    try:
        faults = Faults(args.duplicate_fraction, args.drop_publish_fraction, args.seed)
    except FaultError as exc:
        print(f"pubsub emulator: {exc}", file=sys.stderr)
        return 2
    broker = Broker(faults=faults)
    try:
        server, port = build_server(
            broker,
            args.host,
            args.port,
            pull_wait=args.pull_wait,
            max_pull_messages=args.max_pull_messages,
        )
        admin = None
        if args.admin_port is not None:
            admin = AdminServer(broker, args.host, args.admin_port)
    except (OSError, RuntimeError) as exc:
        print(f"pubsub emulator: cannot listen: {exc}", file=sys.stderr)
        return 1

    # The handler only appends: threading.Event.set() takes the event's lock, which the
    # main thread may hold inside stop.wait() when the signal lands, and then the process
    # hangs forever on its own SIGTERM (seen as an orphan after `make dev` was killed).
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    pusher = Pusher(
        broker,
        args.push_concurrency,
        adaptive=args.push_window == "adaptive",
        initial_window=args.push_window_initial,
    )
    server.start()
    pusher.start()
    if admin is not None:
        admin.start()
    admin_note = f", admin http://{args.host}:{admin.port}" if admin is not None else ""
    print(
        f"pubsub emulator listening on {args.host}:{port}{admin_note}", file=sys.stderr, flush=True
    )
    while not stopping:
        time.sleep(TICK_SECONDS)  # a signal ends the sleep early; its handler takes no lock
        if stopping:
            break
        try:
            broker.tick()
        except Exception:  # keep serving; the next tick retries
            logging.getLogger("pubsub_emulator").exception("tick failed")

    pusher.stop()
    broker.close()
    if admin is not None:
        admin.stop()
    server.stop(grace=0.5).wait(2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
