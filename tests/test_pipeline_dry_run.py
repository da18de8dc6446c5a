"""`--dry-run` tells a user what a paid judge run will cost, without calling it or writing tables."""

import re
import subprocess
import sys

from dhp.datasets import load_dataset
from dhp.io import project_root
from dhp.perturb import perturb
from dhp.schema import metrics_for
from conftest import child_env


def test_dry_run_counts_every_call_and_writes_no_table(tmp_path):
    # the caller's environment (HOME, data root, mirror), with a key of the test's own
    env = {k: v for k, v in child_env(OPENAI_API_KEY="sk-dry-run-test").items() if not k.startswith("OPENAI_BASE")}
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "dhp.pipeline", "--dataset", "summeval", "--n-items", "2",
         "--judge", "openai:gpt-4o-mini", "--mode", "sample", "--n-samples", "3",
         "--run-dir", str(run_dir), "--dry-run"],
        capture_output=True, text=True, env=env, cwd=project_root(), timeout=300,
    )
    assert out.returncode == 0, out.stderr
    m = re.search(r"(\d+) calls to make \((\d+) cached\).*est\. cost \$(\d+\.\d+)", out.stdout)
    assert m, out.stdout
    variants = perturb(load_dataset("summeval", n_items=2))
    ok = variants[variants["status"] == "ok"]
    # One request per (variant, metric) asks for its 5 replies; identical texts would share one call.
    expected = len(ok.drop_duplicates(["item_id", "text"])) * len(metrics_for("summarization"))
    assert int(m.group(1)) == expected and int(m.group(2)) == 0
    assert float(m.group(3)) > 0  # gpt-4o-mini is in dhp/resources/judge_prices.yaml
    assert "sk-dry-run-test" not in out.stdout + out.stderr
    assert not list(run_dir.glob("*.parquet")) and not list(run_dir.glob("*.csv"))
