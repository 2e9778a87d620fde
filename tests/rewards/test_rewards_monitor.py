from rewards.compose import RewardHackingMonitor


def test_divergence_alarm_when_heldout_flat():
    m = RewardHackingMonitor(window=3)
    assert m.update(10, 0.3, 0.5) == [] and m.update(20, 0.5, 0.5) == []
    alarms = m.update(30, 0.7, 0.49)
    assert alarms and "divergence" in alarms[0] and m.alarms[0][0] == 30


def test_quiet_when_heldout_improves():
    m = RewardHackingMonitor(window=3)
    for s, (tr, h) in enumerate([(0.3, 0.25), (0.5, 0.75), (0.7, 1.0)]):
        assert m.update(s, tr, h, citations_per_claim=1.0, support_rate=0.9, answer_length=50) == []
    assert m.alarms == []


def test_citation_stuffing_and_length_inflation():
    m = RewardHackingMonitor(window=2)
    m.update(1, 0.5, 0.5, citations_per_claim=1.0, support_rate=0.8, answer_length=40)
    alarms = m.update(2, 0.5, 0.5, citations_per_claim=3.0, support_rate=0.7, answer_length=120)
    assert any("citation stuffing" in a for a in alarms)
    assert any("length inflation" in a for a in alarms)
    # more citations with better support is not stuffing
    m2 = RewardHackingMonitor(window=2)
    m2.update(1, 0.5, 0.5, citations_per_claim=1.0, support_rate=0.5)
    assert m2.update(2, 0.5, 0.5, citations_per_claim=2.0, support_rate=0.9) == []


def test_non_numbers_are_ignored_and_state_round_trips():
    m = RewardHackingMonitor(window=2)
    m.update(1, float("nan"), None)
    assert m.update(2, 0.9, 0.1) == []
    m3 = RewardHackingMonitor(window=2)
    m3.load_state_dict(m.state_dict())
    assert list(m3.rows) == list(m.rows)
