"""Every DST method that changes its masks during training times each mask update
(MaskMethod.timed_update: the record's regrowth_s / regrowth_updates); the others report none."""

import pytest

UPDATING = {
    "set": {},
    "rigl": {"update_interval": 5},
    "haste": {"update_interval": 5, "group_size": 1, "dense_head": 1},
    "snfs": {},
    "mest": {},
    "granet": {},
    "topkast": {},
    "acdc": {},
    "arc": {},
    "arc_acdc": {},
    "cht": {"early_stop": False},
}


@pytest.mark.parametrize("method", sorted(UPDATING))
def test_updating_methods_time_their_mask_updates(tiny_fit, method):
    _, m = tiny_fit(method, 0.8, UPDATING[method], epochs=8)
    seconds, count = m.update_timing()
    assert count == len(m.update_seconds) > 0
    assert seconds == pytest.approx(sum(m.update_seconds)) and seconds >= 0.0


@pytest.mark.parametrize("method", ["static", "dense"])
def test_methods_without_updates_report_none(tiny_fit, method):
    _, m = tiny_fit(method, 0.0 if method == "dense" else 0.8, epochs=2)
    assert m.update_timing() == (None, None)
