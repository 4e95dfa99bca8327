"""Every DST method that changes its masks during training times each mask update
(MaskMethod.timed_update: the record's regrowth_s / regrowth_updates); the others report none."""

import time

import pytest

from sparsebench.methods.dst.rigl import RigL

# Mask updates in the tiny fit's 8 epochs x 10 steps = 80 steps, counted by hand:
#   rigl ΔT = 5, T_end = 0.75 x 80 = 60: t = 0, 5, ..., 55 -> 12
#   set at epoch ends 10, 20, ..., 60 (<= T_end = 60, not the last epoch) -> 6
#   snfs at the end of every epoch but the last -> 7
BY_HAND = {"rigl": ({"update_interval": 5}, 12), "set": ({}, 6), "snfs": ({}, 7)}
# The others: at least one timed update (their counts are tested in their own test files).
UPDATING = {
    "haste": {"update_interval": 5, "group_size": 1, "dense_head": 1},
    "mest": {},
    "granet": {},
    "topkast": {},
    "acdc": {},
    "arc": {},
    "arc_acdc": {},
    "cht": {"early_stop": False},
}


def test_timed_seconds_cover_known_work_and_count_follows_the_schedule(tiny_fit, monkeypatch):
    # RigL's drop/grow on each of the three (sparse) layers sleeps 10 ms first: every timed
    # update holds at least 30 ms of known work.
    real = RigL.update_mask

    def slow(weight, mask, grad, fraction):
        time.sleep(0.01)
        return real(weight, mask, grad, fraction)

    monkeypatch.setattr(RigL, "update_mask", staticmethod(slow))
    _, m = tiny_fit("rigl", 0.8, {"update_interval": 5}, epochs=8)
    seconds, count = m.update_timing()
    assert count == 12  # t = 0, 5, ..., 55 (T_end = 60)
    assert all(s >= 0.03 for s in m.update_seconds)
    assert seconds >= 12 * 0.03


@pytest.mark.parametrize("method", sorted(BY_HAND))
def test_update_count_matches_the_schedule_by_hand(tiny_fit, method):
    params, expected = BY_HAND[method]
    _, m = tiny_fit(method, 0.8, params, epochs=8)
    seconds, count = m.update_timing()
    assert count == expected
    assert seconds > 0.0


@pytest.mark.parametrize("method", sorted(UPDATING))
def test_updating_methods_time_their_mask_updates(tiny_fit, method):
    _, m = tiny_fit(method, 0.8, UPDATING[method], epochs=8)
    seconds, count = m.update_timing()
    assert count > 0 and seconds > 0.0


@pytest.mark.parametrize("method", ["static", "dense"])
def test_methods_without_updates_report_none(tiny_fit, method):
    _, m = tiny_fit(method, 0.0 if method == "dense" else 0.8, epochs=2)
    assert m.update_timing() == (None, None)
