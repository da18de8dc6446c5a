"""Your judge on the board in one command: ``python -m dhp evaluate JUDGE_SPEC [--profile quick|standard|paper]``.

Runs every registered method that the judge's mode supports and that lists the profile (``Method.profiles``; through
:func:`dhp.methods.run`) at sizes that put it on
the SAME units as the published judges of each leaderboard view, then the leaderboard (LLMBar's recorded verdicts,
and with human alignment the WMT22 zh-en metric scores, imported beside it) and the judge's report card — all into
its own run folder (default ``runs/evaluate/<judge>``), never the demo's results/ or figures/. Of the recorded segment
scores only those on the segments the judge scored are imported (and every unscored one): the rows its views compare
it on, so every view of the folder is on those segments; the manifest records the files' sha256 and how many rows were
kept (``python -m dhp leaderboard --recorded gemba,mtme`` on the folder imports every row).

Profiles (:data:`PROFILES`):

- ``quick``: minutes on a laptop CPU — a few LLMBar Adversarial pairs (Neighbor subset, both orders) that every
  recorded judge has verdicts on, with LLMBar's own Vanilla evaluator (``llmbar:Vanilla``, read from the data root);
- ``standard``: samples of every view's units (LLMBar Natural + Adversarial, WMT22 zh-en MQM segments, SummEval
  documents, DHP items) and the other methods at their defaults;
- ``paper``: the published sizes — every LLMBar Natural and Adversarial pair, every WMT22 zh-en MQM segment of the
  systems, the 100 SummEval documents, DHP at N = 100.

Before any call the plan is printed (per view: the units, the calls still to make, tokens, cost when the model's
price is in dhp/resources/judge_prices.yaml); the run starts only with ``--yes`` or a typed confirmation. Every call
goes through the run's cache, so a rerun makes no call and an interrupted run resumes.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dhp import methods, runlock
from dhp.backends import get_backend
from dhp.backends.base import run_options
from dhp.cache import open_cache
from dhp.calls import using_engine
from dhp.errors import DHPError
from dhp.io import read_csv, resolve, write_csv, write_text
from dhp.leaderboard import LeaderboardParams, run_leaderboard
from dhp.plots.report_card import save_report_card_pages
from dhp.recorded import IMPORTERS
from dhp.analysis.power import power_line
from dhp.lazy import lazy_module

ray_engine = lazy_module("dhp.backends.ray_engine")  # the optional extra: imported only when asked for

__all__ = ["PROFILES", "Step", "plan", "describe", "evaluate", "default_run_dir"]

PROFILES = ("quick", "standard", "paper")

# The parameters of each profile live on the methods (``Method.profiles``, ``Method.profile_params``): a method runs
# in a profile it lists; its ``evaluate_plan`` says which views and units it puts the judge on, and at what cost.

#: Leaderboard settings per profile (fewer draws for the quick look)
LEADERBOARD = {"quick": {"n_resamples": 200, "n_resamples_statistic": 100},
               "standard": {"n_resamples": 1000, "n_resamples_statistic": 200},
               "paper": {"n_resamples": 1000, "n_resamples_statistic": 1000}}


@dataclass
class Step:
    """One method's run in the plan: its parameters, the views and units it puts the judge on, what it costs."""

    method: str
    config: Any
    units: list[str] = field(default_factory=list)
    calls: int | None = None
    cached: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    note: str = ""
    unlimited_calls: int = 0  # calls sent without max_tokens: their completion tokens are assumed, not bounded


def power_line_of(method, config) -> str:
    """The plan's power line of a method at its run's n (dhp.analysis.power; "" when the method states none)."""
    if not method.power:
        return ""
    kind, field_name, units = method.power
    n = getattr(config, field_name, None)
    return "" if n is None else power_line(kind, int(n), units)


def default_run_dir(judge: str) -> str:
    """runs/evaluate/<judge spec as a folder name>."""
    return str(Path("runs") / "evaluate" / (re.sub(r"[^A-Za-z0-9._-]+", "_", judge).strip("_") or "judge"))


