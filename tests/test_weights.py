"""Expert weights: the shipped default, validation errors, votes -> weights, safe writing."""

import pandas as pd
import pytest

from dhp.errors import DHPError
from dhp.schema import TASK_METRICS
from dhp.weights import (
    DEFAULT_PATH,
    default_votes,
    task_perturbations,
    coverage_gaps,
    defaulted_weights,
    shipped_perturbations,
    load_expert_weights,
    validate_expert_weights,
    weights_for,
    weights_from_votes,
    write_default_weights,
    write_expert_weights,
)
from dhp.io import resolve


def test_shipped_default_is_complete_valid_and_labelled_as_ours():
    ew = load_expert_weights()
    assert coverage_gaps(ew) == []
    assert ew.groupby(["task", "perturbation"])["weight"].sum().round(9).eq(1).all()
    first = resolve("dhp/resources/expert_weights.csv").read_text().splitlines()[0]
    assert first.startswith("#") and "not the paper" in first


def test_shipped_default_matches_default_votes():
    ew = load_expert_weights(DEFAULT_PATH)  # the file alone: the shipped perturbations' votes
    expected = weights_from_votes(default_votes())
    pd.testing.assert_frame_equal(ew, expected, check_dtype=False)


def test_paper_example_votes_become_vote_shares():
    # The paper's example: votes 4, 1, 5 for coherence, consistency, fluency -> [0.4, 0.1, 0.5].
    ew = weights_from_votes({"story_completion": {"char_typo": {"coherence": 4, "consistency": 1, "fluency": 5}}})
    assert list(weights_for(ew, "story_completion", "char_typo", ["coherence", "consistency", "fluency"])) == pytest.approx([0.4, 0.1, 0.5])


def test_no_votes_means_equal_weights():
    ew = weights_from_votes({"translation": {"control": {}}})
    assert list(ew["weight"]) == [0.5, 0.5]


def _good():
    return pd.DataFrame(
        {"task": ["translation"] * 2, "perturbation": ["char_typo"] * 2, "metric": ["accuracy", "fluency"],
         "votes": [2, 8], "weight": [0.2, 0.8]}
    )


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.drop(columns=["votes"]), "missing columns"),
        (lambda d: d.assign(weight=[0.3, 0.8]), "sum to 1.1"),
        (lambda d: d.assign(metric=["accuracy", "coherence"]), "not metrics of task"),
        (lambda d: d.assign(weight=[-0.2, 1.2]), "negative weight"),
        (lambda d: d.assign(task=["poetry"] * 2), "unknown task"),
        (lambda d: d.assign(weight=["x", 0.8]), "not a number"),
        (lambda d: pd.concat([d, d.iloc[:1]]), "duplicate row"),
    ],
)
def test_validation_errors(mutate, match):
    validate_expert_weights(_good())
    with pytest.raises(DHPError, match=match):
        validate_expert_weights(mutate(_good()))


def test_missing_perturbation_weights_are_an_error():
    with pytest.raises(DHPError, match="No expert weights"):
        weights_for(validate_expert_weights(_good()), "translation", "word_deletion", ["accuracy", "fluency"])


def test_default_weights_include_registered_votes_of_your_own_perturbation():
    from dhp.perturb.catalog import PERTURBATIONS, perturbation

    @perturbation("shouting", level="character", tasks={"translation": ("single",)},
                  weights={"translation": {"fluency": 3, "accuracy": 1}})
    def _shout(text, ctx):
        return text.upper(), "upper-cased"

    try:
        ew = load_expert_weights()
        assert weights_for(ew, "translation", "shouting", ["accuracy", "fluency"]).tolist() == [0.25, 0.75]
        # a file of your own is taken as it is: no silent defaults mixed in
        with pytest.raises(DHPError, match="No expert weights"):
            weights_for(load_expert_weights(DEFAULT_PATH), "translation", "shouting", ["accuracy", "fluency"])
    finally:
        PERTURBATIONS.pop("shouting")
    assert "shouting" not in set(load_expert_weights()["perturbation"])


def test_write_roundtrip_and_no_silent_overwrite(tmp_path):
    out = tmp_path / "ew.csv"
    ew = weights_from_votes(default_votes())
    write_expert_weights(ew, out, "test votes")
    pd.testing.assert_frame_equal(load_expert_weights(out), ew, check_dtype=False)
    with pytest.raises(DHPError, match="already exists"):
        write_expert_weights(ew, out, "again")


def test_missing_file_names_the_fix(tmp_path):
    with pytest.raises(DHPError, match="notebook 06"):
        load_expert_weights(tmp_path / "nope.csv")


