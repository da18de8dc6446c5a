"""One declaration of every run parameter: its default, type, range and help text.

Each meta-evaluation method (dhp.methods) has a parameter model that extends :class:`RunParams` (the parameters
every method shares: judge, mode, seed, run folder, cache, ...) with its own fields. Everything else derives
from these models, so a default can be declared only once and cannot drift:

- the command line (``python -m dhp run --method NAME``): :func:`add_arguments` / :func:`from_arguments`;
- the notebooks' ``parameters`` cells (papermill needs literal cells, so they are written out by hand and a test
  checks that every value equals the model's default: :func:`notebook_defaults`);
- the grid's YAML (``dhp.grid``): ``params`` and ``method_params`` are validated against these models;
- the manifest (``manifest.json`` records ``config.model_dump()``).

Validation errors are :class:`~dhp.errors.DHPError` with the field, the value and the fix; a list parameter that
arrives as a string (``papermill -p strategies '["a"]'``) is refused with the hint to use ``-y``.
"""

from __future__ import annotations

import argparse
import os
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dhp.errors import DHPError
from dhp.extensions import expand_help

__all__ = ["Params", "RunParams", "EngineParams", "ENGINES", "MODES", "EMPTY_KEPT", "validate", "add_arguments", "from_arguments",
           "notebook_defaults", "describe"]

#: ``Field(json_schema_extra=EMPTY_KEPT)``: an optional text parameter whose '' is a value of its own, said in its
#: help (e.g. the leaderboard's views_cache, '': compute every view); elsewhere '' on the command line means None.
EMPTY_KEPT = {"empty_kept": True}

#: How a judge's reply becomes a score (dhp.judging.pointwise): sampled ratings, the expected rating over the
#: score tokens' probabilities, or the mean token log-likelihood of the text (no rating asked for).
MODES = ("logprobs", "sample", "likelihood", "metric")
Mode = Literal["logprobs", "sample", "likelihood", "metric"]


