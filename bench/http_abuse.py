"""The HTTP port of the real `reaper run` under abusive clients: what a scraper sees, and the
daemon's resident memory.

    .venv/bin/python bench/http_abuse.py [--only SCENARIO] [--seconds 75]

Each scenario starts `reaper run` (REAPER_BENCH_DSN, else REAPER_TEST_DSN, else a dead
address: the port does not need the database) and prints one Markdown table row:

Scenarios (``--only``):

- idle: 61 keep-alive connections that send a request every 40 s and read its answer, while a
  fresh scraper connects every 2 s (without and with basic auth);
- slow: 200 clients that trickle a request a byte a second and never finish it, and 60 that
  ask and never read their answer, while a scraper connects every second; VmRSS before, at
  its peak and after;
- pipelined: 60 connections that each pipeline 3,000 ``GET /metrics`` and never read, while a
  scraper connects every second; VmRSS before, at its peak and after;
- churn: 64 keep-alive connections that ask again as soon as answered and 8 threads that
  connect and close as fast as they can, while a fresh probe connects every half second;
  how many probes got an empty reply (none may);
- passwords: six threads sending wrong passwords as fast as they are answered while a
  scraper (its password verified once) connects every second; the answer time of a wrong
  password for a known and for an unknown user; the status of a password over 72 bytes;
- guessers: 100 addresses sending wrong passwords as fast as they are answered, while a
  scraper whose password was never verified (a restart) asks every second as a new user;
  how many of its tries got 200 within a second;
- files: what `reaper run` does with an empty user list, /dev/zero, a FIFO and a YAML
  nested 20,000 deep as its web config file (exit code and seconds, or still running).

Figures to read, not a pass/fail.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.daemon import free_port, reaper_command, wait_for

USER, PASSWORD = "prometheus", "scrape-password"
BCRYPT_COST = 12


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def request(path: str = "/metrics", auth: tuple[str, str] | None = None) -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: reaper\r\n"
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        head += f"Authorization: Basic {token}\r\n"
    return (head + "\r\n").encode()


def scrape(
    port: int, auth: tuple[str, str] | None = None, timeout: float = 5.0, source: str = "127.0.0.1"
) -> tuple[int, float]:
    """(status, seconds) of one GET /metrics on a fresh connection; status 0: no answer."""
    started = time.monotonic()
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
        ) as s:
            s.sendall(request(auth=auth))
            first = s.recv(64)
    except OSError:
        return 0, time.monotonic() - started
    parts = first.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, time.monotonic() - started


class Reaper:
    def __init__(self, port: int, extra: list[str]) -> None:
        dsn = (
            os.environ.get("REAPER_BENCH_DSN")
            or os.environ.get("REAPER_TEST_DSN")
            or f"postgresql://reaper@127.0.0.1:{free_port()}/none"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (read after the process ends)
        self.proc = subprocess.Popen(
            [*reaper_command(), "run", "--listen", f"127.0.0.1:{port}", "--dsn", dsn, *extra],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            env=env,
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def web_config(tmp: Path, users: int = 1) -> Path:
    """A web config whose users (USER, then USER-1, USER-2...) all have PASSWORD."""
    import bcrypt

    path = tmp / "web.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=BCRYPT_COST)).decode()
    names = [USER] + [f"{USER}-{i}" for i in range(1, users)]
    path.write_text("basic_auth_users:\n" + "".join(f"  {n}: '{hashed}'\n" for n in names))
    return path


def started(port: int, auth: tuple[str, str] | None) -> None:
    wait_for("the port", lambda: scrape(port, auth)[0] == 200)


def summary(results: list[tuple[int, float]]) -> str:
    ok = [t for s, t in results if s == 200]
    worst = f", slowest {max(ok):.2f} s" if ok else ""
    return f"{len(ok)} of {len(results)} answered 200{worst}"


def idle(seconds: float, tmp: Path, with_auth: bool) -> str:
    port = free_port()
    auth = (USER, PASSWORD) if with_auth else None
    reaper = Reaper(port, ["--web-config-file", str(web_config(tmp))] if with_auth else [])
    try:
        started(port, auth)
        headers = (
            {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
            if auth
            else {}
        )
        clients = [http.client.HTTPConnection("127.0.0.1", port, timeout=5) for _ in range(61)]
        stop = threading.Event()

        def one_request(conn: http.client.HTTPConnection) -> None:
            # As a keep-alive client does: reuse the connection, reconnect when it was closed.
            for _ in range(2):
                try:
                    conn.request("GET", "/metrics", headers=headers)
                    conn.getresponse().read()
                    return
                except (OSError, http.client.HTTPException):
                    conn.close()

        def keep_alive() -> None:
            while not stop.is_set():
                for conn in clients:
                    one_request(conn)
                stop.wait(40)

        thread = threading.Thread(target=keep_alive, daemon=True)
        thread.start()
        time.sleep(1)
        results = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            results.append(scrape(port, auth))
            time.sleep(2)
        stop.set()
        for conn in clients:
            conn.close()
        return f"| idle, auth {'on' if with_auth else 'off'} | {summary(results)} |"
    finally:
        reaper.stop()


def pipelined(seconds: float) -> str:
    port = free_port()
    reaper = Reaper(port, [])
    try:
        started(port, None)
        time.sleep(2)
        before = rss_mib(reaper.proc.pid)
        payload = request() * 3000
        clients = []
        for _ in range(60):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.setblocking(False)
                clients.append([s, payload])
        peak = before
        results = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for c in clients:
                if c[1]:
                    with contextlib.suppress(OSError):
                        c[1] = c[1][c[0].send(c[1]) :]
            results.append(scrape(port))
            peak = max(peak, rss_mib(reaper.proc.pid))
            time.sleep(1)
        for c in clients:
            c[0].close()
        time.sleep(3)
        after = rss_mib(reaper.proc.pid)
        return (
            f"| pipelined, unread | {summary(results)}; VmRSS {before:.1f} -> peak "
            f"{peak:.1f} -> {after:.1f} MiB |"
        )
    finally:
        reaper.stop()


def slow(seconds: float) -> str:
    port = free_port()
    reaper = Reaper(port, [])
    try:
        started(port, None)
        time.sleep(2)
        before = peak = rss_mib(reaper.proc.pid)
        partial = b"GET /metrics HTTP/1.1\r\nHost: reaper\r\nX-Slow: " + b"a" * 4000
        trickling: list[list[Any]] = []
        unread = []
        for i in range(260):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.setblocking(False)
                if i < 200:
                    trickling.append([s, partial])
                else:
                    s.send(request())
                    unread.append(s)
        results = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for c in trickling:
                if c[1]:
                    with contextlib.suppress(OSError):
                        c[1] = c[1][c[0].send(c[1][:1]) :]
            results.append(scrape(port))
            peak = max(peak, rss_mib(reaper.proc.pid))
            time.sleep(1)
        for s in [c[0] for c in trickling] + unread:
            s.close()
        time.sleep(3)
        after = rss_mib(reaper.proc.pid)
        return (
            f"| slow and unread | {summary(results)}; VmRSS {before:.1f} -> peak "
            f"{peak:.1f} -> {after:.1f} MiB |"
        )
    finally:
        reaper.stop()


def churn(seconds: float) -> str:
    port = free_port()
    reaper = Reaper(port, [])
    try:
        started(port, None)
        stop = threading.Event()

        def looping() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            while not stop.is_set():
                try:
                    conn.request("GET", "/metrics")
                    conn.getresponse().read()
                except (OSError, http.client.HTTPException):
                    conn.close()
            conn.close()

        def churning(n: int) -> None:
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    if n % 2:
                        s.sendall(request())
                    s.close()

        threads = [threading.Thread(target=looping, daemon=True) for _ in range(64)]
        threads += [threading.Thread(target=churning, args=(n,), daemon=True) for n in range(8)]
        for t in threads:
            t.start()
        time.sleep(2)
        results = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            # A slow answer is measured, not taken for an empty one.
            results.append(scrape(port, timeout=30))
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(10)
        empty = sum(1 for s, _ in results if s == 0)
        return f"| churn | fresh probes: {summary(results)}; empty replies or resets: {empty} |"
    finally:
        reaper.stop()


def passwords(seconds: float, tmp: Path) -> str:
    port = free_port()
    reaper = Reaper(port, ["--web-config-file", str(web_config(tmp))])
    auth = (USER, PASSWORD)
    try:
        started(port, auth)  # the scraper's password is verified (and remembered) here
        # Each from an address of its own: one that guessed wrong three times is held off.
        known = [scrape(port, (USER, f"wrong-{i}"), source=f"127.0.1.{i}")[1] for i in range(1, 4)]
        unknown = [
            scrape(port, (f"nobody-{i}", f"wrong-{i}"), source=f"127.0.1.{i}")[1]
            for i in range(4, 7)
        ]
        long_status = scrape(port, (USER, "x" * 100))[0]
        stop = threading.Event()

        def attack(n: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                scrape(port, (USER, f"guess-{n}-{i}"), timeout=30)

        threads = [threading.Thread(target=attack, args=(n,), daemon=True) for n in range(6)]
        for t in threads:
            t.start()
        time.sleep(1)
        results = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            results.append(scrape(port, auth, source="127.0.0.2"))
            time.sleep(1)
        stop.set()
        for t in threads:
            t.join(35)
        return (
            f"| wrong passwords (cost {BCRYPT_COST}) | six attackers: scraper "
            f"{summary(results)}; a wrong password: known user "
            f"{statistics.median(known) * 1000:.1f} ms, unknown user "
            f"{statistics.median(unknown) * 1000:.1f} ms; a 100-byte password: "
            f"{long_status} |"
        )
    finally:
        reaper.stop()


def guessers(seconds: float, tmp: Path) -> str:
    tries = int(seconds)
    port = free_port()
    reaper = Reaper(port, ["--web-config-file", str(web_config(tmp, users=tries + 1))])
    try:
        wait_for("the port", lambda: scrape(port)[0] == 401)
        stop = threading.Event()

        def attack(n: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                scrape(port, (USER, f"guess-{n}-{i}"), timeout=30, source=f"127.0.2.{n + 1}")

        threads = [threading.Thread(target=attack, args=(n,), daemon=True) for n in range(100)]
        for t in threads:
            t.start()
        time.sleep(3)
        results = []
        for i in range(1, tries + 1):
            # A user never verified: its password needs a bcrypt check, as after a restart.
            results.append(scrape(port, (f"{USER}-{i}", PASSWORD), source="127.0.0.2"))
            time.sleep(1)
        stop.set()
        for t in threads:
            t.join(35)
        fast = sum(1 for s, t in results if s == 200 and t < 1.0)
        statuses = sorted({s for s, _ in results})
        return (
            f"| guessers (cost {BCRYPT_COST}) | 100 guessing addresses: an unverified password "
            f"{summary(results)}, {fast} of {len(results)} within 1 s; statuses {statuses} |"
        )
    finally:
        reaper.stop()


def files(tmp: Path) -> list[str]:
    empty = tmp / "empty.yml"
    empty.write_text("basic_auth_users: {}\n")
    deep = tmp / "deep.yml"
    deep.write_text("basic_auth_users: " + "[" * 20_000 + "]" * 20_000 + "\n")
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    rows = []
    for name, path in (
        ("empty user list", empty),
        ("/dev/zero", Path("/dev/zero")),
        ("a FIFO", fifo),
        ("20,000 deep", deep),
    ):
        port = free_port()
        reaper = Reaper(port, ["--web-config-file", str(path)])
        began = time.monotonic()
        try:
            code = reaper.proc.wait(60)
            reaper.stderr.seek(0)
            line = reaper.stderr.read().decode(errors="replace").strip().splitlines()
            what = f"exit {code} after {time.monotonic() - began:.1f} s: {line[-1] if line else ''}"
        except subprocess.TimeoutExpired:
            answered = scrape(port)[0]
            what = f"still running after 60 s; /metrics without a password: {answered}"
        finally:
            reaper.stop()
        rows.append(f"| web config: {name} | {what} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=["idle", "slow", "pipelined", "churn", "passwords", "guessers", "files"]
    )
    parser.add_argument("--seconds", type=float, default=75.0)
    args = parser.parse_args()
    print("| scenario | figures |\n|---|---|")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only in (None, "idle"):
            print(idle(args.seconds, tmp, with_auth=False), flush=True)
            print(idle(args.seconds, tmp, with_auth=True), flush=True)
        if args.only in (None, "slow"):
            print(slow(min(args.seconds, 30)), flush=True)
        if args.only in (None, "pipelined"):
            print(pipelined(min(args.seconds, 30)), flush=True)
        if args.only in (None, "churn"):
            print(churn(min(args.seconds, 30)), flush=True)
        if args.only in (None, "passwords"):
            print(passwords(min(args.seconds, 20), tmp), flush=True)
        if args.only in (None, "guessers"):
            print(guessers(min(args.seconds, 30), tmp), flush=True)
        if args.only in (None, "files"):
            for row in files(tmp):
                print(row, flush=True)


if __name__ == "__main__":
    main()
