"""Every lesson's prose says what its run says (issue 53): a number its Markdown states as a measurement appears in
its outputs. On the executed lessons when scripts/nbval.py kept them (build/executed/), and always on a tiny
synthetic notebook — which must fail when a wrong number is planted in its prose."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("lesson_prose", ROOT / "scripts" / "lesson_prose.py")
lp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lp)


def _nb(prose: str, printed: str) -> dict:
    return {"cells": [
        {"cell_type": "code", "source": "n_items = 2\nprint(report)", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": printed}]},
        {"cell_type": "markdown", "source": prose}]}


PRINTED = "judge stage: 60 prompts in 210.0 s\nagreement 0.50 (0.38-0.62), 47 % valid\n"


def test_prose_that_matches_its_outputs_passes():
    prose = ("The judge stage took 210.0 s for its 60 prompts; agreement 0.50, with 47 % valid replies. "
             "The formula $2^{-n} \\cdot 18 < 0.05$ and the setting `alpha = 0.05` are not measurements.")
    assert lp.unsupported(_nb(prose, PRINTED)) == []


@pytest.mark.parametrize("planted", ["The judge stage took 50–89 s.", "agreement 0.53 here",
                                     "with 53 % valid replies", "about 4 minutes"])
def test_a_planted_wrong_number_fails(planted):
    bad = lp.unsupported(_nb("As printed above. " + planted, PRINTED))
    assert bad, planted


def test_numbers_marked_as_not_measured_and_unexecuted_notebooks_are_left_alone():
    assert lp.unsupported(_nb("The paper reports 0.71. <!-- prose: not measured -->", PRINTED)) == []
    nb = _nb("It took 50 s.", PRINTED)
    nb["cells"][0]["outputs"] = []
    assert lp.unsupported(nb) == []  # no outputs: nothing to compare (the notebooks in notebooks/ are kept so)


def test_executed_lessons_say_what_their_runs_say():
    if not lp.EXECUTED.exists() or not any(lp.EXECUTED.glob("[0-9][0-9]_*.ipynb")):
        pytest.skip("no executed lessons in build/executed/ (scripts/nbval.py writes them)")
    assert lp.check(lp.EXECUTED) == {}
