"""Power, stated (dhp.analysis.power), checked against the controls' own draws."""

import math

import numpy as np
import pandas as pd
import scipy.stats as st

from dhp.analysis import power as pw
from dhp.backends import get_backend
from dhp.backends.control import prefer_rows


def test_the_stated_power_is_what_the_oracle_control_achieves():
    n, quality = 18, 0.8  # control:oracle@0.4 agrees with the gold on 80% of the pairs
    b = get_backend("control:oracle@0.4")
    sims = 600
    rows = pd.DataFrame({"k": [f"{s}/{i}" for s in range(sims) for i in range(n)], "gold": "1",
                         "first": "x", "second": "y"})
    right = (np.array(prefer_rows(b, rows, ["k"])) == "1").reshape(sims, n).sum(axis=1)
    told = np.mean([st.binomtest(int(r), n, 0.5, alternative="greater").pvalue <= 0.05 for r in right])
    stated = pw.power("agreement", quality, n)
    assert abs(told - stated) < 4 * math.sqrt(stated * (1 - stated) / sims) + 0.01, (told, stated)
    # and the table's n for that quality is where the stated power first reaches 80%
    assert pw.units_needed("agreement", quality) == 18 and stated >= 0.8 > pw.power("agreement", quality, 17)


def test_units_needed_and_detectable_agree():
    for kind in pw.KINDS:
        needs = pw.power_table(kind)["units_needed"].tolist()
        assert needs == sorted(needs, reverse=True)  # a better judge needs fewer units
        x = pw.detectable(kind, 50)
        assert pw.power(kind, x, 50) >= 0.8 > pw.power(kind, x - 0.02, 50)
    assert math.isnan(pw.units_needed("agreement", 0.5))  # chance is never told from chance
    assert math.isnan(pw.detectable("agreement", 3))
    assert "no judge is told from chance" in pw.power_line("agreement", 3)
