"""
Files the package writes and reads back, whatever they hold (checkpoint states, run folders' records, sweep tables,
benchmark results): writes are atomic (a temporary file, synced, then renamed over the target), reads are bounded (a
regular file of at most a given size, never a FIFO or a device) and every failure is one
[`CurriculumStateError`] naming the file, what is wrong and what to do. What the values must be is
[`~training.schema`]'s (schemas) and each reader's own.
"""

from __future__ import annotations

import json
import os
import secrets
import stat

from ..core.errors import shorten_text

MAX_FILE_BYTES = 1 << 30
"""Largest file read back, in bytes (1 GiB; the curriculum files of a 50k-prompt checkpoint take under 1 MB)."""


class CurriculumStateError(ValueError):
    """
    A file the package reads back (a checkpoint's curriculum state, a trainer state) cannot be used: the message names
    the file, says what is wrong with it and what to do.
    """


def atomic_write(path: str | os.PathLike, write, binary: bool = False) -> None:
    """
    Call `write(file)` on a temporary file next to `path`, sync it and rename it to `path`: readers see the old file or
    the new one, never a part (the temporary file is removed if `write` fails).
    """
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    f = open(tmp, "xb" if binary else "x", encoding=None if binary else "utf-8")  # a new file: never a user's
    try:
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)  # ours: created above
        raise


def atomic_json(path: str, data) -> None:
    """Write `data` as JSON to `path` through a temporary file and a rename: readers see the old or the new file."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2, sort_keys=True) + "\n"))


# --- the one bounded reader ----------------------------------------------------------------------------------------

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def read_file(path: str | os.PathLike, fix: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """
    The bytes of `path`, a regular file (or a link to one) of at most `limit` bytes. A FIFO, a device or a link to one
    is refused without being read (it could block, or never end); the file is opened non-blocking and checked again
    once open.

    Args:
        path (`str` or `os.PathLike`): The file.
        fix (`str`): What to do when the file cannot be used, for the message.
        limit (`int`, *optional*, defaults to [`MAX_FILE_BYTES`]): Largest size read.

    Raises:
        [`CurriculumStateError`]: naming the file, what is wrong with it (missing, not a regular file, too large,
        unreadable) and `fix`.
    """
    path = os.fspath(path)

    def fail(rule: str) -> CurriculumStateError:
        return CurriculumStateError(f"{path} {rule}. Fix: {fix}.")

    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind is not None:
            raise fail(f"is {kind}, not a regular file: it is not read")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise fail("does not exist") from None
    except OSError as error:
        raise fail(f"cannot be read ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        kind = _not_regular(info.st_mode)
        if kind is not None:  # replaced between the two checks
            raise fail(f"is {kind}, not a regular file: it is not read")
        if info.st_size > limit:
            raise fail(f"holds {info.st_size} bytes, more than the {limit} read")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise fail(f"cannot be read ({error.strerror or error})") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise fail(f"holds more than the {limit} bytes read")
    return data


def read_json(path: str | os.PathLike, fix: str, limit: int = MAX_FILE_BYTES):
    """
    The JSON value in `path`, read with [`read_file`].

    Raises:
        [`CurriculumStateError`]: naming the file, why it cannot be used and `fix`.
    """
    data = read_file(path, fix, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # ValueError: JSON syntax, 4300+ digit integers
        reason = "nested too deeply" if isinstance(error, RecursionError) else shorten_text(str(error), 200)
        raise CurriculumStateError(f"{os.fspath(path)} cannot be read ({reason}): the file is damaged. "
                                   f"Fix: {fix}.") from None
