"""``bench.recorder_cpu --encode-parts`` sets coach's encoding of a recorder's rows beside
its calls into C alone, made over the very rows coach encoded.

No timing is asserted: the figures are the bench's. What is held is that both parts run
over a real workload: every message and memory step :func:`raw_batches` produced is
opened again and its envelope unpickled, so rows the C calls cannot open or unpickle
fail here. (Whether the calls match coach's in number and size is the bench's own
reading, not checked here.)
"""

from __future__ import annotations

from bench.recorder_cpu import CALLS, ENCODE, c_calls, encode_parts, workload


def test_the_c_calls_run_over_the_rows_coach_encoded() -> None:
    ops = workload(["a" * 32, "b" * 32], 6, 7)

    c_calls(ops)()  # a row it cannot open, or a payload that is no pickle, raises


def test_both_parts_are_measured_each_round() -> None:
    found = encode_parts(rounds=2, turns_of=5)

    assert set(found) == {ENCODE, CALLS}
    assert all(len(values) == 2 and min(values) > 0 for values in found.values())
