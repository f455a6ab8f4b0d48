"""Reading a file that a user names (``--config``, ``--web-config-file``): a regular file of
bounded size, or one line saying why not.

A path can name a directory, a device (``/dev/zero`` never ends), a FIFO (``open`` waits for
a writer) or a huge file by mistake; each is refused at once instead of read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from reaper.errors import ConfigError


def read_regular_file(path: Path, *, name: str, expect: str, limit_bytes: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit_bytes``.

    Args:
        name: how messages name the file (``config file /etc/reaper.toml``).
        expect: what to give instead, for the messages (``give --config a TOML file``).

    Raises:
        ConfigError: one line: the file is missing, unreadable, not a regular file, or larger
            than ``limit_bytes``.
    """
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise ConfigError(f"{name} is {what}; {expect}")
        # O_NONBLOCK: were it swapped for a FIFO since the stat, open() still returns at once.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"{name} is not a regular file; {expect}")
            data = fh.read(limit_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(f"{name} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit_bytes:
        size = f"{limit_bytes // 1024} KiB" if limit_bytes >= 1024 else f"{limit_bytes} bytes"
        raise ConfigError(f"{name} is larger than {size}; is it the right file?")
    return data
