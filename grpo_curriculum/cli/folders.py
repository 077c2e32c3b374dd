"""
The folders `train`, `demo` and `sweep` write: which resume may write into a folder holding files, and the lock that
keeps two commands out of one folder.

**The lock.** A command that writes a run folder first takes `.NAME.grpo-curriculum.lock` beside it (`NAME` the
folder's name once symbolic links are resolved, so two spellings of one folder share one lock): a file holding the
holder's command, PID, host and start time, locked with `fcntl.flock` (exclusive, without waiting). A second command
into the same folder finds it locked and exits 2 naming the holder. The kernel releases the lock when its holder ends,
however it ends (SIGKILL included): a lock file left by a killed command is taken over by the next one, which says
whose it was. The holder removes the file when its command returns. A file of that name that is not such a lock (not
JSON naming this program) is never written over: the command refuses, naming it. Child processes (a sweep's runs)
inherit the lock: it is held until the last of them ends. Where the lock file cannot be created (a read-only parent
folder) or the file system cannot lock (or the platform has no `fcntl`), a warning says so and the command goes on
without the lock.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import socket
import stat
import time

from ..core.errors import CurriculumError, Problem

logger = logging.getLogger("grpo_curriculum")

LOCK_SUFFIX = ".grpo-curriculum.lock"
_PROGRAM = "grpo-curriculum"
_HELD: list[FolderLock] = []


def lock_path(folder: str | os.PathLike) -> str:
    """The lock file of `folder`: `.NAME.grpo-curriculum.lock` beside it, symbolic links resolved."""
    parent, name = os.path.split(os.path.realpath(folder))
    return os.path.join(parent, f".{name or 'root'}{LOCK_SUFFIX}")


def _describe(owner: dict | None) -> str:
    if not owner:
        return "another grpo-curriculum command (starting: it has not written its PID yet)"
    return (f"grpo-curriculum {owner.get('command', '?')} (PID {owner.get('pid', '?')} on host "
            f"{owner.get('host', '?')}, started {owner.get('started', '?')})")  # fmt: skip


def _read_owner(fd: int) -> tuple[bool, dict | None]:
    """(whether the lock file is one of ours, its holder): an empty file is ours, not yet written."""
    data = os.pread(fd, 4097, 0)
    if not data.strip():
        return True, None
    try:
        owner = json.loads(data.decode("utf-8")) if len(data) <= 4096 else None
    except (UnicodeDecodeError, ValueError):
        owner = None
    if not isinstance(owner, dict) or owner.get("program") != _PROGRAM:
        return False, None
    return True, owner


class FolderLock:
    """An exclusive lock on a run folder (see the module); [`release`] removes its file."""

    def __init__(self, path: str, fd: int):
        self.path, self.fd, self.pid = path, fd, os.getpid()

    def release(self) -> None:
        """Remove the lock file and release the lock (in the process that took it; children leave it alone)."""
        if self.fd is None or os.getpid() != self.pid:
            return
        try:
            held = os.fstat(self.fd)
            now = os.stat(self.path, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                os.unlink(self.path)  # ours: the file this process holds locked (checked by device and inode)
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.fd = None
            if self in _HELD:
                _HELD.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def hold_folder(folder: str | os.PathLike, key: str, command: str) -> FolderLock | None:
    """
    Take the lock of `folder` for `command` until [`FolderLock.release`] or [`release_all`] (the command's end).

    Args:
        folder: The run folder (it need not exist; its parent is created for the lock file).
        key (`str`): Where the folder was given (`output_dir`, `--out`), for the message.
        command (`str`): `train`, `demo` or `sweep`, recorded for the next command to name.

    Returns:
        [`FolderLock`], or `None` when the file system cannot lock (a warning says so: the run goes on unprotected).

    Raises:
        [`CurriculumError`]: when another command holds the folder (naming it), or the lock file's name is taken by a
        file that is not a grpo-curriculum lock.
    """
    path = lock_path(folder)
    try:
        import fcntl
    except ImportError:  # not a POSIX platform
        logger.warning("cannot lock %s on this platform (no fcntl): a second command writing it at the same time "
                       "would not be stopped", folder)  # fmt: skip
        return None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        pass  # the open below says what is wrong
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and not os.path.lexists(path):
                logger.warning("cannot create the lock file %s (%s): a second command writing %s at the same time "
                               "would not be stopped", path, error.strerror, folder)  # fmt: skip
                return None
            raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} cannot be opened "
                                           f"({error.strerror or error})", "remove what is at that path, or choose "
                                           "another folder")]) from None  # fmt: skip
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} is not a regular file",
                                               "remove it, or choose another folder")])  # fmt: skip
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)[1]
                raise CurriculumError([Problem(key, str(folder), f"is in use by {_describe(owner)}, which holds "
                                               f"{path}", "wait until it ends, or choose another folder (two "
                                               "commands writing one folder overwrite each other's runs)")]) from None
            except OSError as error:
                if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                logger.warning("cannot lock %s on this file system (%s): a second command writing %s at the same "
                               "time would not be stopped", path, error.strerror, folder)  # fmt: skip
                os.close(fd)
                return None
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:  # its holder removed it between our open and our lock: open it anew
                os.close(fd)
                continue
            held = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):  # replaced meanwhile: lock the new one
                os.close(fd)
                continue
            ours, owner = _read_owner(fd)
            if not ours:
                raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} exists and is not a "
                                               "grpo-curriculum lock file (it is left as it is)", "rename or remove "
                                               "it, or choose another folder")])  # fmt: skip
            if owner is not None:
                logger.warning("%s: taking over the lock of %s, which ended without releasing it (it was killed, "
                               "or crashed): no command writes the folder now", path, _describe(owner))
            record = {"program": _PROGRAM, "command": command, "pid": os.getpid(), "host": socket.gethostname(),
                      "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "folder": os.path.realpath(folder)}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        lock = FolderLock(path, fd)
        _HELD.append(lock)
        return lock


def release_all() -> None:
    """Release every lock this process holds (a command's end; also at exit)."""
    for lock in list(_HELD):
        lock.release()


atexit.register(release_all)


def resumes_in(output_dir: str, resume) -> bool:
    """
    Whether `resume` (`resume_from_checkpoint`) continues the run of `output_dir`, which may then hold files: `True`
    (its newest checkpoint), or a checkpoint folder directly inside it (symbolic links resolved). A checkpoint of
    another folder does not: the run would write over what `output_dir` holds.
    """
    if resume is True:
        return True
    if not isinstance(resume, (str, os.PathLike)) or not os.fspath(resume):
        return False
    return os.path.dirname(os.path.realpath(resume)) == os.path.realpath(output_dir)


def main_process() -> bool:
    """Whether this is the launch's first process (`RANK` 0, or not launched by `torchrun`/`accelerate`)."""
    return os.environ.get("RANK", "0") == "0"
