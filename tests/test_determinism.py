"""The perturbation step gives the same bytes whatever the machine: thread counts, hash seed, concurrent load,
the clock, the time zone (issue 26: a SummEval item's fictional_entities/major text changed from one
day to the next, because Faker's day_of_week/month_name draw a date between 1970 and now)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dhp.perturb import entities

ROOT = Path(__file__).resolve().parents[1]
# A text of our own (no dataset excerpt) with the entity kinds whose replacements Faker once drew from the clock.
TEXT = ("On Saturday, March 3, Ada Lovelace met Charles Babbage in London. They spoke again on Monday in April, "
        "and in December the Analytical Society printed 200 copies. By Friday the letter had reached Paris.")


def _with_clock(monkeypatch, timestamp: int) -> list[str]:
    """fictional_entities on TEXT for a few seeds, with Faker's idea of 'now' set to `timestamp`."""
    import random

    import faker.providers.date_time as fdt
    from dhp.perturb.catalog import _faker

    monkeypatch.setattr(fdt.Provider, "_parse_end_datetime",
                        classmethod(lambda cls, value: timestamp if value is None else cls._parse_date_time(value)))
    out = []
    for seed in range(12):
        for severity in ("minor", "major"):
            out.append(entities.fictional_entities(TEXT, severity, random.Random(seed), _faker())[0])
    return out


def test_fictional_months_and_days_do_not_depend_on_the_clock(monkeypatch):
    a = _with_clock(monkeypatch, 1_000_000_000)  # 2001
    b = _with_clock(monkeypatch, 1_900_000_000)  # 2030
    assert a == b
    # the seeds do replace days and months (the check above is not vacuous)
    days = {w for t in a for w in entities.DAY_NAMES if w in t} | {w for t in a for w in entities.MONTH_NAMES if w in t}
    assert days - {"Saturday", "March", "Monday", "April", "December", "Friday"}


# One subprocess perturbs 10 real SummEval items (those naming a weekday or month first: the rows that changed) with
# every summarisation method and prints the sha256 of the table. DHP_TEST_FAKE_NOW moves Faker's clock.
SCRIPT = r"""
import hashlib, os, sys
import pandas as pd
now = os.environ.get("DHP_TEST_FAKE_NOW")
if now:
    import faker.providers.date_time as fdt
    fdt.Provider._parse_end_datetime = classmethod(lambda cls, v: int(now) if v is None else cls._parse_date_time(v))
from dhp.datasets import load_dataset
from dhp.perturb import perturb
ds = load_dataset("summeval", n_items=100, seed=0)  # the caller's data root (its environment is kept)
dated = ds["reference"].str.contains(r"\b(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|January|March|April)\b")
ds = pd.concat([ds[dated].head(6), ds[~dated].head(4)])
table = perturb(ds, seed=0)
assert (table.perturbation == "fictional_entities").sum() >= 20 and (table.status == "ok").mean() > 0.8
print("SHA", hashlib.sha256(table.to_csv(index=False).encode()).hexdigest())
"""


def _start_perturb(threads: int, hashseed: str, tz: str, fake_now: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hashseed, "TZ": tz,
           **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    env.pop("DHP_TEST_FAKE_NOW", None)
    if fake_now:
        env["DHP_TEST_FAKE_NOW"] = fake_now
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _sha(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    return next(line.split()[1] for line in out.splitlines() if line.startswith("SHA"))


@pytest.mark.slow
def test_perturbed_table_is_identical_under_threads_hash_seed_load_and_clock():
    # the first two at the same time (each is load for the other; on two cores they take the time of one)
    procs = [_start_perturb(1, "0", "UTC"), _start_perturb(2, "12345", "Asia/Kolkata", fake_now="1900000000")]
    try:
        first = _sha(procs[0])
        assert _sha(procs[1]) == first
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    # under concurrent CPU load: two busy loops on this machine's two cores while the perturbation runs
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        assert _sha(_start_perturb(2, "random", "America/Los_Angeles", fake_now="1000000000")) == first
    finally:
        for p in busy:
            p.kill()
            p.wait()
