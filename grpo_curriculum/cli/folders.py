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

The lock file is created whole: its record is written into a new private file, locked, and hard-linked to the lock's
name, which fails if anything is there; an existing file is only ever read, never written (a hard link to a user's
file, a link, an empty file are refused, left as they are). A folder inside a folder another command holds (e.g.
`demo --out RUN/nested` while `train` writes `RUN`: RUN's checkpoint rotation and final save would own it), or one
holding a folder another command holds, is refused too, naming the holder.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import secrets
import socket
import stat
import time

from ..core.errors import CurriculumError, Problem

logger = logging.getLogger("grpo_curriculum")

LOCK_SUFFIX = ".grpo-curriculum.lock"
PROBE_PREFIX = ".grpo-curriculum-probe-"  # [`writable_problems`]' probe files
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
        [`CurriculumError`]: when another command holds the folder, a folder above it or a folder inside it (naming
        the holder), or the lock file's name is taken by a file that is not a grpo-curriculum lock.
    """
    path = lock_path(folder)
    try:
        import fcntl
    except ImportError:  # not a POSIX platform
        logger.warning("cannot lock %s on this platform (no fcntl): a second command writing it at the same time "
                       "would not be stopped", folder)  # fmt: skip
        return None
    _refuse_nesting(folder, key, below=False)  # before anything is created: nothing is written inside a held folder
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        pass  # the open below says what is wrong
    record = {"program": _PROGRAM, "command": command, "pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "folder": os.path.realpath(folder)}
    while True:
        try:
            fd = _create(path, record, fcntl)
        except FileExistsError:
            fd = _take_over(path, folder, key, fcntl)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                logger.warning("cannot create the lock file %s (%s): a second command writing %s at the same time "
                               "would not be stopped", path, error.strerror, folder)  # fmt: skip
                return None
            if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                logger.warning("cannot lock %s on this file system (%s): a second command writing %s at the same "
                               "time would not be stopped", path, error.strerror, folder)  # fmt: skip
                return None
            raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} cannot be created "
                                           f"({error.strerror or error})", "free some space, or choose another "
                                           "folder")]) from None  # fmt: skip
        if fd is not None:
            break
    lock = FolderLock(path, fd)
    try:
        _refuse_nesting(folder, key, above=False)  # once ours: a command starting in a folder inside sees it
    except BaseException:
        lock.release()
        raise
    _HELD.append(lock)
    return lock


def _create(path: str, record: dict, fcntl) -> int:
    """
    Create the lock file at `path` holding `record`, locked, in one step: the record is written into a new private
    file, locked, then hard-linked to `path` (which fails if anything is there), so the lock never exists empty or
    unlocked and no existing file, link or hard link is ever opened for writing. Raises `FileExistsError` when
    `path` exists.
    """
    temporary = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"  # a new name: never one a killed command left
    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file no one else has opened: never blocks
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.link(temporary, path)
        finally:
            os.unlink(temporary)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _take_over(path: str, folder, key: str, fcntl) -> None:
    """
    The lock file at `path` exists: refuse if another command holds it or it is not a grpo-curriculum lock, else (a
    lock left by a command that ended without removing it) remove it, saying whose it was, so the caller creates a
    new one. Returns `None` (the caller tries again).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:  # its holder removed it meanwhile
        return None
    except OSError as error:
        raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} cannot be opened "
                                       f"({error.strerror or error})", "remove what is at that path, or choose "
                                       "another folder")]) from None  # fmt: skip
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):
            raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} is not a regular file",
                                           "remove it, or choose another folder")])  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CurriculumError([Problem(key, str(folder), f"is in use by {_describe(_read_owner(fd)[1])}, which "
                                           f"holds {path}", "wait until it ends, or choose another folder (two "
                                           "commands writing one folder overwrite each other's runs)")]) from None
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):  # replaced meanwhile: look again
            return None
        ours, owner = _read_owner(fd)
        if not ours or owner is None or held.st_nlink != 1:
            raise CurriculumError([Problem(key, str(folder), f"cannot be locked: {path} exists and is not a "
                                           "grpo-curriculum lock file (it is left as it is)", "rename or remove "
                                           "it, or choose another folder")])  # fmt: skip
        logger.warning("%s: taking over the lock of %s, which ended without releasing it (it was killed, or "
                       "crashed): no command writes the folder now", path, _describe(owner))
        os.unlink(path)  # a lock record of ours whose holder has ended (still locked by us while it goes)
        return None
    finally:
        os.close(fd)


