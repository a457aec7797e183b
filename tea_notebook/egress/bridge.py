"""Inside a sandbox: a loopback port that leads to the host's egress proxy, and nothing else.

The sandbox has its own network namespace with nothing but a loopback device. This script (standard
library only: it runs with the sandbox's interpreter, without tea_notebook necessarily importable)
listens on ``127.0.0.1:PORT`` there and forwards every connection to the proxy's Unix socket,
bind-mounted into the sandbox. Clients are pointed at it as an HTTP proxy (``HTTP_PROXY``,
Chromium's ``--proxy-server``).

``python bridge.py --socket SOCK --port PORT [-- PROGRAM ARGS...]``: with a program, the bridge
starts it (every inherited file descriptor passed on: Playwright talks to Chromium over fds 3 and 4),
forwards SIGTERM/SIGINT/SIGHUP to it and exits with its status. :func:`start_bridge` runs the same
forwarder in a thread of the calling process (the sandbox's supervisor uses it).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _forward(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        body = b"the egress proxy is not running"
        head = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        client.sendall(head + body)
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
    back.start()
    _copy(client, upstream)
    back.join()
    client.close()
    upstream.close()


def start_bridge(socket_path: str, port: int = 0) -> tuple[threading.Thread, int]:
    """Listen on ``127.0.0.1:port`` (0: any free port) and forward each connection to ``socket_path``,
    from a daemon thread. Returns the thread and the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_forward, args=(client, socket_path), daemon=True).start()

    thread = threading.Thread(target=accept, name="tea-egress-bridge", daemon=True)
    thread.start()
    return thread, listener.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    """The script: the bridge, and the program it serves."""
    args = list(sys.argv[1:] if argv is None else argv)
    program: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, program = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(prog="bridge.py", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the egress proxy's Unix socket")
    parser.add_argument("--port", type=int, default=3128, help="the loopback port to listen on")
    options = parser.parse_args(args)
    inherited = [fd for fd in range(3, 256) if _is_open(fd)]  # before the bridge opens its own
    _thread, _port = start_bridge(options.socket, options.port)
    if not program:
        threading.Event().wait()
        return 0
    child = subprocess.Popen(program, pass_fds=inherited)
    for fd in inherited:  # the program holds them now; the bridge must not keep a pipe end open
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    status = child.wait()
    return status if status >= 0 else 128 - status


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
