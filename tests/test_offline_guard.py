"""The suite's own guard against reaching the network (tests/offline.py), checked from a test:
a non-loopback connection or look-up fails before any packet leaves and is reported; loopback,
unix sockets and a server's wildcard bind are not networks; every process started has pip's
index off."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys

import pytest

from . import offline


@pytest.mark.parametrize("host", ["192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1"])
def test_a_connection_beyond_loopback_fails_as_with_no_network_and_is_reported(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        with pytest.raises(OSError) as raised:
            sock.connect((host, 9))
    assert raised.value.errno == errno.ENETUNREACH
    assert offline.reached() == [f"socket.connect {host!r}"]  # (cleared: this test passes)


def test_a_datagram_and_a_name_look_up_beyond_loopback_are_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(OSError):
            sock.sendto(b"x", ("192.0.2.1", 9))
    with pytest.raises(OSError):
        socket.getaddrinfo("pypi.org", 443)
    with pytest.raises(OSError):
        socket.gethostbyname(b"files.pythonhosted.org")
    assert offline.reached() == ["socket.sendto '192.0.2.1'", "socket.getaddrinfo 'pypi.org'",
                                 "socket.gethostbyname b'files.pythonhosted.org'"]


def test_loopback_unix_sockets_and_the_wildcard_are_left_alone(tmp_path) -> None:
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen()
        port = server.getsockname()[1]
        for host in ("127.0.0.1", "localhost", "127.0.0.2"):
            with socket.create_connection((host, port), timeout=5):
                pass
    with socket.socket(socket.AF_UNIX) as unix:
        unix.bind(str(tmp_path / "s"))
        unix.listen()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(tmp_path / "s"))
    assert offline.reached() == []
    assert all(offline.is_local(h) for h in ("::1", "[::1]", "::", None, "LOCALHOST", "a.localhost"))
    assert not any(offline.is_local(h) for h in ("10.0.0.1", "example.org", "127.0.0.1.nip.io", 7))


def test_every_process_the_suite_starts_has_pip_s_index_off() -> None:
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('PIP_NO_INDEX'))"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "1"
