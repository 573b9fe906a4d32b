"""The operator's metrics: a batch's observations are each write's, counted once."""

from prometheus_client import CollectorRegistry, Histogram

from coach.metrics import observe_all

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def histogram() -> Histogram:
    return Histogram("lag_seconds", "a lag", buckets=BUCKETS, registry=CollectorRegistry())


def samples(metric: Histogram) -> dict[tuple[str, str], float]:
    """Every sample but the creation time, by name and bucket bound."""
    (family,) = metric.collect()
    return {
        (s.name, s.labels.get("le", "")): s.value
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_observing_a_batch_at_once_is_observing_each_of_its_values() -> None:
    amounts = [0.0, 0.01, 0.0100001, 0.025, 0.3, 0.3, 0.3, 59.9, 60.0, 61.0, 1e9, 0.004]
    one_by_one, at_once = histogram(), histogram()
    for amount in amounts:
        one_by_one.observe(amount)
    observe_all(at_once, amounts[:5])
    observe_all(at_once, amounts[5:])
    assert samples(at_once) == samples(one_by_one)
    assert samples(at_once)[("lag_seconds_count", "")] == len(amounts)


def test_observing_no_values_changes_nothing() -> None:
    metric = histogram()
    before = samples(metric)
    observe_all(metric, [])
    assert samples(metric) == before
