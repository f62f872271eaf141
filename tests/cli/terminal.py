"""A command in a pseudo-terminal, read the way a person watching it would see it.

The child gets a real tty (120 x 40) for stdin, stdout and stderr, so rich draws its live
progress bar; `screen_text` drops the escape codes and keeps what the last redraw of each
line left behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def screen_text(raw: str) -> str:
    """What a terminal shows once every redraw is done: escapes gone, `\\r` overwrites applied."""
    plain = ANSI.sub("", raw)
    return "\n".join(line.split("\r")[-1] for line in plain.replace("\r\n", "\n").split("\n"))


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.master = master
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True
        )
        os.close(slave)
        self.raw = b""

    @property
    def text(self) -> str:
        return self.raw.decode(errors="replace")

    @property
    def screen(self) -> str:
        return screen_text(self.text)

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the child closed its end
            return False
        self.raw += chunk
        return bool(chunk)

    def read_until(self, seen: Callable[[str], bool], timeout: float = 30) -> str:
        """Read until `seen(screen)` holds; fails with what was on screen when it never does."""
        deadline = time.monotonic() + timeout
        while not seen(self.screen):
            if time.monotonic() > deadline:
                raise AssertionError(f"not seen within {timeout}s; the screen:\n{self.screen}")
            if not self._read(0.05) and self.process.poll() is not None:
                if seen(self.screen):
                    break
                raise AssertionError(
                    f"the command ended first ({self.process.returncode}):\n{self.screen}"
                )
        return self.screen

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the command, as the terminal would send it."""
        self.process.send_signal(signal.SIGINT)

    def wait(self, timeout: float = 60) -> int:
        """Read everything to the end; answers the exit code."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._read(0.05) and self.process.poll() is not None:
                break
            if self.process.poll() is not None:
                while self._read(0.05) and select.select([self.master], [], [], 0)[0]:
                    pass
                break
        else:
            self.process.kill()
            raise AssertionError(f"still running after {timeout}s:\n{self.screen}")
        return self.process.wait(5)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        os.close(self.master)
