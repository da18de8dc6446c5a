"""Persistent judge cache: one SQLite row per model call, so reruns and resumed runs make no repeat calls.

The key is the sha256 of (backend cache identity with the model's content hash, full prompt, sampling parameters, reply index) — see
:func:`make_key`. The backend identity never contains a secret (API keys are read from the environment
and never passed here), so the database can be shared. Each row stores the raw output text, the
top-logprobs (JSON) and the token usage. Every ``put`` is its own committed transaction in WAL mode: a
process killed with SIGKILL loses at most the call in flight, never a committed row.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dhp.errors import DHPError
from dhp.io import resolve

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT,
    top_logprobs TEXT,
    value REAL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    created REAL NOT NULL,
    finish TEXT,
    refusal TEXT
)
"""
# Columns added after the first caches were written (ALTER TABLE on open, so an older cache keeps its rows):
# ``finish`` the server's finish_reason of a chat row's first reply ("stop", "length", "content_filter", ...; NULL in
# rows written before it was kept); ``refusal`` the reason of a refusal the caller's protocol handles as its answer
# (dhp.calls.run's ``handled``), so a rerun asks it no more and hands the protocol the same refusal again.
_ADDED_COLUMNS = (("finish", "TEXT"), ("refusal", "TEXT"))
_COLUMNS = ("key, identity, kind, text, top_logprobs, value, prompt_tokens, completion_tokens, created, finish, "
            "refusal")
# What a server said about itself (its model entry: id, root, max_model_len) when calls were answered or exported,
# so a rerun from the cache can name the model without reaching the server (offline batch import).
_SERVERS = """
CREATE TABLE IF NOT EXISTS servers (
    identity TEXT PRIMARY KEY,
    info TEXT NOT NULL
)
"""


# Keys whose call failed (not answered, so not in calls): a rerun asks them after the fresh ones (dhp.calls.pending).
_FAILURES = """
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    n INTEGER NOT NULL
)
"""


