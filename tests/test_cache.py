"""The judge cache: keys, persistence across connections, first write wins."""

import sqlite3

from dhp.cache import CachedCall, Cache, make_key


def test_key_depends_on_every_part():
    ident = {"backend": "embedded:m", "model": "sha-1"}
    msg = [{"role": "user", "content": "p"}]
    base = make_key(ident, msg, {"temperature": 0.0}, 0)
    assert len(base) == 64
    assert base == make_key(dict(ident), msg, {"temperature": 0.0}, 0)
    variants = [
        make_key({**ident, "backend": "embedded:x"}, msg, {"temperature": 0.0}, 0),
        make_key({**ident, "model": "sha-2"}, msg, {"temperature": 0.0}, 0),
        make_key(ident, [{"role": "user", "content": "p2"}], {"temperature": 0.0}, 0),
        make_key(ident, msg, {"temperature": 0.5}, 0),
        make_key(ident, msg, {"temperature": 0.0}, 1),
    ]
    assert len({base, *variants}) == 6


def test_a_model_file_with_new_bytes_under_the_old_name_gets_new_keys(tmp_path):
    """Upgrading a model (same file name, other content) must not reuse the old model's answers."""
    from dhp.backends import EmbeddedBackend

    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir(), new_dir.mkdir()
    (old_dir / "judge.gguf").write_bytes(b"GGUF" + b"\x00" * 64)
    (new_dir / "judge.gguf").write_bytes(b"GGUF" + b"\x01" * 64)
    old, new = EmbeddedBackend(str(old_dir / "judge.gguf")), EmbeddedBackend(str(new_dir / "judge.gguf"))
    assert old.identity == new.identity  # the name alone cannot tell them apart
    msg = [{"role": "user", "content": "p"}]
    assert make_key(old.cache_identity(), msg, {}, 0) != make_key(new.cache_identity(), msg, {}, 0)
    same = EmbeddedBackend(str(old_dir / "judge.gguf"))
    assert make_key(old.cache_identity(), msg, {}, 0) == make_key(same.cache_identity(), msg, {}, 0)


def test_roundtrip_persists_and_first_write_wins(tmp_path):
    path = tmp_path / "c.sqlite"
    c = Cache(path)
    tops = [{"4": -0.1, "3": -2.0}]
    c.put("k1", "embedded:m", "chat", CachedCall("4", tops, None, 100, 1))
    c.put("k1", "embedded:m", "chat", CachedCall("5", None, None, 1, 1))  # ignored
    c.put("k2", "embedded:m", "loglik", CachedCall(None, None, -12.5, 30, 5))
    c.close()
    c2 = Cache(path)
    assert len(c2) == 2 and c2.contains("k1") and not c2.contains("k3")
    got = c2.get("k1")
    assert got.text == "4" and got.top_logprobs == tops and got.prompt_tokens == 100
    assert c2.get("k2").value == -12.5 and c2.get("missing") is None
    assert (c2.hits, c2.misses) == (2, 1)
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_in_memory_cache_is_not_persisted():
    c = Cache(None)
    c.put("k", "i", "chat", CachedCall("x", None, None, 1, 1))
    assert len(c) == 1 and c.path is None