def test_perturbation_lists_cover_every_task():
    assert set(task_perturbations()) == set(TASK_METRICS)


@pytest.fixture
def own_perturbations():
    """Register perturbations for one test and remove them afterwards."""
    from dhp.perturb.catalog import PERTURBATIONS, perturbation

    added = []

    def add(name, **fields):
        perturbation(name, level="character", tasks={"translation": ("single",)}, **fields)(
            lambda text, ctx: (text.upper(), "upper-cased"))
        added.append(name)

    yield add
    for name in added:
        PERTURBATIONS.pop(name)


def test_default_weights_cover_every_own_perturbation_of_a_task_not_only_the_last(own_perturbations):
    own_perturbations("shout_one", weights={"translation": {"fluency": 3, "accuracy": 1}})
    own_perturbations("shout_two", weights={"translation": {"fluency": 1, "accuracy": 1}})
    ew = load_expert_weights()
    assert weights_for(ew, "translation", "shout_one", ["accuracy", "fluency"]).tolist() == [0.25, 0.75]
    assert weights_for(ew, "translation", "shout_two", ["accuracy", "fluency"]).tolist() == [0.5, 0.5]


def test_default_weights_cover_a_perturbation_of_another_family(own_perturbations):
    own_perturbations("shout_other", family="my_family", weights={"translation": {"fluency": 1, "accuracy": 3}})
    ew = load_expert_weights()
    assert weights_for(ew, "translation", "shout_other", ["accuracy", "fluency"]).tolist() == [0.75, 0.25]
    assert "shout_other" in task_perturbations()["translation"]


def test_shipped_default_covers_every_family_of_the_registry():
    from dhp.perturb.catalog import PERTURBATIONS

    ew = load_expert_weights(DEFAULT_PATH)  # the file alone, no registered defaults mixed in
    have = set(zip(ew["task"], ew["perturbation"]))
    shipped = {(t, p) for t, ps in shipped_perturbations().items() for p in ps}
    assert {PERTURBATIONS[p].family for _, p in shipped} >= {"dhp", "criteria_confusion"}
    assert shipped - have == set() and len(shipped) >= 60  # the paper's and Hu et al.'s, every task


def test_the_shipped_file_is_what_python_m_dhp_weights_writes(tmp_path):
    out = write_default_weights(tmp_path / "ew.csv")
    assert out.read_bytes() == resolve(DEFAULT_PATH).read_bytes()  # regenerate with: python -m dhp weights


def test_a_perturbation_of_your_own_gets_the_default_rule_and_the_shipped_tests_still_hold(own_perturbations,
                                                                                          tmp_path):
    # a newcomer's perturbations, one with votes, one without: the shipped file and its tests are unchanged
    own_perturbations("swap_votes_test", weights={"translation": {"fluency": 1, "accuracy": 3}})
    own_perturbations("swap_plain_test")
    test_shipped_default_matches_default_votes()
    test_shipped_default_covers_every_family_of_the_registry()
    test_shipped_default_is_complete_valid_and_labelled_as_ours()
    test_the_shipped_file_is_what_python_m_dhp_weights_writes(tmp_path)
    ew = load_expert_weights()
    assert weights_for(ew, "translation", "swap_plain_test", ["accuracy", "fluency"]).tolist() == [0.5, 0.5]
    mine = ("swap_votes_test", "swap_plain_test")  # other registered ones (a plug-in's) may be said too
    said = {d["perturbation"]: d["rule"] for d in defaulted_weights() if d["perturbation"] in mine}
    assert said == {"swap_votes_test": "its own weights= votes", "swap_plain_test": "equal weights (no votes declared)"}


def test_the_run_manifest_says_once_which_perturbations_got_the_default_rule(own_perturbations, tmp_path):
    import json

    from dhp import methods

    own_perturbations("swap_plain_test")
    dhp = methods.get("dhp")
    config = dhp.config(None, run_dir=str(tmp_path), dataset="wmt22_de_en", perturbations=["swap_plain_test"])
    methods.record(dhp, config)
    said = json.loads((tmp_path / "manifest.json").read_text())["stages"]["dhp"]["expert_weights_defaults"]
    assert said == [{"task": "translation", "perturbation": "swap_plain_test",
                     "rule": "equal weights (no votes declared)"}]
    shipped = dhp.config(None, run_dir=str(tmp_path / "b"), perturbations=["char_typo"])
    methods.record(dhp, shipped)  # only shipped perturbations: nothing to say
    assert "expert_weights_defaults" not in json.loads((tmp_path / "b" / "manifest.json").read_text())["stages"]["dhp"]
