"""Running sm120patch in a real pseudo-terminal of a chosen width, and what its lines must be
there: none wider than the terminal but a single word (a path) wider than it, whole."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import termios

from rich.cells import cell_len

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_terminal(args: list[str], env: dict[str, str], columns: int) -> str:
    """Run ``args`` with a pseudo-terminal of ``columns`` as stdin, stdout and stderr."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    proc.wait(timeout=120)
    return ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")


def assert_fits(lines: list[str], width: int) -> None:
    """Every line fits ``width``, but a single word wider than it (a path), which is
    whole on a line of its own, from the left edge: what is copied from it is the name."""
    wide = [line for line in lines if cell_len(line) > width]
    assert all(len(line.split()) == 1 and not line.startswith(" ") for line in wide), "\n".join(wide)