def plan(judge, profile: str = "quick", mode: str = "logprobs", run_dir: str | None = None,
         data_dir: str | None = None, seed: int = 0, backend=None, protocols=None) -> list[Step]:
    """The steps of an evaluation (no model call): each supported method with the profile's parameters (with
    ``protocols``: only the methods that run those judge protocols, with their parameters:
    Method.protocol_params), the units it puts the judge on
    and the calls still to make (from the run's cache)."""
    if profile not in PROFILES:
        raise DHPError(f"Unknown profile {profile!r}.", f"use one of {list(PROFILES)}.")
    run_dir = default_run_dir(str(judge)) if run_dir is None else run_dir
    runlock.check_run_dir(run_dir)  # never results/, figures/ or the repository root (resolved), never ''
    protocols = list(dict.fromkeys(protocols or ()))
    methods.check_protocol_names(protocols)  # any registered strategy or protocol, by its registered name
    steps, claimed = [], set()
    for m in methods.all_methods():
        if mode not in m.modes or m.refuses(str(judge), mode):  # (mode metric: controls only, on some methods)
            continue
        if protocols:  # only the methods that run those protocols, with the protocols' parameters
            values = m.protocol_params(profile, protocols, data_dir)
            claimed |= {p for p in protocols if values is not None and m.protocol_params(profile, [p], data_dir)}
        else:
            values = m.profile_params(profile, data_dir)
        if values is None:
            continue
        # a protocol may fix its mode (GEMBA reads a sampled reply's text: "sample")
        config = m.config({**values, "judge": str(getattr(backend, "identity", judge)), "mode": values.get("mode", mode),
                           "run_dir": run_dir, "data_dir": data_dir, "seed": seed})
        steps.append(_estimate(m, config, backend))
    if protocols and set(protocols) - claimed:
        raise methods.protocol_refusal(set(protocols) - claimed, profile, mode, data_dir=data_dir, judge=str(judge))
    if not steps:
        takes = "; ".join(f"in mode {x}: " + ", ".join(m.name for m in methods.all_methods() if x in m.modes)
                          for x in ("likelihood", "metric"))
        raise DHPError(f"No method of profile {profile!r} runs in mode {mode!r}.",
                       f"use --profile standard or paper ({takes}), or mode logprobs or sample.")
    return steps


def _estimate(m, config, backend) -> Step:
    """Units and calls of one step: the method's own plan (Method.evaluate_plan)."""
    step = Step(m.name, config)
    try:
        p = m.evaluate_plan(config, backend)
        step.units, step.note = list(p.units), p.note
        line = power_line_of(m, step.config)
        if line:
            step.units.append(line)
        for est in p.estimates:
            _add(step, est)
        if step.calls is None and p.calls is not None:
            step.calls = p.calls
    except DHPError as e:
        step.note = f"not estimated: {e}"
    return step


def _add(step: Step, est) -> None:
    """Add one estimate to the step's totals; the cost stays unknown (None) once one part's price is unknown."""
    first = step.calls is None
    step.calls = (step.calls or 0) + est.calls
    step.cached = (step.cached or 0) + est.cached_calls
    step.prompt_tokens = (step.prompt_tokens or 0) + est.prompt_tokens
    step.completion_tokens = (step.completion_tokens or 0) + est.completion_tokens
    step.unlimited_calls += int(getattr(est, "unlimited_calls", 0) or 0)
    if est.cost_usd is None:
        step.cost_usd = None
    elif first:
        step.cost_usd = est.cost_usd
    elif step.cost_usd is not None:
        step.cost_usd += est.cost_usd


def describe(steps: list[Step], judge: str, profile: str) -> str:
    """The plan as text: per method, its views' units and its calls, tokens and cost."""
    lines = [f"Plan: evaluate {judge} (profile {profile}) into {steps[0].config.run_dir}"]
    total = 0
    for s in steps:
        calls = "calls: not estimated (counted when run)" if s.calls is None else (
            f"calls: about {s.calls}" if s.prompt_tokens is None else
            f"calls: {s.calls} to make ({s.cached} cached), ~{s.prompt_tokens:,} prompt + "
            + (f"<= {s.completion_tokens:,} completion tokens, cost " if not s.unlimited_calls else
               f"~{s.completion_tokens:,} completion tokens assumed (no bound: {s.unlimited_calls} calls send no "
               "max_tokens), cost ")
            + ("unknown (no price in dhp/resources/judge_prices.yaml)" if s.cost_usd is None else
               f"${s.cost_usd:.4f}" + (" assumed, no upper bound" if s.unlimited_calls else "")))
        total += s.calls or 0
        lines.append(f"- {s.method}: {calls}")
        lines += [f"    view {u}" for u in s.units]
        if s.note:
            lines.append(f"    {s.note}")
    rate = _last_rate(steps[0].config.run_dir)
    eta = (f"about {total * rate / 60:.1f} min at the last run here: {rate:.2f} s per call, analysis included" if rate
            else "about calls x your server's seconds per call")
    lines.append(f"Total estimated calls to make: {total} (time: {eta})")
    return "\n".join(lines)


