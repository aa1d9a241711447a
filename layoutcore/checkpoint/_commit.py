"""Where a save writes before its commit, and the commit itself: a reader sees the old checkpoint or the new one.

A save writes into a hidden sibling directory ``.NAME.tmp-*`` of the checkpoint ``NAME`` and
commits it with one atomic step:

* ``NAME`` does not exist: ``rename(tmp, NAME)`` (atomic on every platform).
* ``NAME`` exists and the platform swaps two directories atomically (Linux ``renameat2`` with
  ``RENAME_EXCHANGE``): swap them, then remove the old one.
* Otherwise (macOS, Windows, a file system without the exchange): a **commit pointer**. The new
  checkpoint moves *into* ``NAME`` as ``NAME/.v-ID`` (a name no reader looks at), then
  ``NAME/layoutcore.json`` is replaced (``os.replace``, atomic on every platform) by the new
  metadata whose array nodes are prefixed with ``.v-ID/``, so the one file a reader opens first
  decides which checkpoint it reads; the root ``zarr.json`` follows, and only then is every other
  entry of ``NAME`` (the old checkpoint's arrays, an older ``.v-*``) removed. A save killed at any
  point leaves ``NAME`` complete, old or new: leftovers are never read and a later commit removes
  them. The loader needs nothing special: it joins each tensor's node to ``NAME`` as always.

A killed save also leaves its ``.NAME.tmp-PID-HOST-ID`` directory behind. The next save of ``NAME``
removes those whose process is gone (this host, PID not alive), and those of unknown owner
(another host, a multi-process save's ``.NAME.tmp-ENGINE-SIZE``) older than :data:`STALE_AFTER_S`;
it names the others in a ``RuntimeWarning`` and leaves them alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
import warnings
from typing import Any

from ._format import write_json
from ._meta import META

__all__ = ["POINTER_PREFIX", "STALE_AFTER_S", "commit", "fsync_path", "make_tmp", "remove_stale"]

#: Prefix of the directory a commit pointer names, inside the checkpoint.
POINTER_PREFIX = ".v-"
#: A temporary directory whose owner cannot be checked is stale after this many seconds untouched.
STALE_AFTER_S = 24 * 3600.0
_ROOT_ZARR = "zarr.json"


def _host_tag() -> str:
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def _tmp_prefix(target: str) -> str:
    return os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.tmp-")


def make_tmp(target: str, shared_name: str | None = None) -> str:
    """The path of a new temporary directory for ``target`` (not created).

    ``shared_name``: for several processes, which must all name one directory alike (their engine
    and size); otherwise the name records this process's PID and host, so a later save can tell
    whether its owner is gone.
    """
    if shared_name is not None:
        return _tmp_prefix(target) + shared_name
    return _tmp_prefix(target) + f"{os.getpid()}-{_host_tag()}-{uuid.uuid4().hex[:12]}"


def _owner_gone(name: str) -> bool | None:
    """Whether the save that made tmp directory ``name`` is dead (``None``: unknown)."""
    match = re.search(r"\.tmp-(\d+)-([0-9a-f]{8})-[0-9a-f]{12}$", name)
    if match is None or match[2] != _host_tag() or os.name != "posix":
        return None  # another host, or no signal-0 probe (Windows' os.kill terminates)
    try:
        os.kill(int(match[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, owned by another user
        return False
    return False


def _untouched_for(path: str) -> float:
    newest = os.stat(path).st_mtime
    with os.scandir(path) as entries:
        for entry in entries:
            newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return time.time() - newest


def remove_stale(target: str, keep: str = "") -> list[str]:
    """Remove the temporary directories of ``target``'s saves that were killed; returns those removed.

    A directory whose owner is alive, or unknown and touched within :data:`STALE_AFTER_S`, is kept
    and named in a ``RuntimeWarning``. ``keep``: this save's own directory.
    """
    prefix = _tmp_prefix(target)
    parent = os.path.dirname(target)
    removed, kept = [], []
    try:
        names = [n for n in os.listdir(parent) if os.path.join(parent, n).startswith(prefix)]
    except FileNotFoundError:
        return []
    for name in sorted(names):
        path = os.path.join(parent, name)
        if path == keep or not os.path.isdir(path):
            continue
        gone = _owner_gone(name)
        try:
            stale = gone if gone is not None else _untouched_for(path) > STALE_AFTER_S
        except FileNotFoundError:  # removed meanwhile (its save committed)
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        else:
            kept.append(path)
    if kept:
        warnings.warn(
            f"checkpoint.save({target!r}): left {len(kept)} temporary director{'y' if len(kept) == 1 else 'ies'} "
            f"of other saves that may still run: {kept}. Remove them once no save of it runs.",
            RuntimeWarning,
            stacklevel=4,
        )
    return removed


def fsync_path(p: str) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError, TypeError):  # no renameat2 (macOS), no C library handle (Windows)
        return False
    at_fdcwd, rename_exchange = -100, 2
    res = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(res == 0)


def commit(tmp: str, target: str, *, sync: bool = False) -> dict[str, Any]:
    """Make the complete checkpoint in ``tmp`` the checkpoint at ``target``, atomically (module docstring).

    Returns:
        The metadata now at ``target`` (``tmp``'s, or its pointed form).

    Raises:
        OSError: ``target`` is a file, or the file system refused a step (``target`` then still
            holds the old checkpoint, or the new one once the commit point passed).
    """
    with open(os.path.join(tmp, META), "rb") as f:
        meta: dict[str, Any] = json.loads(f.read())
    try:
        os.rename(tmp, target)  # fails if target exists and is not an empty directory
    except OSError:
        if not os.path.isdir(target):
            raise
    else:
        return meta
    if _exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)  # now the old checkpoint
        return meta
    return _commit_by_pointer(tmp, target, meta, sync)


def _commit_by_pointer(tmp: str, target: str, meta: dict[str, Any], sync: bool) -> dict[str, Any]:
    version = POINTER_PREFIX + uuid.uuid4().hex[:12]
    live = os.path.join(target, version)
    os.rename(tmp, live)  # the new checkpoint, complete, where no reader looks yet
    pointed = _pointed(meta, version)
    for name, data in ((META, pointed), (_ROOT_ZARR, _root_group(live))):
        staged = os.path.join(target, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
        write_json(staged, data)
        if sync:
            fsync_path(staged)
        os.replace(staged, os.path.join(target, name))  # META first: the commit point
    if sync:
        fsync_path(target)
    for name in sorted(os.listdir(target)):  # the old checkpoint, and leftovers of killed commits
        if name not in (META, _ROOT_ZARR, version):
            _remove(os.path.join(target, name))
    return pointed


def _pointed(meta: dict[str, Any], version: str) -> dict[str, Any]:
    """``meta`` of the checkpoint moved to ``version/``: nodes and files prefixed, read from the parent."""
    out = dict(meta)
    out["tensors"] = {p: {**e, "node": f"{version}/{e['node']}"} for p, e in meta["tensors"].items()}
    out["files"] = sorted([*(f"{version}/{f}" for f in meta["files"]), META, _ROOT_ZARR])
    return out


def _root_group(live: str) -> Any:
    with open(os.path.join(live, _ROOT_ZARR), "rb") as f:
        return json.loads(f.read())


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