def _is_list(annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin is list:
        return True
    return origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and any(
        _is_list(a) for a in typing.get_args(annotation))


def _accepts(annotation, kind) -> bool:
    """Whether ``annotation`` (possibly Optional/Union) includes the type ``kind``."""
    if annotation is kind:
        return True
    return any(_accepts(a, kind) for a in typing.get_args(annotation))


class Params(BaseModel):
    """Base of every parameter model: unknown names and wrong types are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @field_validator("*", mode="before")
    @classmethod
    def _list_not_string(cls, value, info):
        # papermill -p passes every value as a string: '["a", "b"]' would become a list of characters.
        field = cls.model_fields.get(info.field_name)
        if field is not None and isinstance(value, bool) and _accepts(field.annotation, int) \
                and not _accepts(field.annotation, bool):
            raise ValueError("a number is needed, not true/false")  # bool is an int to Python: refuse it here
        if field is not None and isinstance(value, str) and _is_list(field.annotation):
            raise ValueError(f"{info.field_name} must be a list, got the string {value!r}; with papermill pass "
                             f"lists with -y (e.g. -y '{info.field_name}: [a, b]'), not -p")
        return value


class RunParams(Params):
    """Parameters every method shares (one run folder per run; one judge call cache per run folder)."""

    judge: str = Field("embedded", description="judge spec: {registered:judge backend} (the registered backend "
                                                "families; tables record the judge id it resolves to) | "
                                                "recorded (call no model: analyze judgments imported into the "
                                                "run folder with python -m dhp import-judgments)")
    mode: Mode = Field("logprobs", description="how a reply becomes a score: logprobs | sample | likelihood | "
                                                "metric (a baseline judge scores the text itself)")
    seed: int = Field(0, ge=0, description="seed for item selection, perturbation, sampling and resampling")
    run_dir: str = Field("runs/default", description="the run folder: every table of the run is written here")
    cache_path: str | None = Field(None, description="judge call cache (None: <run_dir>/cache.sqlite)")
    data_dir: str | None = Field(None, description="dataset root (None: DHP_DATA_DIR, else the default data root: docs/data.md)")
    figures_dir: str | None = Field(None, description="where figures go (None: <run_dir>/figures)")
    n_ctx: int | None = Field(None, ge=64, description="judge context in tokens for source truncation "
                                                       "(None: what the backend reports)")
    allow_insecure_key: bool = Field(False, description="allow sending OPENAI_API_KEY over plain http to a "
                                                        "non-loopback server")
    max_consecutive_failures: int = Field(20, ge=1, description="stop after this many failed calls in a row "
                                                                "(answered calls stay cached)")
    progress: bool | str = Field(False, description="show a progress bar of the model calls (a path: write the "
                                                    "calls' progress to that JSON file instead, for a watcher in "
                                                    "another process such as the grid)")

    @property
    def cache(self) -> str:
        """The call cache path this run uses."""
        return self.cache_path or os.path.join(self.run_dir, "cache.sqlite")

    @property
    def figures(self) -> str:
        """The folder figures are written to."""
        return self.figures_dir or os.path.join(self.run_dir, "figures")


#: What answers a run's pending model calls: "live" (the judge's own client, one request at a time per slot) or
#: "ray" (Ray Data's LLM batch inference on a Ray cluster, dhp.backends.ray_engine; the ``ray`` extra).
ENGINES = ("live", "ray")


class EngineParams(Params):
    """The call engine of ``dhp evaluate``, ``dhp run``, ``dhp batch`` and the grid (``engine: ray`` in its YAML).
    Not a method parameter: the engine changes how calls are made, never their answers' cache keys."""

    engine: Literal["live", "ray"] = Field("live", description="live: the judge's own client; ray: every pending "
                                                               "chat call of each stage through Ray Data's LLM batch "
                                                               "inference (pip install -e '.[ray]'; docs/cluster.md)")
    ray_address: str | None = Field(None, description="the Ray cluster to use (None: RAY_ADDRESS, else a local Ray "
                                                       "starts on this machine)")
    ray_replicas: int = Field(2, ge=1, description="Ray: request actors (served endpoint) or vLLM engine replicas")
    ray_batch_size: int = Field(16, ge=1, description="Ray: rows per block (each block's answers are committed to "
                                                      "the cache as it finishes)")
    ray_qps: int | None = Field(None, ge=1, description="Ray: requests per second per actor (None: no limit)")
    ray_cpus: float = Field(0.5, gt=0, description="Ray: CPUs each request actor reserves on its node")
    ray_tensor_parallel: int = Field(1, ge=1, description="Ray, ray-vllm judges: GPUs per vLLM replica (tensor "
                                                          "parallel size)")


def _message(model: type[BaseModel], err: ValidationError, source: str) -> DHPError:
    first = err.errors()[0]
    name = ".".join(str(x) for x in first.get("loc", ())) or "(parameters)"
    field = model.model_fields.get(str(first.get("loc", ("",))[0]))
    if first.get("type") == "extra_forbidden":
        return DHPError(f"{source}: unknown parameter {name!r}.",
                        f"use only {sorted(model.model_fields)} (see dhp.config.describe).")
    got = first.get("input")
    hint = f" ({expand_help(field.description)})" if field is not None and field.description else ""
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return DHPError(f"{source}: {name} = {got!r} is invalid: {msg}.", f"give {name} a valid value{hint}.")


def validate(model: type[Params], values: dict[str, Any] | None = None, source: str = "parameters", **more) -> Params:
    """``model`` built from ``values`` (and keyword arguments), or a DHPError naming the first bad parameter."""
    odd = [k for k in (values or {}) if not isinstance(k, str)]
    if odd:  # a YAML key that is no name (`?`, `1:`, `null:`): not a keyword Python can pass
        raise DHPError(f"{source}: {odd[0]!r} is not a parameter name.",
                       f"write each key as a parameter's name (one of {sorted(model.model_fields)}).")
    try:
        return model(**{**(values or {}), **more})
    except ValidationError as e:
        raise _message(model, e, source) from None


def notebook_defaults(model: type[Params]) -> dict[str, Any]:
    """Every parameter's default: what a notebook's ``parameters`` cell must say (tests check it)."""
    return {name: f.default for name, f in model.model_fields.items()}


def describe(model: type[Params]) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, help) per parameter, for documentation and --help."""
    return [(n, _type_name(f.annotation), f.default, expand_help(f.description or ""))
            for n, f in model.model_fields.items()]


def _type_name(annotation) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


# ---------------------------------------------------------------------------------------------- command line

def _scalar(annotation):
    """(base type, optional, is_list, choices) of a field annotation."""
    args = [a for a in typing.get_args(annotation)] if typing.get_origin(annotation) in (
        typing.Union, getattr(__import__("types"), "UnionType", None)) else [annotation]
    optional = type(None) in args
    args = [a for a in args if a is not type(None)]
    base = args[0] if args else str
    is_list = typing.get_origin(base) is list
    if is_list:
        base = (typing.get_args(base) or (str,))[0]
    choices = typing.get_args(base) if typing.get_origin(base) is Literal else None
    if choices:
        base = type(choices[0])
    return base, optional, is_list, choices


def add_arguments(parser: argparse.ArgumentParser, model: type[Params], skip: tuple[str, ...] = ()) -> None:
    """One ``--name`` option per parameter, with the model's help text; the defaults stay the model's (an option
    not given is not passed, so :func:`validate` fills it). Lists are comma-separated; booleans are flags."""
    for name, f in model.model_fields.items():
        if name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        base, optional, is_list, choices = _scalar(f.annotation)
        keep_empty = bool((f.json_schema_extra or {}).get("empty_kept")) if isinstance(f.json_schema_extra, dict) \
            else False
        help_text = f"{expand_help(f.description or '')} (default: {f.default!r})".replace("%", "%%")
        if base is bool and not is_list:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                                help=help_text)
        else:
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, help=help_text,
                                metavar="A,B" if is_list else (name.upper()),
                                type=_list_parser(base) if is_list else _none_or(base, keep_empty) if optional else base,
                                choices=None if is_list else choices)


def _none_or(base, keep_empty: bool = False):
    def parse(text: str):
        if text == "" and keep_empty:
            return ""
        return None if text.lower() in ("none", "null", "") else base(text)

    parse.__name__ = getattr(base, "__name__", "value")
    return parse


def _list_parser(base):
    def parse(text: str):
        return [base(x.strip()) for x in text.split(",") if x.strip()]

    parse.__name__ = "list"
    return parse


def from_arguments(model: type[Params], args: argparse.Namespace, source: str = "command line") -> Params:
    """The validated model from parsed arguments (options that were not given keep the model's default)."""
    given = {k: v for k, v in vars(args).items() if k in model.model_fields}
    return validate(model, given, source=source)
