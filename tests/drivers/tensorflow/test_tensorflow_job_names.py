"""Mesh job names: layoutcore accepts exactly the ones TF's own Mesh.from_string parses (TF is the oracle)."""

from __future__ import annotations

import pytest

import layoutcore as lc

JOBS = ["worker", "w_1", "W", "a1", "my-worker", "w.1", "1w", "_w"]


@pytest.mark.parametrize("job", JOBS)
def test_layoutcore_accepts_a_job_name_iff_tf_parses_it(job: str) -> None:
    from tensorflow.experimental import dtensor

    text = f"|x=1|0|0|/job:{job}/replica:0/task:0/device:CPU:0"
    try:
        dtensor.Mesh.from_string(text)
        tf_accepts = True
    except ValueError:
        tf_accepts = False
    if tf_accepts:
        assert lc.Mesh.from_string(text).to_string() == dtensor.Mesh.from_string(text).to_string()
    else:
        with pytest.raises(lc.LayoutError, match="job name"):
            lc.Mesh.from_string(text)
