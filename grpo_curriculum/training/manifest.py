"""
A checkpoint's manifest (`curriculum_manifest.json`): the size and content hash of each file the package's trainers
wrote into the checkpoint folder, written at save time just before `trainer_state.json` (the file that marks a
checkpoint complete), and checked when a run resumes from it ([`~training.checkpoint.check_checkpoint`]; the
asynchronous trainer's resume checks it too). A file
damaged at the same size (a disk error, a copy that wrote other bytes) then names itself instead of failing inside
torch, or resuming silently on damaged weights, and `resume_from_checkpoint=True` takes the previous complete
checkpoint.

What it covers: the regular files directly in the folder when the trainer state is written (the weights, optimizer,
scheduler, RNG states, training arguments: what resume loads without checking its values), except the files other
processes write on their own schedule (`rng_state_N.pth` of a launch of several processes: rank 0 may list one
half-written) and the curriculum's state files (checked by their schema). Not covered: subfolders (sharded FSDP or DeepSpeed states) and checkpoints written without a manifest
(before this version, or by plain TRL). The asynchronous trainer writes its manifest just after TRL's save (a save cut
short before it has none). The hash is xxHash's XXH3-128: it finds damage, not tampering.
"""

from __future__ import annotations

import os
import re

from .files import CurriculumStateError, atomic_json, read_json

MANIFEST_FILE = "curriculum_manifest.json"
LEFT_OUT = re.compile(r"^(trainer_state\.json|curriculum_manifest\.json|rng_state_\d+\.pth|\..*|"
                      r"curriculum_(async_)?(state\.json|arrays\.npz)|entropy_ctrl_state\.json)$")
"""The files a manifest leaves out: the completion marker, itself, other processes' RNG states, hidden files (an
atomic write's temporary file), and the curriculum's own state files (read back through the bounded reader and
checked value by value against their schema, which names what is wrong in them: a manifest would only say "other
bytes")."""
CHUNK = 8 << 20
MAX_FILES = 10_000


def file_hash(path: str) -> str:
    """XXH3-128 of the file's bytes, read in chunks (hex)."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: str) -> None:
    """Write `folder`'s manifest (atomically): each covered file's name, size and hash."""
    files = []
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False) and not LEFT_OUT.match(entry.name):
                files.append({"name": entry.name, "size": entry.stat().st_size, "hash": file_hash(entry.path)})
    atomic_json(os.path.join(folder, MANIFEST_FILE), {"version": 1, "hash": "xxh3_128", "files": files})


def check_manifest(folder: str, fix: str) -> None:
    """
    Check the files of `folder` against its manifest (nothing to check without one).

    Raises:
        [`~training.files.CurriculumStateError`]: naming the manifest when it cannot be used, or the first file that
        is missing or holds other bytes than were saved, and `fix`.
    """
    path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.lexists(path):
        return
    files = _entries(read_json(path, fix, limit=4 << 20))
    if files is None:
        raise CurriculumStateError(f"{path} is not a manifest this version reads (version 1, hash xxh3_128, at most "
                                   f"{MAX_FILES} files, each a plain name, a size and a hash). Fix: {fix}.")
    for entry in files:
        file = os.path.join(folder, entry["name"])
        if not os.path.isfile(file):
            raise CurriculumStateError(f"{file} is missing: it was saved with the checkpoint ({MANIFEST_FILE} lists "
                                       f"it). Fix: {fix}.")
        size = os.path.getsize(file)
        what = (f"holds {size} bytes, not the {entry['size']} saved" if size != entry["size"] else
                "holds other bytes than were saved (the same size, another content hash: a disk or copy error)"
                if file_hash(file) != entry["hash"] else None)  # fmt: skip
        if what:
            raise CurriculumStateError(f"{file} is damaged: it {what}, by {MANIFEST_FILE}. Fix: {fix}.")


def _entries(manifest) -> list[dict] | None:
    """The manifest's file entries, or `None` when it is not one this version reads."""
    if not (isinstance(manifest, dict) and manifest.get("version") == 1 and manifest.get("hash") == "xxh3_128"):
        return None
    files = manifest.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        return None
    for entry in files:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("hash"), str)
                and type(entry.get("size")) is int and entry["size"] >= 0 and entry["name"] not in ("", ".", "..")
                and os.path.basename(entry["name"]) == entry["name"] and not LEFT_OUT.match(entry["name"])):
            return None
    return files
