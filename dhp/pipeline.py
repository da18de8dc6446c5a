"""The DHP chain in one call: ``run_pipeline(dataset, n_items, ...)`` = ``dhp.methods.run("dhp", ...)``, i.e. the
stages collect and analyze of the one stage runner (dhp.methods.run_stage) — a thin wrapper, no logic of its own.

Kept for scripts written against it; its parameters are the ``dhp`` method's (dhp.methods.discernment.DHPParams:
names, defaults and help declared there once). ``judge`` may also be a dhp.backends.Backend object (e.g. with
custom retries); ``dry_run=True`` returns the estimates ({"perturber", "judge"}) without any model call or table.
Returns {"dataset", "perturbed", "scores", "discernment", "summary", "failures", "judge_stats", "manifest"} ->
path of the file written.
"""

from __future__ import annotations

import sys

from dhp import methods
from dhp.backends import Backend
from dhp.cli import main as cli_main
from dhp.errors import DHPError

__all__ = ["run_pipeline", "main"]

_POSITIONAL = ("dataset", "n_items", "seed")


def run_pipeline(*args, judge=None, dry_run: bool = False, **params):
    """Run dataset -> perturb -> judge -> statistics into ``run_dir`` (see the module docstring)."""
    if len(args) > len(_POSITIONAL):
        raise DHPError(f"run_pipeline takes at most {len(_POSITIONAL)} positional arguments.",
                       "pass the others by name, e.g. judge='embedded'.")
    params.update(zip(_POSITIONAL, args))
    params = {k: (str(v) if k in ("dataset", "run_dir", "cache_path", "data_dir", "path", "expert_weights")
                  and v is not None else v) for k, v in params.items()}
    backend = judge if isinstance(judge, Backend) else None
    if judge is not None and backend is None:
        params["judge"] = judge
    m = methods.get("dhp")
    if backend is not None:
        params["judge"] = backend.identity
    config = m.config(params)
    if dry_run:
        est = m.estimate(config, backend)
        for stage, e in est.items():
            if e is not None:
                print(e.describe(stage))
        return est
    paths = methods.run("dhp", config, figures=False, backend=backend)
    return {name.split(".")[0]: p for name, p in paths.items() if not name.endswith((".png", ".pdf"))}


def main(argv=None) -> int:
    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
