from threadline.kafka.consumer import OffsetTracker


def test_position_never_passes_an_unfinished_offset():
    t = OffsetTracker()
    for off in (10, 11, 12, 13):
        t.add(off)
    assert t.position == 10
    t.finish(12)
    t.finish(13)
    assert t.position == 10  # 10 and 11 still running: committing 14 would skip them
    t.finish(10)
    assert t.position == 11
    t.finish(11)
    assert t.position == 14
    assert t.in_flight == 0


def test_failed_then_later_success_does_not_commit_past_failure():
    # C21: t1 is retried (still unfinished) while t2 succeeds
    t = OffsetTracker()
    t.add(0)
    t.add(1)
    t.finish(1)
    assert t.position == 0
