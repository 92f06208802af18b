"""Random TF1 graphs run in plain TensorFlow and in NPU sessions under every named option set,
every fetch and every variable compared bit for bit after each of 3 steps (the differential
tester, bounded for CI; the long run is ``python -m npu_adapter.testing.fuzz --minutes 10``).

The graphs depend on the seed alone, so the outcome is the same on every run of a given code.
``KNOWN_DEFECTS`` lists what the current code gets wrong on them — each kind of defect with the
number of graph runs per option set that show it — so that CI stays green while they are being
fixed and fails on anything else: a new kind of defect, a known one on more graphs or under
another option set, or one that went away (then shrink the list:
``TF_ENABLE_ONEDNN_OPTS=0 python tests/test_differential.py`` prints the current one). The goal
is an empty list.
"""

import pprint
import sys

import pytest

from npu_adapter.testing import OPTION_SETS
from npu_adapter.testing.fuzz import run_fuzz

EXAMPLES = 40
MAX_OPS = 6

# Each key is a kind of defect as the fuzz command names it (an error type and message with
# names and numbers blanked, or a kind of mismatch): {option set: graph runs that show it}.
KNOWN_DEFECTS = {
    # issue 31 item 5: random ops restart per gear (gears on tf.data: the in-graph dispatcher
    # calls one static-shape copy of the cluster per gear) and, with isolated clusters, per
    # signature (a mid-graph feed at one step only)
    'mismatch: fetch values after the first step':
        {'gears_dataset': 2, 'isolated_clusters': 1},
}

# Refusals the original makes too, whose documented remedy gives plain TensorFlow's values
# (npu_adapter.testing.EXPECTED_REFUSALS): {refusal: {option set: graph runs}}. Mix mode
# refuses a resource variable read or updated inside TF1 control flow.
KNOWN_REFUSALS = {
    'variable_outside_every_cluster': {'mix': 5},
}


def _run():
    return run_fuzz(OPTION_SETS, seed=0, max_examples=EXAMPLES, max_ops=MAX_OPS,
                    shrink_seconds=0, log=lambda text: None)


def _found(result):
    return {key: dict(sorted(defect.option_sets.items()))
            for key, defect in sorted(result.defects.items())}


@pytest.fixture(scope="module")
def result():
    return _run()


def test_every_graph_is_valid_and_every_option_set_runs(result):
    assert result.graphs == EXAMPLES
    assert result.invalid == 0, "the generator made graphs plain TensorFlow cannot run:\n" + \
        "\n".join(result.invalid_examples.values())
    assert set(result.figures) == {s.name for s in OPTION_SETS}  # gears included
    assert all(f.unreproducible == 0 for f in result.figures.values()), \
        "plain TensorFlow was not reproducible on a generated graph (a tester defect)"


def test_the_refusals_are_the_originals_and_their_remedy_runs(result):
    assert result.refusals == KNOWN_REFUSALS, result.table()


def test_random_graphs_give_plain_tensorflows_values_but_the_known_defects(result):
    found = _found(result)
    if found != KNOWN_DEFECTS:
        new = {k: v for k, v in found.items() if KNOWN_DEFECTS.get(k) != v}
        gone = {k: v for k, v in KNOWN_DEFECTS.items() if k not in found}
        details = "\n".join(f"--- {key}\n{result.defects[key].first_message}\n"
                            f"{result.defects[key].reproducer}" for key in new)
        pytest.fail(f"the differential tester's findings changed.\n{result.table()}\n"
                    f"new or changed (option set: graph runs): {pprint.pformat(new)}\n"
                    f"gone (fixed? remove them from KNOWN_DEFECTS): {pprint.pformat(gone)}\n"
                    "(TF_ENABLE_ONEDNN_OPTS=0 python tests/test_differential.py prints the "
                    "current list)\n"
                    f"{details}")


if __name__ == "__main__":
    run = _run()
    print(run.summary())
    print(run.table())
    print("KNOWN_DEFECTS = ", end="")
    pprint.pprint(_found(run), width=100, stream=sys.stdout)
    print("KNOWN_REFUSALS = ", end="")
    pprint.pprint(run.refusals, width=100, stream=sys.stdout)