def _holder(path: str) -> dict | None:
    """The record of the command holding the lock file `path`, or `None` when no command holds it (or it is none)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held
            ours, owner = _read_owner(fd)
            return (owner or {}) if ours else None
        except OSError:  # the file system cannot lock: no holder can be told
            return None
        return None
    finally:
        os.close(fd)


MAX_SCANNED = 100_000  # entries of a resumed folder searched for a command's lock inside it


def _refuse_nesting(folder, key: str, above: bool = True, below: bool = True) -> None:
    """
    Refuse a run folder inside a folder another command is writing (`above`: its checkpoint rotation and final save
    would own it), or one holding a folder that another command is writing (`below`: a resumed run's folder), naming
    the holder.
    """
    real = os.path.realpath(folder)
    ours = {lock.path for lock in _HELD} | {lock_path(folder)}
    up, parent = real, os.path.dirname(real)
    while above and parent != up:
        other = lock_path(up)
        if up != real and other not in ours:
            owner = _holder(other)
            if owner is not None:
                raise CurriculumError([Problem(key, str(folder), f"is inside {up}, which {_describe(owner)} is "
                                               f"writing (it holds {other})", "choose a folder outside it: a run "
                                               "inside another run's folder is overwritten or deleted by it")])
        up, parent = parent, os.path.dirname(parent)
    if not below or not os.path.isdir(real):
        return
    seen = 0
    for root, dirs, files in os.walk(real):  # links to folders are not followed
        seen += len(dirs) + len(files)
        for name in files:
            other = os.path.join(root, name)
            if name.endswith(LOCK_SUFFIX) and other not in ours:
                owner = _holder(other)
                if owner is not None:
                    raise CurriculumError([Problem(key, str(folder), f"holds {owner.get('folder') or other}, "
                                                   f"which {_describe(owner)} is writing (it holds {other})",
                                                   "wait until it ends, or choose another folder")])
        if seen > MAX_SCANNED:
            logger.warning("%s holds over %d files: not searched further for another command's run inside it",
                           folder, MAX_SCANNED)
            return


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


# --- output folders ------------------------------------------------------------------------------------------------


LOCK_NAME_EXTRA = len(f".{LOCK_SUFFIX}.{'9' * 7}.{'f' * 8}.tmp")  # the lock's private file, around NAME (`_create`)


def folder_problems(path: str, key: str) -> list[Problem]:
    """
    What rules `path` out as a run folder whatever it holds, checked before anything is created (the lock's parent
    folder included; `check` runs it too): a symbolic link to nothing, a file, or a name too long for the lock file
    beside it (`.NAME.grpo-curriculum.lock` and its private copy, within the file system's name limit).
    """
    if os.path.islink(path) and not os.path.exists(path):
        return [Problem(key, path, f"is a symbolic link to {os.readlink(path)}, which does not exist",
                        "create the folder it links to, or choose a new folder, e.g. `runs/NAME`")]
    if os.path.lexists(path) and not os.path.isdir(path):
        return [Problem(key, path, "names a file, not a folder (the run writes a folder of files there)",
                        "choose a new folder, e.g. `runs/NAME`")]
    real = os.path.realpath(path)
    name, place = os.path.basename(real), os.path.dirname(real)
    while not os.path.isdir(place) and os.path.dirname(place) != place:
        place = os.path.dirname(place)
    try:
        limit = os.pathconf(place, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    longest = limit - LOCK_NAME_EXTRA
    if len(name.encode()) > longest:
        return [Problem(key, path, f"has a folder name of {len(name.encode())} bytes: the run's lock file beside it "
                        f"(.NAME{LOCK_SUFFIX}) needs the name to be at most {longest} bytes (this file system's "
                        f"names hold {limit})", f"choose a folder name of at most {longest} characters")]
    return []


def output_dir_problems(path: str, key: str, fix: str, resuming: bool = False) -> list[Problem]:
    """
    A run writes only into a new or empty folder (or, resuming, its own): nothing the user owns is overwritten.

    Args:
        path (`str`): The output folder.
        key (`str`): Where it was given (`output_dir`, `--out`), for the message.
        fix (`str`): What to do instead, for a folder that holds files.
        resuming (`bool`, *optional*, defaults to `False`): The run continues from a checkpoint: the folder is its own.
    """
    problems = folder_problems(path, key)
    if problems or not os.path.lexists(path):
        return problems
    try:
        with os.scandir(path) as entries:  # another process's writability probe is not a file of the user's
            empty = next((e for e in entries if not e.name.startswith(PROBE_PREFIX)), None) is None
    except OSError as error:
        return [Problem(key, path, f"cannot be read ({error.strerror})", "choose a folder you can write to")]
    if empty or resuming:
        return []
    return [Problem(key, path, "is a folder that already holds files, which the run could overwrite", fix)]


def writable_problems(path: str, key: str) -> list[Problem]:
    """
    Whether a run can write `path` (or, while it does not exist, the nearest folder above it), probed by writing,
    syncing and removing a file of this command's own: a read-only file system, a full disk or a folder without write
    permission is named before any model loads, not as a traceback after the model is built (or steps trained).
    """
    import tempfile

    place = os.path.abspath(path)
    while not os.path.isdir(place) and os.path.dirname(place) != place:
        place = os.path.dirname(place)
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=place)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)  # ours: created just above by mkstemp (O_EXCL)
    except OSError as error:
        return [Problem(key, path, f"cannot be written: {error.strerror or error} in {place}", "choose a folder on a "
                        "writable file system with free space, or free some space there")]  # fmt: skip
    return []


def new_folder(base: str) -> str:
    """`base` if nothing is there, else the first of `base-2`, `base-3`, ... that is free (nor locked by a command
    that will write it: see [`~folders.hold_folder`])."""
    n, path = 1, base
    while os.path.lexists(path) or os.path.lexists(lock_path(path)):
        n += 1
        path = f"{base}-{n}"
    return path

