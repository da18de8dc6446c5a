"""LLM-based perturbations (the paper's GPT-4-Turbo path): an Auto-CoT style prompt per method and
severity, output validation, bounded retries with varied seeds, and failures recorded, never kept.

Prompts live in dhp/prompts/perturb/<perturbation>_<severity>.txt with the slots {unit}, {unit_title},
{context} and {text} (dhp.prompts.fill).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from dhp import calls, prompts
from dhp.backends import ChatRequest
from dhp.cache import Cache, open_cache
from dhp.errors import DHPError
from dhp.perturb.catalog import get


# How the text is called in the prompt, per task: (unit, context with its article).
PROMPT_UNITS = {
    "summarization": ("summary", "an article"),
    "story_completion": ("story ending", "a short story"),
    "question_answering": ("answer", "a question"),
    "translation": ("translation", "a source text"),
}

_META = re.compile(
    r"^\s*(here is|here's|here are|sure\b|certainly|okay\b|ok\b|of course|i have|i've|i replaced|"
    r"i changed|i introduced|as an ai|the revised|note:|explanation)",
    re.IGNORECASE,
)
_ECHO = re.compile(r"adjustment( steps)?\s*:|revised (summary|story ending|answer|translation)\s*:"
                   r"|^\s*\d\.\s+(find|pick|read|choose)", re.IGNORECASE | re.MULTILINE)


def prompt_template(perturbation: str, severity: str) -> str:
    """The registered inline template of this severity, else dhp/prompts/perturb/<name>_<severity>.txt."""
    inline = get(perturbation).llm
    if isinstance(inline, dict) and severity in inline:
        return inline[severity]
    path = prompts.PROMPT_DIR / "perturb" / f"{perturbation}_{severity}.txt"
    if not path.exists():
        raise DHPError(
            f"No LLM prompt for perturbation {perturbation!r} at severity {severity!r} ({path}).",
            "use perturber='rule' for this method, or add the prompt file.",
        )
    return prompts.load("perturb", f"{perturbation}_{severity}")


def build_prompt(perturbation: str, severity: str, task: str, text: str) -> str:
    unit, context = PROMPT_UNITS[task]
    return prompts.fill(prompt_template(perturbation, severity),
                {"unit_title": unit[:1].upper() + unit[1:], "unit": unit, "context": context, "text": text.strip()})


def clean_output(raw: str, task: str) -> str:
    """Strip what is formatting, not content: code fences, a repeated 'Revised X:' label and
    quotes wrapping the whole answer. Anything else stays for the validators to judge."""
    s = (raw or "").strip()
    s = re.sub(r"^```\w*\s*|\s*```$", "", s).strip()
    unit = PROMPT_UNITS[task][0]
    s = re.sub(rf"^(revised\s+)?{re.escape(unit)}\s*:\s*", "", s, flags=re.IGNORECASE).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1].strip()
    return s


def _norm(s: str) -> str:
    return " ".join(s.split())


def _word_seq(s: str) -> list[str]:
    return re.findall(r"\w+", s.lower())


def validate(perturbation: str, original: str, output: str) -> str | None:
    """Why `output` is not an acceptable perturbation of `original`, or None when it is."""
    if not output.strip():
        return "empty output"
    if _norm(output) == _norm(original):
        return "output identical to the input"
    # An edit keeps the length roughly; a rewrite-insert adds sentences (Perturbation.llm_length).
    lo, hi = get(perturbation).llm_length
    ratio = len(output) / max(1, len(original))
    if not lo <= ratio <= hi:
        return f"length ratio {ratio:.2f} outside [{lo}, {hi}]"
    if _META.search(output):
        return "meta text instead of the revised text"
    if _ECHO.search(output):
        return "prompt echoed in the output"
    a, b = _word_seq(original), _word_seq(output)
    if a == b:
        return "no word changed (only punctuation/spacing/case)"
    if perturbation == "fictional_entities":
        # At least one word of the original must have been replaced by a new one.
        if not (set(b) - set(a)) or not (set(a) - set(b)):
            return "no entity replaced (no original word swapped for a new one)"
    check = get(perturbation).llm_check
    if check is not None and (why := check(original, output)):
        return why
    if perturbation == "rewrite_insert":
        kept = sum(bl.size for bl in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
        if kept < 0.9 * len(a):
            return "original sentences not kept"
    return None


@dataclass
class LLMResult:
    status: str  # "ok" or "failed"
    text: str | None
    edits: str
    reason: str


@dataclass
class LLMJob:
    """One LLM-perturbed row to make: the method, the task, the reference text and the row's seed."""

    perturbation: str
    severity: str
    task: str
    text: str
    seed: int


