"""Starting a service on a port a process held a moment ago. A SIGKILLed JVM's leader thread is
reported dead (a zombie) while its other threads, which hold the listening socket, are still
being torn down; a restart right after must wait for the socket, not call it someone else's.
A process here plays that JVM: its main thread exits alone (SYS_exit, not exit_group) while
another thread keeps listening for a while."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lakehouse.core.errors import ServiceError
from lakehouse.devstack.processes import pid_alive, port_open, require_free

HOST = "127.0.0.1"

# The child listens, then its main thread leaves through the raw exit syscall (60 on x86_64,
# 93 on aarch64) so the thread group lives on in its second thread until `hold` seconds pass.
CHILD = textwrap.dedent(
    """
    import ctypes, platform, socket, sys, threading, time
    hold = float(sys.argv[1])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    print(server.getsockname()[1], flush=True)
    threading.Thread(target=lambda: (time.sleep(hold), server.close()), daemon=False).start()
    time.sleep(0.2)
    ctypes.CDLL(None, use_errno=True).syscall(60 if platform.machine() == "x86_64" else 93, 0)
    """
)


@contextmanager
def listener_whose_leader_exits(hold: float) -> Iterator[tuple[subprocess.Popen[str], int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(hold)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        yield child, port
    finally:
        child.kill()
        child.wait()


def wait_for_zombie_leader(pid: int) -> None:
    deadline = time.monotonic() + 10
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"the leader of {pid} never exited"
        time.sleep(0.02)


def test_a_port_held_by_a_process_whose_leader_just_died_is_waited_for() -> None:
    with listener_whose_leader_exits(hold=2.0) as (child, port):
        wait_for_zombie_leader(child.pid)
        assert port_open(HOST, port), "the dying process should still hold its socket"
        require_free("Kafka Connect", HOST, port, "connect.url")
        assert not port_open(HOST, port)


def test_a_port_held_longer_than_the_grace_is_refused_naming_the_setting() -> None:
    with socket.socket() as other:
        other.bind((HOST, 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(ServiceError) as refused:
            require_free("Kafka Connect", HOST, port, "connect.url", grace=0.5)
    assert str(refused.value) == (
        f"cannot start Kafka Connect: {HOST}:{port} is taken by another process (not ours); "
        "stop it or change connect.url"
    )
