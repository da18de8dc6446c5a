"""Offline batch for scale: write a run's pending model calls as an OpenAI Batch input file, answer it
elsewhere (OpenAI's Batch API, or ``vllm run-batch`` on GPU nodes, shard by shard), and load the answers
into the run's cache; rerunning the pipeline then makes no live call.

    python -m dhp batch export <python -m dhp run arguments> --out calls.jsonl
    python -m dhp batch import results.jsonl <the same arguments>

Export runs the pipeline inside :func:`dhp.calls.collect_pending`: the first stage with uncached calls
(LLM perturbations, then judging) stops there and its calls are written, one line each::

    {"custom_id": <cache key>, "method": "POST", "url": "/v1/chat/completions", "body": {...}}

A stage's prompts depend on the stage before it (the judge scores what the perturber wrote), so a run
with an LLM perturber needs two rounds: export → answer → import, then export again for the judge.

Import re-plans the same run, matches every output line's ``custom_id`` to a pending call, checks each
line before anything is stored (a foreign id, a line that is not JSON, or a body that does not parse
rejects the whole file with the line numbers named — nothing half-imported), stores the successful
answers in the cache and reports answers with an error status (left pending). Importing twice is
harmless (the cache keeps the first stored answer).

Only OpenAI-compatible judges (``openai:<model>[@url]``) can be exported: the body is the one that
backend would send live, so the cache keys of a batch run and of a live run are the same.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from dhp.backends import is_loopback
from dhp.backends.base import reply_status_value
from dhp.cache import CachedCall, open_cache
from dhp.calls import Call, PendingCalls, collect_pending
from dhp.errors import DHPError
from dhp.io import decode_user_text, jsonl_lines, resolve, write_text

__all__ = ["export_calls", "import_results", "answer_file", "ImportReport", "CHAT_URL"]

CHAT_URL = "/v1/chat/completions"


def _pending(run: Callable[[], Any]) -> PendingCalls | None:
    """Run a pipeline callable until its first stage with uncached calls; None when all are cached."""
    with collect_pending():
        try:
            run()
        except PendingCalls as p:
            return p
    return None


def _body(backend, call: Call) -> dict:
    if call.kind != "chat" or not hasattr(backend, "chat_body"):
        raise DHPError(f"Batch export supports chat calls to OpenAI-compatible judges, not {call.kind} calls "
                       f"to {backend.identity}.",
                       "use --judge openai:<model>[@<url>] with mode logprobs or sample.")
    return backend.chat_body(call.request)


def _pending_all(run) -> list[PendingCalls]:
    """The pending calls of each run of ``run`` (one callable, or a list: ``dhp batch export evaluate`` gives one per
    method), each up to its first stage with uncached calls."""
    runs = run if isinstance(run, (list, tuple)) else [run]
    return [p for p in (_pending(r) for r in runs) if p is not None]


def export_calls(run: "Callable[[], Any] | list[Callable[[], Any]]", out: str | os.PathLike) -> int:
    """Write the pending calls of ``run`` (a no-argument callable running the pipeline, or a list of them: every
    method of an evaluation, one file, one ``custom_id`` space — a call two methods share is written once) to ``out``
    in the OpenAI Batch input format; returns how many lines were written (0: everything is cached)."""
    path = resolve(out)
    lines, seen = [], set()
    for found in _pending_all(run):
        for c in found.calls:
            if c.keys[0] in seen:
                continue
            seen.add(c.keys[0])
            lines.append(json.dumps({"custom_id": c.keys[0], "method": "POST", "url": CHAT_URL,
                                     "body": _body(found.backend, c)}, ensure_ascii=False, sort_keys=True))
    write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


@dataclass
class ImportReport:
    """What an import did: answers stored, lines whose answer was an error (still pending), and calls
    of the run that the file did not answer."""

    stored: int
    error_lines: list[tuple[int, str]]
    unanswered: int

    def describe(self) -> str:
        s = f"imported {self.stored} answers; {self.unanswered} calls of this stage still pending"
        if self.error_lines:
            s += f"; {len(self.error_lines)} lines carried an error (e.g. line {self.error_lines[0][0]}: " \
                 f"{self.error_lines[0][1]})"
        return s


def _same_model(answered: str, asked: str) -> bool:
    """True when a reply's ``model`` is the model asked for: the same name, or a dated snapshot of it (OpenAI answers
    "gpt-4o" as "gpt-4o-2024-08-06", older models as "gpt-4-0613")."""
    return answered == asked or re.fullmatch(re.escape(asked) + r"-\d{4}(?:-\d{2}-\d{2})?", answered) is not None


def _read_results(path: Path, backend, by_id: dict) -> tuple[list[str], list, list[tuple[int, str]]]:
    """Check every line of a batch output file: (problems — foreign or corrupt lines, which reject the
    whole file —, answers as (call, parsed result), errors — lines the batch itself failed)."""
    problems: list[str] = []
    answers: list[tuple[Call, Any]] = []
    errors: list[tuple[int, str]] = []
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DHPError(f"Cannot read the batch results file {path}: {e.strerror or e}.",
                       "check the path and that the file is readable.") from None
    asked = getattr(backend, "model", None)
    for no, line in jsonl_lines(decode_user_text(raw, str(path))):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            problems.append(f"line {no}: not JSON")
            continue
        if not isinstance(rec, dict) or "custom_id" not in rec:
            problems.append(f"line {no}: not a batch output record (a JSON object with custom_id)")
            continue
        cid = rec["custom_id"]
        if not isinstance(cid, str):
            problems.append(f"line {no}: custom_id is a JSON {type(cid).__name__}, not the text batch export wrote")
            continue
        call = by_id.get(cid)
        if call is None:
            problems.append(f"line {no}: custom_id {cid[:16]}… is not a pending call of this run")
            continue
        resp = rec.get("response")
        resp = {} if resp is None else resp
        if not isinstance(resp, dict):
            problems.append(f"line {no}: response is a JSON {type(resp).__name__}, not an object")
            continue
        status, err, body = resp.get("status_code"), rec.get("error"), resp.get("body")
        if err or status != 200:
            msg = err.get("message") if isinstance(err, dict) else err
            detail = msg or ((body or {}).get("error", "") if isinstance(body, dict) else body or "")
            errors.append((no, f"HTTP {status}: {detail}"[:200]))
            continue
        if not isinstance(body, dict):
            problems.append(f"line {no}: response body is {'missing' if body is None else 'a JSON '}"
                            f"{'' if body is None else type(body).__name__}, not a chat completion")
            continue
        answered = body.get("model")
        if asked and answered is not None and not (isinstance(answered, str) and _same_model(answered, asked)):
            # an answer of another model under this run's key would be cached as this judge's answer
            problems.append(f"line {no}: answered by model {str(answered)[:60]!r}, not this run's judge model "
                            f"{asked!r}")
            continue
        try:
            res = backend.parse_chat(body)
        except Exception as e:  # noqa: BLE001 - any parse error makes the line corrupt
            problems.append(f"line {no}: response body does not parse ({e})")
            continue
        texts = list(getattr(res, "texts", None) or [res.text])
        if len(texts) < len(call.keys):
            problems.append(f"line {no}: {len(texts)} replies where {len(call.keys)} were asked for")
            continue
        answers.append((call, res))
    return problems, answers, errors


def import_results(run: "Callable[[], Any] | list[Callable[[], Any]]", results: str | os.PathLike,
                   cache) -> ImportReport:
    """Load an OpenAI Batch output file into ``cache`` for the pending calls of ``run`` (one callable or a list, as
    :func:`export_calls`; see module docstring). Raises DHPError naming the lines when any line is foreign or
    corrupt; then nothing is stored."""
    path = resolve(results)
    if not path.is_file():
        raise DHPError(f"Batch results file {path} not found.", "pass the output file of the batch job.")
    pendings = _pending_all(run)
    if not pendings:
        return ImportReport(0, [], 0)
    backend = pendings[0].backend  # one judge: every method of an evaluation asks the same backend
    by_id = {c.keys[0]: c for p in pendings for c in p.calls}
    problems, answers, errors = _read_results(path, backend, by_id)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise DHPError(f"{path} was not imported: {shown}.",
                       "import the output of a batch exported with the same run arguments "
                       "(python -m dhp batch export ...), unmodified.")
    store = open_cache(cache)
    try:
        rows = []
        for call, res in answers:
            texts = list(getattr(res, "texts", None) or [res.text])
            rows += [(key, backend.identity, "chat",
                      CachedCall(texts[i], res.top_logprobs if i == 0 else None,
                                 reply_status_value(res) if i == 0 else None,  # how it ended, as a live answer
                                 res.prompt_tokens if i == 0 else 0, res.completion_tokens if i == 0 else 0,
                                 getattr(res, "finish_reason", None) if i == 0 else None))
                     for i, key in enumerate(call.keys)]
        store.put_many(rows)  # one transaction: the whole file or nothing
    finally:
        if not hasattr(cache, "put"):
            store.close()
    answered = {c.keys for c, _ in answers}
    return ImportReport(len(answers), errors, sum(1 for c in by_id.values() if c.keys not in answered))


def read_lines(path: str | os.PathLike) -> list[dict]:
    """The records of a JSONL batch file."""
    return [json.loads(line) for _, line in jsonl_lines(Path(path).read_text(encoding="utf-8"))]


def answer_file(calls_path: str | os.PathLike, out: str | os.PathLike, base_url: str, timeout: float = 600) -> int:
    """Answer an exported batch input file with an OpenAI-compatible server, one request at a time in
    file order, writing the OpenAI Batch output format (what ``vllm run-batch`` and OpenAI's Batch API
    write). For local servers and tests; a key, if the server needs one, is read from OPENAI_API_KEY and
    only sent to https or loopback URLs. Returns the number of lines written."""
    import httpx

    host = urlparse(base_url).hostname or ""
    key = os.environ.get("OPENAI_API_KEY", "")
    if key and not (base_url.startswith("https://") or is_loopback(host)):
        raise DHPError(f"Refusing to send OPENAI_API_KEY over plain http to {host}.",
                       "use an https:// URL or a loopback server.")
    headers = {"Authorization": f"Bearer {key or 'sk-no-key'}"}
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    rows = []
    with httpx.Client(timeout=timeout, headers=headers) as client:
        for i, rec in enumerate(read_lines(calls_path)):
            r = client.post(root + rec["url"], json=rec["body"])
            ok = r.status_code == 200
            rows.append({"id": f"batch_req_{i}", "custom_id": rec["custom_id"],
                         "response": {"status_code": r.status_code, "request_id": f"req_{i}",
                                      "body": r.json() if ok else {"error": r.text[:500]}},
                         "error": None})
    path = Path(out)
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows), encoding="utf-8")
    return len(rows)
