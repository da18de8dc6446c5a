"""LLM-based perturbations (the paper's GPT-4-Turbo path): an Auto-CoT style prompt per method and
severity, output validation, bounded retries with varied seeds, and failures recorded, never kept.

Prompts live in dhp/prompts/perturb/<perturbation>_<severity>.txt with the placeholders
{{UNIT}}, {{UNIT_TITLE}}, {{CONTEXT}} and {{TEXT}}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dhp.errors import DHPError

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts" / "perturb"

# How the text is called in the prompt, per task: (unit, context with its article).
PROMPT_UNITS = {
    "summarization": ("summary", "an article"),
    "story_completion": ("story ending", "a short story"),
    "question_answering": ("answer", "a question"),
    "translation": ("translation", "a source text"),
}

# Output length relative to the input (characters): an edit keeps the length roughly; a
# rewrite-insert adds at least a short sentence and at most doubles the text once per sentence.
LENGTH_BOUNDS = {
    "fictional_entities": (0.6, 1.6),
    "grammatical_errors": (0.6, 1.4),
    "rewrite_insert": (1.05, 3.0),
}
_META = re.compile(
    r"^\s*(here is|here's|here are|sure\b|certainly|okay\b|ok\b|of course|i have|i've|i replaced|"
    r"i changed|i introduced|as an ai|the revised|note:|explanation)",
    re.IGNORECASE,
)
_ECHO = re.compile(r"adjustment( steps)?\s*:|\{\{|revised (summary|story ending|answer|translation)\s*:"
                   r"|^\s*\d\.\s+(find|pick|read|choose)", re.IGNORECASE | re.MULTILINE)


@lru_cache(maxsize=None)
def prompt_template(perturbation: str, severity: str) -> str:
    path = PROMPT_DIR / f"{perturbation}_{severity}.txt"
    if not path.exists():
        raise DHPError(
            f"No LLM prompt for perturbation {perturbation!r} at severity {severity!r} ({path}).",
            "use perturber='rule' for this method, or add the prompt file.",
        )
    return path.read_text(encoding="utf-8")


def build_prompt(perturbation: str, severity: str, task: str, text: str) -> str:
    unit, context = PROMPT_UNITS[task]
    return (
        prompt_template(perturbation, severity)
        .replace("{{UNIT_TITLE}}", unit[:1].upper() + unit[1:])
        .replace("{{UNIT}}", unit)
        .replace("{{CONTEXT}}", context)
        .replace("{{TEXT}}", text.strip())
    )


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
    lo, hi = LENGTH_BOUNDS[perturbation]
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
    if perturbation == "rewrite_insert":
        import difflib

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


def llm_perturb(backend, perturbation: str, severity: str, task: str, text: str, seed: int,
                max_attempts: int = 3) -> LLMResult:
    """Ask the backend for the perturbation; validate; retry with other seeds; else 'failed'.

    Attempt 1 is greedy (temperature 0); later attempts sample (temperature 0.7) with seed+attempt
    so a retry can produce something different. Backend DHPErrors (server unreachable, bad key,
    unknown model) propagate: they concern the whole run, not this row.
    """
    prompt = build_prompt(perturbation, severity, task, text)
    max_tokens = int(len(text) / 3 * (2.5 if perturbation == "rewrite_insert" else 1.5)) + 64
    reasons = []
    for attempt in range(max_attempts):
        try:
            out = backend.chat(
                [{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                temperature=0.0 if attempt == 0 else 0.7,
                seed=(seed + attempt) % (2**31),
            )
        except DHPError as e:
            # dhp.backends wraps a per-call failure (after its own retries) as a DHPError with the
            # cause attached: that is one failed attempt. Without a cause it is a configuration
            # error (unreachable server, bad key, unknown model) that concerns the whole run.
            if e.__cause__ is None or isinstance(e.__cause__, DHPError):
                raise
            reasons.append(f"attempt {attempt + 1}: backend error: {e.problem}"[:200])
            continue
        except Exception as e:  # a transient per-request error counts as a failed attempt
            reasons.append(f"attempt {attempt + 1}: backend error {type(e).__name__}: {e}"[:200])
            continue
        cleaned = clean_output(getattr(out, "text", "") or "", task)
        why = validate(perturbation, text, cleaned)
        if why is None:
            return LLMResult("ok", cleaned, f"llm rewrite, attempt {attempt + 1}", "")
        reasons.append(f"attempt {attempt + 1}: {why}")
    return LLMResult("failed", None, "", f"no valid output in {max_attempts} attempts: " + "; ".join(reasons))