def make_key(cache_identity: dict, prompt: Any, params: dict, sample_index: int) -> str:
    """sha256 over a canonical JSON of everything that determines a model call's output.

    ``cache_identity`` is the backend's :meth:`~dhp.backends.Backend.cache_identity` (backend, the
    model's content identity — e.g. the GGUF's sha256 — and output-affecting settings), so a new model
    under an old name never reuses old answers; ``prompt`` is the full prompt (a string, a chat message
    list, or a (prefix, continuation) pair); ``params`` the sampling parameters; ``sample_index`` the
    reply's index within its request.
    """
    payload = json.dumps(
        {"identity": cache_identity, "prompt": prompt, "params": params, "sample": int(sample_index)},
        sort_keys=True, ensure_ascii=False, separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass
class CachedCall:
    """One stored call. ``top_logprobs``: list (one per generated token) of {token: logprob} dicts."""

    text: str | None
    top_logprobs: list[dict[str, float]] | None
    value: float | None  # numeric result of non-chat calls (e.g. a summed log-likelihood)
    prompt_tokens: int | None
    completion_tokens: int | None
    #: the server's finish_reason of the (first) reply, as it said it (None: not known, e.g. a row of an older cache)
    finish_reason: str | None = None
    #: a refusal the protocol handles as its answer (dhp.calls.run's ``handled``): its reason; None for a reply
    refusal: str | None = None


_SLOTS = ", ".join("?" * len(_COLUMNS.split(", ")))


def _row(key: str, identity: str, kind: str, c: CachedCall) -> tuple:
    return (key, identity, kind, c.text, json.dumps(c.top_logprobs) if c.top_logprobs is not None else None,
            c.value, c.prompt_tokens, c.completion_tokens, time.time(), c.finish_reason,
            None if c.refusal is None else str(c.refusal)[:300])


class Cache:
    """SQLite-backed call cache (WAL journal, one commit per ``put``).

    ``Cache(None)`` or ``Cache(":memory:")`` gives a throw-away in-memory cache.
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path in (None, ":memory:") else resolve(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the judge thread and the async backend's result callback.
        self._lock = threading.Lock()
        try:
            self._con = sqlite3.connect(
                ":memory:" if self.path is None else str(self.path),
                timeout=30, check_same_thread=False, isolation_level=None,
            )
            if self.path is not None:
                self._con.execute("PRAGMA journal_mode=WAL")
                self._con.execute("PRAGMA synchronous=NORMAL")
            self._con.execute(_SCHEMA)
            have = {r[1] for r in self._con.execute("PRAGMA table_info(calls)")}
            for name, kind in _ADDED_COLUMNS:
                if name not in have:  # a cache written before the column existed: its rows read NULL there
                    try:
                        self._con.execute(f"ALTER TABLE calls ADD COLUMN {name} {kind}")
                    except sqlite3.OperationalError as e:  # another process opening it added it first
                        if "duplicate column" not in str(e):
                            raise
            self._con.execute(_SERVERS)
            self._con.execute(_FAILURES)
        except sqlite3.DatabaseError as e:
            raise DHPError(f"Cannot open the judge cache {self.path}: {e}.",
                           "delete the file or pass another cache path.") from None
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> CachedCall | None:
        with self._lock:
            row = self._con.execute(
                "SELECT text, top_logprobs, value, prompt_tokens, completion_tokens, finish, refusal FROM calls "
                "WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return CachedCall(row[0], json.loads(row[1]) if row[1] is not None else None, row[2],
                          row[3], row[4], row[5], row[6])

    def contains(self, key: str) -> bool:
        with self._lock:
            return self._con.execute("SELECT 1 FROM calls WHERE key = ?", (key,)).fetchone() is not None

    def put(self, key: str, identity: str, kind: str, call: CachedCall) -> None:
        """Store one call and commit immediately (INSERT OR IGNORE: the first stored result wins)."""
        with self._lock:
            self._con.execute(f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES ({_SLOTS})",
                              _row(key, identity, kind, call))

    def put_many(self, rows: list[tuple[str, str, str, CachedCall]]) -> None:
        """Store several (key, identity, kind, call) in ONE transaction: the replies of one request are
        committed together or not at all (a kill between them cannot leave half a request)."""
        with self._lock:
            self._con.execute("BEGIN")
            try:
                self._con.executemany(f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES ({_SLOTS})",
                                      [_row(*r) for r in rows])
                self._con.execute("COMMIT")
            except BaseException:
                self._con.execute("ROLLBACK")
                raise

    def record_server(self, identity: str, info: dict) -> None:
        """Keep what the server of ``identity`` reported about its model (never a secret: id, owner, root, context)."""
        with self._lock:
            self._con.execute("INSERT OR REPLACE INTO servers VALUES (?, ?)",
                              (identity, json.dumps(info, sort_keys=True)))

    def recorded_server(self, identity: str) -> dict | None:
        with self._lock:
            row = self._con.execute("SELECT info FROM servers WHERE identity = ?", (identity,)).fetchone()
        return json.loads(row[0]) if row else None

    def note_failure(self, key: str, reason: str) -> None:
        """Remember that the call of ``key`` failed (its reason, how often)."""
        with self._lock:
            self._con.execute("INSERT INTO failures VALUES (?, ?, 1) ON CONFLICT(key) DO UPDATE SET "
                              "reason = excluded.reason, n = n + 1", (key, reason[:300]))

    def failed(self, keys) -> set[str]:
        """The keys of ``keys`` whose call failed before (see :meth:`note_failure`)."""
        keys = list(keys)
        out: set[str] = set()
        with self._lock:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                out |= {r[0] for r in self._con.execute(
                    f"SELECT key FROM failures WHERE key IN ({','.join('?' * len(part))})", part)}
        return out

    def __len__(self) -> int:
        with self._lock:
            return self._con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_cache(cache: "Cache | str | os.PathLike | None | bool") -> Cache:
    """Accept a Cache, a path, or None/False (in-memory, nothing persisted)."""
    if isinstance(cache, Cache):
        return cache
    if cache is None or cache is False:
        return Cache(None)
    return Cache(Path(cache))