def _last_rate(run_dir) -> float | None:
    """Seconds per call measured by the last evaluation in ``run_dir`` (evaluate.json), None when unknown."""
    try:
        last = json.loads((resolve(run_dir) / "evaluate.json").read_text(encoding="utf-8"))
        calls, seconds = sum(last["calls_made"].values()), sum(last["seconds"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return seconds / calls if calls else None


def evaluate(judge: str, profile: str = "quick", mode: str = "logprobs", run_dir: str | None = None,
             data_dir: str | None = None, yes: bool = False, dry_run: bool = False, seed: int = 0,
             allow_insecure_key: bool = False, out=None, confirm=input, protocols=None,
             wait: bool = False, engine=None) -> dict[str, Any]:
    """Plan, confirm, run every step, then the leaderboard and the report card. Returns {"plan": steps,
    "calls_made": calls made this time, "paths": written files} (no "paths" on a dry run or a refusal). The run
    folder has one writer (dhp.runlock): another run in it is refused before any call, or waited for (``wait``).
    ``engine``: what answers the calls (dhp.config.EngineParams; None: the judge's own client)."""
    out = out or sys.stdout
    if run_dir is not None:
        runlock.check_run_dir(run_dir)  # a forbidden or empty folder: refused before the backend is even built
    backend = get_backend(judge, **run_options(judge, allow_insecure_key=allow_insecure_key))  # a bad spec, a missing or exposed key fails before anything
    backend.check_mode(mode)  # a mode it cannot serve (its supports_* flags): refused before any call
    run_dir = default_run_dir(backend.identity) if run_dir is None else run_dir
    # a dry run sends nothing, not even the model list or a tokenizer probe: the plan is made offline and says so
    offline = backend.plan_offline() if dry_run and hasattr(backend, "plan_offline") else None
    steps = plan(judge, profile, mode, run_dir, data_dir, seed, backend, protocols)
    print(describe(steps, backend.identity, profile), file=out)
    answerer = _engine(engine, out)
    if answerer is not None:
        print(answerer.describe(sum(s.calls or 0 for s in steps), backend), file=out)
    if dry_run:
        if offline:
            print(f"Dry run: {offline}.", file=out)
        return {"plan": steps, "calls_made": 0}
    if not yes:
        try:
            answer = confirm("Run it? [y/N] ")
        except EOFError:  # no terminal to ask on
            answer = ""
        if str(answer).strip().lower() not in ("y", "yes"):
            print("Nothing run (confirm with y, or pass --yes).", file=out)
            return {"plan": steps, "calls_made": 0}
    with runlock.hold(run_dir, wait=wait):
        return _run_steps(steps, backend, profile, mode, run_dir, data_dir, seed, out, protocols, answerer)


def _run_steps(steps, backend, profile, mode, run_dir, data_dir, seed, out, protocols, answerer=None) -> dict[str, Any]:
    """Run every step, then the leaderboard and the report card (the run folder held)."""
    paths: dict[str, Path] = {}
    made, seconds = {}, {}
    for s in steps:
        before, start = _calls_so_far(backend, s.config.cache, answerer), time.perf_counter()
        with using_engine(answerer) if answerer is not None else contextlib.nullcontext():
            paths.update(methods.run(s.method, s.config, backend=backend))
        made[s.method] = _calls_so_far(backend, s.config.cache, answerer) - before
        seconds[s.method] = round(time.perf_counter() - start, 1)
        print(f"{s.method}: done, {made[s.method]} calls made", file=out)
    # the recorded sources whose judges stand in the views of the methods run (each source says which it feeds), and
    # the source of each published protocol run (``<source>:<name>``: your judge beside the judges it recorded)
    ran = {s.method for s in steps}
    sources = {p.split(":", 1)[0] for p in protocols or ()}
    recorded = [k for k, imp in IMPORTERS.items() if imp.default and (ran & set(imp.feeds) or k in sources)]
    # min_coverage: the recorded judges are compared with yours on the units yours has (n in every row); so only
    # the recorded segment rows on the segments yours scored are imported (recorded_units, the manifest says so)
    lb = LeaderboardParams(run_dir=run_dir, recorded=recorded, data_dir=data_dir, min_coverage=1e-6, seed=seed,
                           recorded_units="judged", **LEADERBOARD[profile])
    paths.update(run_leaderboard(lb))
    modes = {s.config.mode for s in steps}  # a protocol's own mode (GEMBA: sample) where it fixes one
    card = methods.report_card(run_dir, judge=backend.identity, mode=modes.pop() if len(modes) == 1 else mode)
    paths["report_card.csv"] = write_csv(card, resolve(run_dir) / "report_card.csv")
    board = read_csv(paths["leaderboard.csv"])
    picks = {m.name: m.headline for m in methods.all_methods()}
    for p in save_report_card_pages(card, resolve(run_dir) / "figures", picks, board):
        paths[p.name] = p
    summary = {"judge": backend.identity, "profile": profile, "mode": mode, "calls_made": made, "seconds": seconds,
               "steps": {s.method: {"units": s.units, "note": s.note} for s in steps}}
    paths["evaluate.json"] = write_text(resolve(run_dir) / "evaluate.json", json.dumps(summary, indent=1))
    _print_board(run_dir, backend.identity, out)
    print(f"calls made: {sum(made.values())}; tables in {run_dir}", file=out)
    return {"plan": steps, "calls_made": sum(made.values()), "paths": paths}


def batch_runs(judge: str, profile: str = "quick", mode: str = "logprobs", run_dir: str | None = None,
               data_dir: str | None = None, seed: int = 0, protocols=None, allow_insecure_key: bool = False):
    """(one collect callable per method of the evaluation, the run's cache path): what ``dhp batch export|import
    evaluate`` writes and reads (dhp.batch), the run folder and configs being evaluate's own."""
    backend = get_backend(judge, **run_options(judge, allow_insecure_key=allow_insecure_key))
    backend.check_mode(mode)
    steps = plan(judge, profile, mode, run_dir or default_run_dir(backend.identity), data_dir, seed, backend, protocols)
    runs = [lambda s=s: methods.get(s.method).collect(s.config, backend) for s in steps]
    caches = {s.config.cache for s in steps}
    if len(caches) != 1:
        raise DHPError(f"The methods of this evaluation use {len(caches)} caches.", "use one run folder.")
    return runs, caches.pop()


def _engine(params, out):
    """The engine of ``params`` (dhp.config.EngineParams), None for the live one."""
    if params is None or params.engine == "live":
        return None
    return ray_engine.RayEngine(params, out=out)


def _calls_so_far(backend, cache_path, engine=None) -> int:
    """Model calls made so far: an HTTP backend counts its calls' tries (not its model list or tokenizer requests),
    plus the rows an engine answered for it;
    otherwise the answers in the run's cache (a call answered from the cache adds none)."""
    if hasattr(backend, "attempts"):
        return int(backend.attempts or 0) + int(getattr(engine, "rows_total", 0))
    with open_cache(cache_path) as store:
        return len(store)


def _print_board(run_dir: str, identity: str, out) -> None:
    """The leaderboard rows of the views the judge is in, beside every judge of those views."""
    board = read_csv(resolve(run_dir) / "leaderboard.csv")
    keys = ["view", "scope", "measure", "strategy"]
    mine = board[board["judge"] == identity][keys].drop_duplicates()
    shown = board.merge(mine, on=keys)
    if shown.empty:
        print("Your judge is in no leaderboard view (see leaderboard.csv for why).", file=out)
        return
    for k, g in shown.groupby(keys, sort=False):
        protocols = g["protocol"].fillna("").astype(str) if "protocol" in g else pd.Series("", index=g.index)
        own = protocols[g["judge"] == identity].iloc[0]
        print(f"\n{' / '.join(str(x) for x in k if str(x) not in ('', 'nan'))}  protocol: {own}", file=out)
        # a judge of the view run on another protocol (a recorded judge's own config) says how it differs
        g = g.assign(protocol=["same" if p == own else (p.split(" [", 1)[1].rstrip("]") if " [" in p else p)
                               for p in protocols])
        cols = ["judge", "mode", "value", "lo", "hi", "n", "cluster", "status"] + \
            (["protocol"] if (g["protocol"] != "same").any() else [])
        print(g[cols].to_string(index=False), file=out)
