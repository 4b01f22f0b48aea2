"""The one clock: the fake clock moves only when told, a synced clock waits for the device before
every reading (and nothing more on a CPU), elapsed seconds are exact on a fake clock."""

from __future__ import annotations

import time

import pytest

from agenttrace.clock import FakeClock, MonotonicClock, SyncedClock, default_clock, elapsed_s, with_sync


class FakeDevice:
    """A device whose queued work takes `busy_ns` of the fake clock to finish: `sync` waits for
    it (advances the clock) and logs the order of syncs and readings."""

    def __init__(self, clock: FakeClock, busy_ns: int) -> None:
        self.clock, self.busy_ns = clock, busy_ns
        self.log: list[str] = []

    def sync(self) -> None:
        self.log.append("sync")
        self.clock.advance(self.busy_ns)


def test_with_sync_syncs_before_every_reading():
    fake = FakeClock(start_ns=1_000)
    device = FakeDevice(fake, busy_ns=250)
    clock = with_sync(fake, device.sync)
    readings = []
    for _ in range(3):
        readings.append(clock.now_ns())
        device.log.append("read")
    # each reading saw the work queued before it finish: it came after that reading's sync
    assert readings == [1_250, 1_500, 1_750]
    assert device.log == ["sync", "read"] * 3


def test_without_a_sync_the_clock_is_returned_itself():
    fake = FakeClock()
    assert with_sync(fake, None) is fake  # on a CPU: no wrapper, no extra call per reading
    base = MonotonicClock()
    assert base.with_sync(None) is base


def test_monotonic_with_sync_keeps_the_time_base_and_waits_for_the_sync():
    base = MonotonicClock()
    calls = []

    def sync() -> None:  # a device busy for 2 ms of real time
        calls.append(base.now_ns())
        time.sleep(0.002)

    synced = base.with_sync(sync)
    assert isinstance(synced, SyncedClock) and synced.inner is base
    before = base.now_ns()
    reading = synced.now_ns()
    after = base.now_ns()
    assert len(calls) == 1
    # the reading was taken after the sync returned (a reading before it would be < calls[0] + 2 ms)
    assert reading >= calls[0] + 2_000_000
    assert before <= reading <= after  # the same time base: no jump between the two clocks


def test_the_default_clock_is_shared_and_reads_the_epoch():
    assert default_clock() is default_clock()
    # a clock reads the epoch where it was anchored; it then runs on without the wall clock's
    # steps (during one run here the wall clock moved 31 s ahead of the monotonic one, after the anchor)
    assert abs(MonotonicClock().now_ns() - time.time_ns()) < 1_000_000_000
    assert isinstance(default_clock(), MonotonicClock)
    assert abs(default_clock().now_ns() - time.time_ns()) < 3_600 * 1_000_000_000


def test_elapsed_seconds_are_exact_on_a_fake_clock():
    clock = FakeClock()
    t0 = clock.now_ns()
    clock.advance_s(1.25)
    assert elapsed_s(clock, t0) == 1.25
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_device_clock_syncs_the_gpu_on_cuda_and_nothing_on_a_cpu(monkeypatch):
    torch = pytest.importorskip("torch")
    from agenttrace.generation.device import device_clock, device_sync

    fake = FakeClock()
    assert device_sync("cpu") is None
    assert device_clock(torch.device("cpu"), fake) is fake
    assert device_clock("cpu") is default_clock()

    synced: list = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    clock = device_clock(torch.device("cuda:0"), fake)
    clock.now_ns()
    clock.now_ns()
    assert synced == [torch.device("cuda:0")] * 2  # one synchronize of that device per reading
    assert device_clock(torch.device("cuda:0"), clock) is clock  # already synchronised: not twice
