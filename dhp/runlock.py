"""Run folders that cannot collide or destroy: the one check every route runs before it writes a run folder
(:func:`check_run_dir`) and the one-writer lock (:func:`hold`).

- :func:`check_run_dir`: a run folder is never empty (``--run-dir ''`` would be the current folder), never the
  repository root, never inside the demo's published ``results/`` or ``figures/`` — compared as RESOLVED paths, so a
  symlink or ``..`` cannot get around it — and never an existing file or a path under one. The grid publishes into
  results/ and figures/ through its own step (dhp.grid.publish), never as a run folder.
- :func:`hold`: one writer per run folder. An exclusive ``fcntl.flock`` on ``<run folder>/.dhp-run.lock`` (the file
  says who holds it: pid, host, command); the kernel drops the lock when its holder exits, however it ends (SIGKILL
  included), so no stale lock is ever left (a killed holder's file stays, unlocked; a finished one removes it). A second process is refused before any call with the holder's pid and
  the fix, or waits (``wait=True``: ``--wait`` on the command line). Re-entrant within a process: ``run`` holds it
  around its stages, and each stage takes it again without blocking itself (flock locks belong to an open file, so a
  second open in the same process would block on the first).
- :func:`hold_cache`: the same lock for a ``--cache-path`` outside the run folder (``.<name>.dhp-lock`` beside it),
  so two run folders sharing one cache cannot both ask the same calls.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from dhp.errors import DHPError
from dhp.io import project_root, resolve

__all__ = ["LOCK_NAME", "HELD_ENV", "check_run_dir", "hold", "hold_cache", "hold_caches", "holder"]

LOCK_NAME = ".dhp-run.lock"
#: the caches a parent process (a grid) holds for its children, os.pathsep-separated resolved paths
HELD_ENV = "DHP_HELD_CACHES"
#: the repository's published folders (make demo writes them through the grid's publishing step only)
PUBLISHED = ("results", "figures")

_held: dict[Path, list] = {}  # resolved folder -> [fd, depth]: the locks this process holds
_mutex = threading.Lock()


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def check_run_dir(run_dir, option: str = "--run-dir") -> Path:
    """The resolved run folder, or one DHPError: empty, the repository root, inside results/ or figures/ (symlinks
    resolved), an existing file or a path under a file. Creates nothing (a dry run calls it too)."""
    if run_dir is None or not str(run_dir).strip():
        raise DHPError(f"The run folder ({option}) is empty: it would be the current folder.",
                       f"name a folder of its own, e.g. {option} runs/mine.")
    folder = _real(resolve(run_dir))
    root = _real(project_root())
    if folder == root:
        raise DHPError(f"The run folder {run_dir} is the repository root {root}.",
                       f"name a folder of its own, e.g. {option} runs/mine.")
    for name in PUBLISHED:
        published = _real(root / name)
        if folder == published or folder.is_relative_to(published):
            raise DHPError(f"The run folder {run_dir} is inside the demo's {name}/ ({published}), which make demo "
                           "publishes: a run there would overwrite the published tables and figures.",
                           f"use another {option} (e.g. runs/mine); make demo publishes into {name}/ itself.")
    if folder.exists() and not folder.is_dir():
        raise DHPError(f"The run folder {run_dir} is an existing file, not a folder.",
                       f"name a folder with {option} (or move the file away).")
    for parent in folder.parents:
        if parent.exists():
            if not parent.is_dir():
                raise DHPError(f"The run folder {run_dir} is under {parent}, which is a file, not a folder.",
                               f"name a folder with {option} whose parents are folders.")
            break
    return folder


def _redact(text: str) -> str:
    """A command line without credentials in URLs (``http://user:pw@host`` -> ``http://***@host``)."""
    return re.sub(r"(\w+://)[^/\s@]+@", r"\1***@", text)


def _describe(folder: Path, name: str = LOCK_NAME) -> str:
    try:
        info = json.loads((folder / name).read_text(encoding="utf-8"))
        return (f"pid {info['pid']} on {info['host']} since {info['started']} "
                f"(command: {info['command']})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not written its pid yet)"


def holder(run_dir) -> str | None:
    """Who holds the run folder's lock (pid, host, command), or None when no process does."""
    folder = _real(resolve(run_dir))
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(folder)
    finally:
        os.close(fd)  # closing drops the shared lock taken to test
    return None


def _open(folder: Path, run_dir, name: str = LOCK_NAME) -> int:
    """The lock file's descriptor; creating the folder and the file is the check that the folder is writable (as
    root, os.access says yes to a read-only mount, so only a real write tells)."""
    try:
        for _ in range(100):  # another run may remove the empty folder it made between our mkdir and open
            folder.mkdir(parents=True, exist_ok=True)
            try:
                return os.open(folder / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                continue
        raise FileNotFoundError(errno.ENOENT, "the folder keeps disappearing")
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else str(e)
        hint = ("a read-only folder" if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else
                "a path under a file" if e.errno in (errno.ENOTDIR, errno.EEXIST) else "it")
        if name != LOCK_NAME:  # a --cache-path's lock, beside the cache
            raise DHPError(f"Cannot write beside the cache {run_dir} (its lock, in {folder}): {why}.",
                           f"pass a --cache-path in a folder you can write to ({hint} cannot hold it).") from None
        raise DHPError(f"Cannot write the run folder {run_dir}: {why}.",
                       f"pass a --run-dir you can write to ({hint} cannot hold a run).") from None


def _acquire(folder: Path, run_dir, wait: bool, out, name: str = LOCK_NAME) -> int:
    """The descriptor of the lock file, exclusively locked and still the one at its path (written: who holds it)."""
    cache = name != LOCK_NAME
    while True:
        fd = _open(folder, run_dir, name)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = _describe(folder, name)
                what = f"The cache {run_dir}" if cache else f"The run folder {run_dir}"
                if not wait:
                    raise DHPError(f"{what} is in use by another run: {who}.",
                                   "wait for that run to finish (or pass --wait to wait for it), or use another "
                                   + ("--cache-path (or none: each run folder has its own cache)." if cache
                                      else "--run-dir.")) from None
                print(f"waiting for {what[0].lower()}{what[1:]}: in use by {who}", file=out or sys.stderr, flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(folder / name).st_ino
            except FileNotFoundError:
                current = None
            if current != os.fstat(fd).st_ino:  # its holder removed it as it finished: lock the new one
                os.close(fd)
                continue
            info = {"pid": os.getpid(), "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": _redact(" ".join(sys.argv))[:500]}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
            return fd
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise


@contextlib.contextmanager
def hold(run_dir, wait: bool = False, out=None) -> Iterator[Path]:
    """Hold ``run_dir``'s one-writer lock for the ``with`` block (after :func:`check_run_dir`). Another process
    holding it: a DHPError naming it, or (``wait``) wait until it is done. Yields the resolved folder."""
    folder = check_run_dir(run_dir)
    with _locked(folder, LOCK_NAME, run_dir, wait, out):
        yield folder


def _cache_name(cache_file: Path) -> str:
    return f".{cache_file.name}.dhp-lock"


@contextlib.contextmanager
def hold_cache(cache_path, run_dir, wait: bool = False, out=None) -> Iterator[Path | None]:
    """Hold a cache file's one-writer lock when it lies outside the run folder (``--cache-path`` shared by several
    run folders): two runs on one cache would each ask what the other is asking (a request sent twice, a doubled
    bill). A cache inside the run folder is covered by :func:`hold`; None/'' (the run folder's own) holds nothing.
    The lock file ``.<cache name>.dhp-lock`` sits beside the cache. Yields the resolved cache path (or None)."""
    if cache_path is None or not str(cache_path).strip():
        yield None
        return
    cache = _real(resolve(cache_path))
    if run_dir is not None and str(run_dir).strip() and cache.is_relative_to(_real(resolve(run_dir))):
        yield cache
        return
    if str(cache) in os.environ.get(HELD_ENV, "").split(os.pathsep):
        yield cache  # the grid that started this process holds it for all its points (hold_caches)
        return
    if cache.exists() and not cache.is_file():
        raise DHPError(f"The cache {cache_path} is a folder, not a file.",
                       "name a file with --cache-path, e.g. --cache-path caches/judge.sqlite.")
    with _locked(cache.parent, _cache_name(cache), cache_path, wait, out):
        yield cache


@contextlib.contextmanager
def hold_caches(cache_paths, wait: bool = False, out=None) -> Iterator[list[Path]]:
    """Hold every cache of ``cache_paths`` for a grid whose points (notebook kernels, its children) share them: the
    grid is their one writer against other runs, and its children find the caches in DHP_HELD_CACHES, so they do not
    refuse each other."""
    with contextlib.ExitStack() as stack:
        held = [c for c in (stack.enter_context(hold_cache(p, None, wait, out)) for p in dict.fromkeys(cache_paths))
                if c is not None]
        before = os.environ.get(HELD_ENV)
        os.environ[HELD_ENV] = os.pathsep.join([*(before.split(os.pathsep) if before else []), *map(str, held)])
        try:
            yield held
        finally:
            if before is None:
                os.environ.pop(HELD_ENV, None)
            else:
                os.environ[HELD_ENV] = before


@contextlib.contextmanager
def _locked(folder: Path, name: str, label, wait: bool, out) -> Iterator[None]:
    key = folder / name
    made: list[Path] = []
    with _mutex:
        mine = _held.get(key)
        if mine is not None:  # this process holds it already (a stage inside run): go on
            mine[1] += 1
    if mine is None:
        made = [d for d in (folder, *folder.parents) if not d.exists()]  # removed again if left empty
        fd = _acquire(folder, label, wait, out, name)
        with _mutex:
            _held[key] = mine = [fd, 1]
    try:
        yield
    finally:
        with _mutex:
            mine[1] -= 1
            last = mine[1] == 0
            if last:
                del _held[key]
        if last:
            # the file goes while still locked (a run leaves nothing behind); one who opened it meanwhile sees
            # that it is gone once it gets the lock, and takes a new one (_acquire)
            with contextlib.suppress(OSError):
                os.unlink(key)
            os.close(mine[0])  # closing the file releases the flock
            for d in made:  # a run that failed before writing anything leaves no folder either
                try:
                    os.rmdir(d)
                except OSError:
                    break