def _request(job: LLMJob, attempt: int):
    prompt = build_prompt(job.perturbation, job.severity, job.task, job.text)
    max_tokens = int(len(job.text) / 3 * (2.5 if job.perturbation == "rewrite_insert" else 1.5)) + 64
    # Attempt 1 is greedy; later attempts sample with another seed so a retry can differ.
    return ChatRequest.make([{"role": "user", "content": prompt}], max_tokens, 0.0 if attempt == 0 else 0.7,
                            (job.seed + attempt) % (2**31))


def llm_perturb_many(backend, jobs: list[LLMJob], cache=None, max_attempts: int = 3, dry_run: bool = False,
                     progress: bool | str = False):
    """Make every LLM row through the shared call engine (:mod:`dhp.calls`), in rounds.

    Round 1 asks attempt 1 (temperature 0) of every job in one :func:`dhp.calls.run` — concurrent on
    OpenAI-compatible servers, each answer committed to the SQLite ``cache`` as it arrives, so a run
    killed with SIGKILL repeats only the calls in flight. Jobs whose output fails validation get attempt
    2 (temperature 0.7, seed + 1) in round 2, and so on up to ``max_attempts``. Per-call failures count
    as failed attempts with their reason; configuration errors (bad key, unknown model, unreachable
    server) and the circuit breaker raise DHPError. Returns one :class:`LLMResult` per job; with
    ``dry_run=True`` makes no call and returns the :class:`dhp.calls.Estimate` of round 1 (retries depend
    on the outputs, so they cannot be counted in advance).
    """
    results: list[LLMResult | None] = [None] * len(jobs)
    reasons: list[list[str]] = [[] for _ in jobs]
    store = open_cache(cache)
    try:
        for attempt in range(max_attempts):
            todo = [i for i, r in enumerate(results) if r is None]
            if not todo:
                break
            planned = {i: calls.plan_chat(backend, _request(jobs[i], attempt)) for i in todo}
            if dry_run:
                return calls.estimate(backend, list(planned.values()), store)
            report = calls.run(backend, list(planned.values()), store, progress=progress,
                               desc=f"perturb (attempt {attempt + 1})")
            for i, call in planned.items():
                got = store.get(call.keys[0])
                if got is None:
                    reasons[i].append(f"attempt {attempt + 1}: backend error: "
                                      f"{report.errors.get(call.keys[0], 'no result')}"[:200])
                    continue
                cleaned = clean_output(got.text or "", jobs[i].task)
                why = validate(jobs[i].perturbation, jobs[i].text, cleaned)
                if why is None:
                    results[i] = LLMResult("ok", cleaned, f"llm rewrite, attempt {attempt + 1}", "")
                else:
                    reasons[i].append(f"attempt {attempt + 1}: {why}")
    finally:
        if not isinstance(cache, Cache):
            store.close()
    tries = f"{max_attempts} attempt{'s' if max_attempts != 1 else ''}"
    return [r or LLMResult("failed", None, "", f"no valid output in {tries}: " + "; ".join(reasons[i]))
            for i, r in enumerate(results)]


def llm_perturb(backend, perturbation: str, severity: str, task: str, text: str, seed: int,
                max_attempts: int = 3, cache=None) -> LLMResult:
    """One LLM-perturbed row (see :func:`llm_perturb_many`)."""
    return llm_perturb_many(backend, [LLMJob(perturbation, severity, task, text, seed)], cache, max_attempts)[0]
