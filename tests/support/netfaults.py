"""Network faults for the tests: a TCP proxy that can stop forwarding without closing anything
(a middlebox gone silent), a PostgreSQL cluster of the test's own inside a network namespace
whose link can be taken down (packets dropped), and a PgBouncer of the test's own."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class SilentProxy:
    """A TCP proxy on 127.0.0.1 (a free port) to ``upstream``.

    :meth:`pause` stops forwarding: every connection stays open, the proxy's kernel keeps
    acknowledging what the client sends and answering its keepalives, and nothing reaches
    either side (new connections are accepted and then left waiting). :meth:`resume` forwards
    again, what was held included (a close as well).
    """

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self.forwarding = threading.Event()
        self.forwarding.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        self.forwarding.clear()

    def resume(self) -> None:
        self.forwarding.set()

    def close(self) -> None:
        self._closed.set()
        self.forwarding.set()
        for s in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _wait_forwarding(self) -> bool:
        while not self.forwarding.wait(0.2):
            if self._closed.is_set():
                return False
        return not self._closed.is_set()

    def _serve(self, client: socket.socket) -> None:
        if not self._wait_forwarding():
            return
        try:
            upstream = socket.create_connection(self._upstream, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self._sockets.append(upstream)
        other = threading.Thread(target=self._pump, args=(upstream, client), daemon=True)
        other.start()
        self._pump(client, upstream)
        other.join()
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.close()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while self._wait_forwarding():
            try:
                ready, _, _ = select.select([src], [], [], 0.2)
            except (OSError, ValueError):
                return
            if not ready or not self.forwarding.is_set():
                continue
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            try:
                dst.sendall(data)
            except OSError:
                return


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


@dataclass
class NamespacedServer:
    """A PostgreSQL cluster listening only on ``address`` inside network namespace ``netns``,
    reached from the host over a veth pair whose host end is ``link``; ``socket_dir`` (a Unix
    socket, no network) reaches it whatever the link does."""

    netns: str
    link: str
    address: str
    port: int
    socket_dir: str

    @property
    def tcp_dsn(self) -> str:
        return f"host={self.address} port={self.port} user=postgres dbname=postgres"

    @property
    def socket_dsn(self) -> str:
        return f"host={self.socket_dir} port={self.port} user=postgres dbname=postgres"

    def link_down(self) -> None:
        _run("ip", "link", "set", self.link, "down")

    def link_up(self) -> None:
        _run("ip", "link", "set", self.link, "up")


def netns_unavailable() -> str | None:
    """Why a namespaced server cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("runuser") is None:
        return "the ip and runuser commands are missing (apt-get install iproute2 util-linux)"
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL server binaries in {PG_BIN}"
    probe = f"reaper-network-probe-{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", probe)
    except (subprocess.CalledProcessError, OSError):
        return "ip netns add is not permitted here"
    _run("ip", "netns", "del", probe)
    return None


@contextlib.contextmanager
def namespaced_server(port: int) -> Iterator[NamespacedServer]:
    """Start a throwaway cluster (initdb, trust) in a new network namespace; stop and remove
    everything afterwards. Names carry a random suffix: other tests run beside this one."""
    tag = uuid.uuid4().hex[:6]
    netns, host_end, ns_end = f"reaper-network-{tag}", f"vrn{tag}h", f"vrn{tag}n"
    octet_a, octet_b = 200 + int(tag[:2], 16) % 50, int(tag[2:4], 16)
    host_ip, ns_ip = f"10.{octet_a}.{octet_b}.1", f"10.{octet_a}.{octet_b}.2"
    work = Path(tempfile.mkdtemp(prefix="reaper-netns-"))
    data = work / "data"
    shutil.chown(work, "postgres", "postgres")
    started = False
    try:
        _run("ip", "netns", "add", netns)
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _run("ip", "link", "set", ns_end, "netns", netns)
        _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        in_ns = ("ip", "netns", "exec", netns)
        _run(*in_ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_end)
        _run(*in_ns, "ip", "link", "set", ns_end, "up")
        _run(*in_ns, "ip", "link", "set", "lo", "up")
        as_pg = ("runuser", "-u", "postgres", "--")
        _run(*as_pg, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {host_ip}/32 trust\n")
        options = (
            f"-c listen_addresses={ns_ip} -c port={port} -c unix_socket_directories={work} "
            "-c fsync=off -c shared_buffers=16MB"
        )
        _run(
            *in_ns,
            *as_pg,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(work / "server.log"),
            "-w",
            "start",
        )
        started = True
        yield NamespacedServer(netns, host_end, ns_ip, port, str(work))
    finally:
        if started:
            with contextlib.suppress(subprocess.CalledProcessError):
                _run(
                    "runuser",
                    "-u",
                    "postgres",
                    "--",
                    str(PG_BIN / "pg_ctl"),
                    "-D",
                    str(data),
                    "-m",
                    "immediate",
                    "stop",
                )
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "link", "del", host_end)
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "netns", "del", netns)
        shutil.rmtree(work, ignore_errors=True)
