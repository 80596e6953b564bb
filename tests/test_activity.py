"""Where the time goes (`autorl.activity`): a kind's time is the union of its intervals, other is the rest."""

import asyncio
import time

from autorl import activity


def test_a_kind_counts_the_union_of_its_intervals_and_other_the_time_none_ran(monkeypatch):
    monkeypatch.setattr(activity, "_intervals", [])
    activity.record("policy", 10.0, 14.0)
    activity.record("policy", 12.0, 16.0)  # concurrent rollouts: 10-16, not 8 s
    activity.record("judge", 15.0, 18.0)  # overlaps the policy's: each kind keeps its own
    activity.record("training", 5.0, 6.0)  # before the window: not counted
    activity.record("server starts", 19.0, 30.0)  # past its end: clipped; none ran 9-10 and 18-19
    assert activity.breakdown(9.0, 20.0) == {"policy": 6.0, "judge": 3.0, "server starts": 1.0, "other": 2.0}
    more = [("generator", 8.0, 9.5)]  # recorded elsewhere (a model call's record), clipped to the window
    assert activity.breakdown(9.0, 20.0, more)["generator"] == 0.5
    assert activity.breakdown(40.0, 50.0) == {"other": 10.0}


def test_the_block_s_time_is_recorded_also_when_it_raises(monkeypatch):
    monkeypatch.setattr(activity, "_intervals", [])
    start = time.monotonic()

    async def rollout():
        with activity.activity("policy"):
            await asyncio.sleep(0.2)

    async def main():
        await asyncio.gather(rollout(), rollout())
        try:
            with activity.activity("training"):
                raise ValueError("boom")
        except ValueError:
            pass

    asyncio.run(main())
    spent = activity.breakdown(start)
    assert 0.2 <= spent["policy"] < 0.4  # two rollouts at once: about one's time, not two
    assert "training" in spent  # recorded though it raised


def test_the_oldest_intervals_are_forgotten_past_the_cap(monkeypatch):
    monkeypatch.setattr(activity, "_intervals", [])
    monkeypatch.setattr(activity, "KEPT", 10)
    for i in range(11):
        activity.record("policy", float(i), i + 0.5)
    assert len(activity._intervals) == 6 and activity._intervals[0][1] == 5.0
