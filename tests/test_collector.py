"""The garbage-collector pause around rewrites and installs restores the collector's state."""

import gc
import threading

from npu_adapter.collector import collector_paused


def test_the_pause_nests_and_restores_an_enabled_collector():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_a_collector_the_user_disabled_stays_disabled():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_threads_end_with_the_collector_on():
    first_in, second_done = threading.Event(), threading.Event()
    seen = []

    def first():
        with collector_paused():
            first_in.set()
            second_done.wait(5)
            seen.append(gc.isenabled())  # the other thread's exit must not re-enable it

    def second():
        first_in.wait(5)
        with collector_paused():
            pass
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_an_exception_inside_the_pause_restores_the_collector():
    try:
        with collector_paused():
            raise KeyError("boom")
    except KeyError:
        pass
    assert gc.isenabled()
