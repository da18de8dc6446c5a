"""GEMBA live (Kocmi & Federmann 2023; github.com/MicrosoftTranslator/GEMBA @ a7a7eff8, CC BY-SA 4.0): the protocols
``gemba:DA``, ``gemba:DA_ref``, ``gemba:SQM``, ``gemba:SQM_ref``, ``gemba:stars``, ``gemba:stars_ref``,
``gemba:classes``, ``gemba:classes_ref`` — the prompts behind GEMBA's recorded judges (dhp.recorded.gemba, whose
scores were made by an older decoding: see there and :data:`RECORDED_DECODING`).

Nothing of GEMBA is copied here: the templates, language names, answer rule, decoding parameters and retry limits
are READ AT RUN TIME from the data root's ``gemba/gemba/prompt.py`` and ``gemba/gemba/gpt_api.py`` by parsing
their Python literals with :mod:`ast` (never importing or executing them): ``prompts[<name>]`` (``prompt``,
``use_ref``, ``max_tokens``; the ``validate_answer`` lambda names its rule — ``validate_number`` with that
function's ``min``/``max`` defaults, ``validate_stars``, or ``parse_classes`` with the lambda's ``classes``
default), ``language_codes``, ``GptApi.call_api``'s ``parameters`` (``temperature: temperature / D``, top_p, n,
penalties, stop), ``request``'s start temperature and step, and ``request_api``'s temperature limit.

What a call sends (as ``gemba_da.py`` + ``GptApi`` at a7a7eff8): the template filled with ``str.format``
(source_lang and target_lang the names of the language codes, source_seg, target_seg, reference_seg) as one user
message; temperature ``t / D`` for the attempt ``t`` = 0, 1, ... (D = 10); no ``max_tokens`` (``gemba_da.py`` passes
none, not even the classes prompts' 100). The reply is stripped and read by the prompt's rule (:func:`gemba_parse`,
the same semantics as upstream's ``validate_number`` / ``validate_stars`` / ``parse_classes``, checked against
upstream's own functions in the tests). As ``GptApi.request_api``:

- a reply whose content is ``null`` is no answer (NaN), and nothing more is asked;
- a reply that did not end with finish_reason "stop" (cut off by the server, "content_filter", ...; no max_tokens
  sent) is no answer either (its finish reason is kept in the cache, so a cached reply is read as a fresh one);
- a call the server refuses with the error code "content_filter" or "invalid_model_output" is no answer, and
  nothing more is asked (:func:`gemba_handled`; cached as that refusal, so a rerun asks it no more — GEMBA's own
  cache keeps only non-empty answers and would ask it again);
- a call whose transport failed after the backend's retries is no answer for this run (GEMBA retries it forever;
  here it is not cached: a rerun asks it again);
- a reply without a valid answer: the same request at the next temperature, up to the limit (t > 10: no answer).

A ``max_tokens`` is sent only where the user sets one or the backend needs one (:attr:`Backend.accepts_no_max_tokens`
False: :data:`OLD_MAX_TOKENS`, the recorded scores' start); the protocol's identity then says so, and a reply whose
finish reason is not "stop" (cut off, content_filter, ...) is asked again with 200 more tokens, up to 500 (GEMBA's
older ``request_api``, 3dd2c49, which reads the finish reason alone: a reply that ended normally at exactly the limit
is complete), beyond which it is no answer — never a higher temperature.

Deliberate differences, recorded in :attr:`GembaProtocol.differences` and named in its identity: seed 0 sent;
top_p/n/penalties/stop are the servers' defaults and not sent; with a limit, the old path's rule for cut-off replies.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dhp import calls
from dhp.backends import get_backend
from dhp.backends.base import ChatRequest, reply_finish, reply_status
from dhp.backends.openai_server import reason_code
from dhp.datasets import declared_files
from dhp.errors import DHPError

__all__ = ["GembaProtocol", "gemba_protocol", "gemba_parse", "gemba_messages", "gemba_request", "gemba_score",
           "gemba_call_bounds", "gemba_finish", "gemba_handled", "GEMBA_REFUSAL_CODES", "GEMBA_PROTOCOLS",
           "OLD_MAX_TOKENS", "GEMBA_COMMIT", "RECORDED_DECODING"]

GEMBA_COMMIT = "a7a7eff8"
#: the protocol names: gemba:<GEMBA prompt name without "GEMBA-">
GEMBA_PROTOCOLS = ("DA", "DA_ref", "SQM", "SQM_ref", "stars", "stars_ref", "classes", "classes_ref")
#: GEMBA's older request_api (3dd2c49 .. d942a90, the decoding of the recorded scores): max_tokens 20 first, a reply
#: cut off at the limit asked again with 200 more, none above 500 (then no answer). Used here only with a limit.
OLD_MAX_TOKENS, OLD_MAX_TOKENS_STEP, OLD_MAX_TOKENS_CAP = 20, 200, 500
#: reply tokens a plan assumes per call where no max_tokens is sent (a number, some stars or a class name, as the
#: recorded scores' limit of 20 held for most replies)
GEMBA_REPLY_TOKENS = 20
#: the decoding that made GEMBA's recorded scores (its gpt_api.py at 3dd2c49 / d942a90), named on their rows
RECORDED_DECODING = (f"Completion API (the prompt as plain text), max_tokens {OLD_MAX_TOKENS} (+{OLD_MAX_TOKENS_STEP} "
                     f"up to {OLD_MAX_TOKENS_CAP} on a cut-off reply, then no answer), n=1 at t=0 and n=10 at each "
                     "raised temperature t=1..10 (sent as t/10; duplicate replies removed; the first valid one kept)")
PROMPT_FILE = "gemba/gemba/prompt.py"
API_FILE = "gemba/gemba/gpt_api.py"


@dataclass(frozen=True)
class GembaProtocol:
    """One GEMBA prompt as read from the data root (module docstring)."""

    name: str  # GEMBA's prompt name, e.g. "GEMBA-DA_ref"
    template: str
    use_ref: bool
    rule: str  # "number", "stars" or "classes"
    number_range: tuple[int, int]  # validate_number's (min, max)
    classes: tuple[str, ...]
    max_tokens: int | None  # GEMBA's own (None: it sends none)
    languages: tuple[tuple[str, str], ...]
    temperature_divisor: float
    temperature_start: int
    temperature_step: int
    temperature_limit: int
    identity: str
    differences: tuple[str, ...]
    #: the max_tokens this run sends first (None: none, as a7a7eff8) and who asked for it ("user" or "backend")
    limit: int | None = None
    limit_by: str = ""

    def language(self, code: str) -> str:
        names = dict(self.languages)
        if code not in names:
            raise DHPError(f"GEMBA names no language for the code {code!r}.", f"use one of {sorted(names)}.")
        return names[code]

    def with_limit(self, limit: int | None, by: str = "user") -> "GembaProtocol":
        """This protocol sending ``max_tokens`` ``limit`` first (None: none), its identity and differences saying so
        (``by``: "user" or "backend", who needs it)."""
        if limit is None:
            return replace(self, limit=None, limit_by="", identity=_identity(self, None, ""),
                           differences=_differences(self.max_tokens, None, "", self.differences[-2:]))
        if int(limit) < 1:
            raise DHPError(f"A GEMBA max_tokens must be 1 or more (got {limit}).", "pass a positive limit, or none.")
        return replace(self, limit=int(limit), limit_by=by, identity=_identity(self, int(limit), by),
                       differences=_differences(self.max_tokens, int(limit), by, self.differences[-2:]))


# ---------------------------------------------------------------------------------------------- reading upstream

def _tree(path: Path) -> ast.Module:
    if not path.is_file():
        raise DHPError(f"GEMBA's {path.name} is missing ({path}).",
                       f"python -m dhp data fetch gemba (MicrosoftTranslator/GEMBA @ {GEMBA_COMMIT}), or set "
                       "DHP_DATA_DIR.")
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _bad(path: Path, what: str) -> DHPError:
    return DHPError(f"{path}: cannot read {what} from GEMBA's code.", "use the unmodified upstream file.")


def _assigned(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _function(tree, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _defaults(fn: ast.FunctionDef) -> dict:
    args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
    return {a.arg: ast.literal_eval(d) for a, d in zip(args, fn.args.defaults)}


def _rule(lam: ast.Lambda, tree: ast.Module, path: Path) -> tuple[str, tuple[int, int], tuple[str, ...]]:
    body = lam.body
    if not (isinstance(body, ast.Call) and isinstance(body.func, ast.Name)):
        raise _bad(path, "a validate_answer rule")
    fn = body.func.id
    if fn == "validate_number":
        d = _function(tree, fn)
        if d is None:
            raise _bad(path, "validate_number")
        dflt = _defaults(d)
        return "number", (int(dflt["min"]), int(dflt["max"])), ()
    if fn == "validate_stars":
        return "stars", (1, 5), ()
    if fn == "parse_classes":
        dflt = {a.arg: ast.literal_eval(v) for a, v in
                zip(lam.args.args[len(lam.args.args) - len(lam.args.defaults):], lam.args.defaults)}
        return "classes", (0, len(dflt["classes"]) - 1), tuple(dflt["classes"])
    raise _bad(path, f"the answer rule {fn!r}")


def _api(path: Path) -> dict:
    tree = _tree(path)
    call_api, request, request_api = (_function(tree, n) for n in ("call_api", "request", "request_api"))
    if call_api is None or request is None or request_api is None:
        raise _bad(path, "GptApi.call_api / request / request_api")
    params = next((n.value for n in ast.walk(call_api) if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "parameters" for t in n.targets)), None)
    if not isinstance(params, ast.Dict):
        raise _bad(path, "call_api's parameters")
    out = {}
    for k, v in zip(params.keys, params.values):
        key = ast.literal_eval(k)
        if key == "temperature":
            if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div) and isinstance(v.right, ast.Constant)):
                raise _bad(path, "the temperature rule")
            out["divisor"] = float(v.right.value)
        elif isinstance(v, ast.Constant):
            out.setdefault("constants", {})[key] = v.value
    out["start"] = int(_defaults(request)["temperature"])
    step = [n for n in ast.walk(request) if isinstance(n, ast.keyword) and n.arg == "temperature"
            and isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Add)]
    limit = [n for n in ast.walk(request_api) if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name)
             and n.left.id == "temperature" and isinstance(n.ops[0], ast.Gt)]
    if len(step) != 1 or len(limit) != 1:
        raise _bad(path, "the retry rule (temperature + step, temperature limit)")
    out["step"] = int(ast.literal_eval(step[0].value.right))
    out["limit"] = int(ast.literal_eval(limit[0].comparators[0]))
    return out


def gemba_protocol(name: str, data_dir=None) -> GembaProtocol:
    """The protocol ``gemba:<name>`` (or ``<name>``: "DA_ref", or GEMBA's own "GEMBA-DA_ref"), read from the data
    root (module docstring)."""
    short = name.split(":", 1)[1] if name.startswith("gemba:") else name.removeprefix("GEMBA-")
    if short not in GEMBA_PROTOCOLS:
        raise DHPError(f"Unknown GEMBA protocol {name!r}.", f"use one of {['gemba:' + p for p in GEMBA_PROTOCOLS]}.")
    prompt_path = declared_files.path(PROMPT_FILE, data_dir)
    api_path = declared_files.path(API_FILE, data_dir)
    tree = _tree(prompt_path)
    prompts, languages = _assigned(tree, "prompts"), _assigned(tree, "language_codes")
    if not isinstance(prompts, ast.Dict) or languages is None:
        raise _bad(prompt_path, "prompts / language_codes")
    entries = {ast.literal_eval(k): v for k, v in zip(prompts.keys, prompts.values)}
    key = f"GEMBA-{short}"
    entry = entries.get(key)
    if not isinstance(entry, ast.Dict):
        raise _bad(prompt_path, f"the prompt {key}")
    fields = {ast.literal_eval(k): v for k, v in zip(entry.keys, entry.values)}
    if not isinstance(fields.get("validate_answer"), ast.Lambda):
        raise _bad(prompt_path, f"{key}'s validate_answer")
    rule, rng, classes = _rule(fields["validate_answer"], tree, prompt_path)
    template = ast.literal_eval(fields["prompt"])
    max_tokens = ast.literal_eval(fields["max_tokens"]) if "max_tokens" in fields else None
    api = _api(api_path)
    constants = api.get("constants", {})
    differences = _differences(max_tokens, None, "", (
        "seed 0 sent (every request of this project carries one; GEMBA sends none)",
        "top_p/n/penalties/stop not sent: " + ", ".join(f"{k}={v}" for k, v in sorted(constants.items()))
        + " (the servers' defaults)"))
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()[:12]
    proto = GembaProtocol(
        key, template, bool(ast.literal_eval(fields["use_ref"])), rule, rng, classes, max_tokens,
        tuple(sorted(ast.literal_eval(languages).items())), api["divisor"], api["start"], api["step"], api["limit"],
        f"gemba/{key}@{GEMBA_COMMIT} sha256:{digest}", differences)
    return replace(proto, identity=_identity(proto, None, ""))


def _identity(p: GembaProtocol, limit: int | None, by: str) -> str:
    """What a run with ``p`` follows, in one line: prompt (with its hash), decoding, retry rule, reference variant."""
    base = p.identity.split(" ")
    sent = ("no max_tokens" if limit is None else
            f"max_tokens {limit} (set by the {by}; +{OLD_MAX_TOKENS_STEP} up to {OLD_MAX_TOKENS_CAP} on a cut-off "
            "reply: GEMBA 3dd2c49's rule)")
    return (f"{base[0]} {base[1]} user message, {sent}, temperature t/{p.temperature_divisor:g} "
            f"(t={p.temperature_start}..{p.temperature_limit} step {p.temperature_step} until a valid answer; null "
            f"content or a refusal: no answer), rule {p.rule}, reference {'refA' if p.use_ref else 'none (src)'}")


def _differences(own: int | None, limit: int | None, by: str, rest) -> tuple[str, ...]:
    first = ([] if limit is None else
             [f"max_tokens {limit} sent (set by the {by}; gemba_da.py sends none): a cut-off reply is asked again "
              f"with {OLD_MAX_TOKENS_STEP} more tokens up to {OLD_MAX_TOKENS_CAP} (GEMBA 3dd2c49's rule), the limit "
              "kept at raised temperatures"])
    return tuple(first) + tuple(rest)


# ---------------------------------------------------------------------------------------------- parsing

def _one_number(text: str, top: int | None) -> int | None:
    """GEMBA's numerical reading: the only run of digits; else a bracketed quoted number; else "<n>/<top>"."""
    digits = re.findall(r"\d+", text)
    if len(digits) == 1:
        return int(digits[0])
    if re.fullmatch(r"\[['\"][0-9]*['\"]\]", text):
        return int(text[2:-2]) if text[2:-2] else None
    if top is not None and re.fullmatch(rf"[0-9]*/{top}", text):
        head = text.split("/")[0]
        return int(head) if head else None
    return None


_WORDS = ("one", "two", "three", "four", "five")


def _stars(text: str) -> int | None:
    low = text.lower()
    found = {low.count(c) for c in ("*", "★") if c in low}
    padded = f" {low} ".replace("\n", " ")
    found |= {k for k, w in enumerate(_WORDS, start=1) if f" {w} " in padded or f"{k} star" in padded}
    n = _one_number(padded, None)
    if n is not None:
        found.add(n)
    if len(found) == 1:
        (only,) = found
        return only if 1 <= only <= 5 else None
    return None


def _classes(text: str, classes: tuple[str, ...]) -> int | None:
    hits = [i for i, c in enumerate(classes) if c.lower() in text.lower()]
    return hits[0] if len(hits) == 1 else None


def gemba_parse(protocol: GembaProtocol, reply: str | None) -> int | None:
    """The prompt's answer rule on a stripped reply: the score, or None (no valid answer)."""
    if reply is None:
        return None
    text = reply.strip()
    if protocol.rule == "number":
        lo, hi = protocol.number_range
        n = _one_number(text, hi)
        return n if n is not None and lo <= n <= hi else None
    if protocol.rule == "stars":
        return _stars(text)
    return _classes(text, protocol.classes)


# ---------------------------------------------------------------------------------------------- requests

def gemba_messages(protocol: GembaProtocol, source: str, target: str, reference: str | None = None,
                   src_lang: str = "zh", tgt_lang: str = "en") -> list[dict[str, str]]:
    """The one user message of a call (gemba_da.py's ``data`` and ``prompt.format``)."""
    if protocol.use_ref and reference is None:
        raise DHPError(f"{protocol.name} compares with the human reference, and none was given.",
                       "pass the reference translation, or use the protocol without _ref.")
    data = {"source_seg": source, "target_seg": target, "reference_seg": reference,
            "source_lang": protocol.language(src_lang), "target_lang": protocol.language(tgt_lang)}
    return [{"role": "user", "content": protocol.template.format(**data)}]


def gemba_request(protocol: GembaProtocol, messages, attempt: int, max_tokens: int | None = None) -> ChatRequest:
    """The request of attempt ``attempt`` (temperature attempt / divisor), with ``max_tokens`` (None: none sent, as
    a7a7eff8); no seed beyond the project's fixed 0."""
    return ChatRequest.make(messages, max_tokens, attempt / protocol.temperature_divisor)


def _limits(limit: int | None) -> list[int | None]:
    """The max_tokens tried at one temperature, in turn, while the reply is cut off (GEMBA 3dd2c49's rule)."""
    if limit is None:
        return [None]
    out = [limit]
    while out[-1] + OLD_MAX_TOKENS_STEP <= OLD_MAX_TOKENS_CAP:
        out.append(out[-1] + OLD_MAX_TOKENS_STEP)
    return out


def gemba_call_bounds(protocol: GembaProtocol) -> tuple[int, int]:
    """Calls one output costs at least and at most under ``protocol``'s retry rule: one at t=0; at most one per
    temperature t=start..limit, each asked up to len(limits) times where the replies are cut off."""
    temps = len(range(protocol.temperature_start, protocol.temperature_limit + 1, protocol.temperature_step))
    return 1, temps * len(_limits(protocol.limit))


def gemba_finish(reply, limit: int | None) -> str:
    """How a reply ended, as GEMBA's GptApi.request_api reads it: the server's finish_reason (fresh, or as the cache
    kept it: dhp.backends.base.reply_finish); a backend that reports none (the embedded one) "length" where the reply
    filled the ``limit`` sent, else "stop"."""
    finish = reply_finish(reply)
    if finish is not None:
        return finish
    filled = limit is not None and (getattr(reply, "completion_tokens", 0) or 0) >= limit
    return "length" if filled else "stop"


def _resolve_limit(proto: GembaProtocol, judge, max_tokens: int | None) -> GembaProtocol:
    """The protocol with the limit this run sends: the user's, else none where the backend takes none, else
    GEMBA's old start (:data:`OLD_MAX_TOKENS`)."""
    if max_tokens is not None:
        return proto.with_limit(max_tokens, "user")
    if proto.limit is not None:
        return proto
    needs = not getattr(judge, "accepts_no_max_tokens", False)
    return proto.with_limit(OLD_MAX_TOKENS, "backend") if needs else proto.with_limit(None)


#: the server error codes GptApi.request_api answers with no answer instead of retrying: ``e.code ==
#: "content_filter"`` (a filtered prompt: Azure OpenAI's HTTP 400) and ``e.error["code"] == "invalid_model_output"``
GEMBA_REFUSAL_CODES = ("content_filter", "invalid_model_output")


def gemba_handled(reason: str) -> bool:
    """A failed call GEMBA's protocol answers itself (no answer, nothing more asked): the server's structured error
    code is one of :data:`GEMBA_REFUSAL_CODES` (read from the recorded reason, never from loose wording). Such a
    refusal is cached as the answer it is, so a rerun asks it no more; any other failure stays a failure."""
    return reason_code(reason) in GEMBA_REFUSAL_CODES


def gemba_score(rows: pd.DataFrame, judge, protocol: GembaProtocol | str, cache=None, data_dir=None,
                progress: bool | str = False, max_tokens: int | None = None,
                max_consecutive_failures: int = calls.MAX_CONSECUTIVE_FAILURES) -> pd.DataFrame:
    """Score ``rows`` (source, target, and reference for a _ref protocol; src_lang, tgt_lang default zh, en) with
    GEMBA's protocol: ``rows`` with score (NaN when no attempt gave a valid answer), attempt (the temperature
    step that answered), failure (why NaN) and protocol (:attr:`GembaProtocol.identity`, with the limit sent:
    ``max_tokens`` the user's, see the module docstring). Attempts run in rounds: every row still unanswered asks
    again at the next temperature (or, cut off at a limit, with a higher limit)."""
    proto = gemba_protocol(protocol, data_dir) if isinstance(protocol, str) else protocol
    judge = get_backend(judge)  # once: whether it takes a request without max_tokens decides the limit
    proto = _resolve_limit(proto, judge, max_tokens)
    msgs = [gemba_messages(proto, r.source, r.target, getattr(r, "reference", None),
                           getattr(r, "src_lang", "zh"), getattr(r, "tgt_lang", "en"))
            for r in rows.itertuples()]
    limits = _limits(proto.limit)
    score = np.full(len(rows), np.nan)
    attempt = np.full(len(rows), -1)
    why = ["" for _ in range(len(rows))]
    todo = [(i, 0) for i in range(len(rows))]  # (row, index into limits)
    t = proto.temperature_start
    while todo and t <= proto.temperature_limit:
        temp = t / proto.temperature_divisor
        climb = []  # rows without a valid answer at this temperature: asked at the next one
        while todo:  # one temperature: rounds of the rows still to ask, each at its limit
            out = calls.chat(judge, [gemba_request(proto, msgs[i], t, limits[k]) for i, k in todo], cache,
                             progress=progress, desc=f"gemba t={t}",
                             max_consecutive_failures=max_consecutive_failures, handled=gemba_handled)
            again = []
            for (i, k), o in zip(todo, out):
                text = getattr(o, "text", None)
                status = reply_status(o)
                finish = gemba_finish(o, limits[k])
                # GptApi.request_api reads the finish reason alone: any other than "stop" (cut off, content_filter,
                # ...) is no complete answer — none at a7a7eff8 (no limit), asked again with a higher limit at 3dd2c49
                ended = "cut off" if finish == "length" else f"ended with finish_reason {finish!r}"
                if text is None and getattr(o, "refused", False):  # GptApi.request_api: no answer, none asked
                    why[i] = f"no answer: the server refused the request ({str(o.reason)[:160]})"
                elif text is None:  # a failed call: no answer either, and not cached (a rerun asks it again)
                    why[i] = f"call failed: {getattr(o, 'reason', 'no reply')}"
                elif status == "null":  # GptApi.request_api: a null content is no answer, nothing more is asked
                    why[i] = f"no answer: the reply had no content (null) at temperature {temp:g}"
                elif finish != "stop" and limits[k] is None:  # a7a7eff8: not finished, no max_tokens -> no answer
                    why[i] = f"no answer: the reply {ended} at temperature {temp:g}"
                elif finish != "stop" and k + 1 < len(limits):
                    again.append((i, k + 1))
                elif finish != "stop":
                    why[i] = (f"no answer: the reply {ended} at max_tokens {limits[k]}, the most GEMBA asks, at "
                              f"temperature {temp:g}")
                else:
                    value = gemba_parse(proto, text)
                    if value is None:
                        why[i] = f"no valid answer up to temperature {temp:g}"
                        climb.append((i, 0))
                    else:
                        score[i], attempt[i], why[i] = value, t, ""
            todo = again
        todo, t = climb, t + proto.temperature_step
    return rows.assign(score=score, attempt=attempt, failure=why, protocol=proto.identity)
