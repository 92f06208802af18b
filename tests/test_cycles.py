"""GraphCycles: cycle-safe contraction and merging, checked against a brute-force oracle.

The oracle keeps the contracted DAG as plain adjacency sets and answers reachability by search.
After every operation the structure must equal the oracle's graph and its ranks must still be a
topological order (distinct ranks, every edge pointing to a higher rank).
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_adapter.graph.cycles import GraphCycles


class _Oracle:
    """The contracted DAG as ``{alive node: set(successors)}``."""

    def __init__(self, n, edges):
        self.out = {v: set() for v in range(n)}
        for x, y in edges:
            self.out[x].add(y)

    def reach(self, x, y, skip_edge=None):
        """Path x →* y (x == y counts), optionally ignoring the edge ``skip_edge``."""
        if x == y:
            return True
        seen = {x}
        stack = [x]
        while stack:
            v = stack.pop()
            for w in self.out[v]:
                if (v, w) == skip_edge:
                    continue
                if w == y:
                    return True
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return False

    def fuse(self, survivor, dead):
        moved = self.out.pop(dead)
        self.out[survivor] |= moved
        for succ in self.out.values():
            if dead in succ:
                succ.discard(dead)
                succ.add(survivor)
        self.out[survivor].discard(survivor)
        self.out[survivor].discard(dead)

    def edges(self):
        return sorted((x, y) for x, succ in self.out.items() for y in succ)

    def blocked(self, a, b, barrier):
        return any(barrier[w] and self.reach(a, w) and self.reach(w, b)
                   for w in self.out if w not in (a, b))


def _edges(gc):
    return sorted((x, y) for x in range(len(gc.alive)) if gc.alive[x] for y in gc.out[x])


def _check(gc, oracle):
    alive = [v for v, a in enumerate(gc.alive) if a]
    assert alive == sorted(oracle.out)
    ranks = [gc.rank[v] for v in alive]
    assert len(set(ranks)) == len(ranks), "alive ranks must be distinct"
    for x in alive:
        for y in gc.out[x]:
            assert gc.alive[y]
            assert x in gc.inn[y]
            assert gc.rank[x] < gc.rank[y], f"edge {x}->{y} against the order"
        for y in gc.inn[x]:
            assert x in gc.out[y]
    for v, a in enumerate(gc.alive):
        if not a:
            assert not gc.out[v] and not gc.inn[v]
    assert _edges(gc) == oracle.edges()


def _random_dag(rng, n, density):
    """Edges i → j over a hidden random order; GraphCycles gets another random order as ranks,
    so building it already exercises the order repair of insert_edge."""
    hidden = list(range(n))
    rng.shuffle(hidden)
    edges = [(hidden[i], hidden[j]) for i in range(n) for j in range(i + 1, n)
             if rng.random() < density]
    ranks = list(range(n))
    rng.shuffle(ranks)
    return edges, ranks


def _build(n, edges, ranks):
    gc = GraphCycles(ranks)
    for x, y in edges:
        assert gc.insert_edge(x, y) is True
    return gc


@settings(max_examples=120, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 16),
       density=st.sampled_from([0.1, 0.25, 0.5]), data=st.data())
def test_operations_agree_with_brute_force_reachability(seed, n, density, data):
    rng = random.Random(seed)
    edges, ranks = _random_dag(rng, n, density)
    gc = _build(n, edges, ranks)
    oracle = _Oracle(n, edges)
    _check(gc, oracle)
    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        alive = sorted(oracle.out)
        kind = data.draw(st.sampled_from(["contract", "merge", "insert", "remove", "query"]))
        if kind == "contract":
            current = oracle.edges()
            if not current:
                continue
            a, b = data.draw(st.sampled_from(current), label="edge")
            other_path = oracle.reach(a, b, skip_edge=(a, b))
            survivor = gc.contract_edge(a, b)
            if other_path:
                assert survivor is None
            else:
                assert survivor in (a, b)
                oracle.fuse(survivor, b if survivor == a else a)
        elif kind == "merge":
            if len(alive) < 2:
                continue
            a = data.draw(st.sampled_from(alive), label="a")
            b = data.draw(st.sampled_from(alive), label="b")
            if b in oracle.out[a] or a in oracle.out[b]:
                continue  # a direct edge: see test_merge_refuses_directly_connected_nodes
            connected = oracle.reach(a, b) or oracle.reach(b, a)
            survivor = gc.merge(a, b)
            if a == b:
                assert survivor == a
            elif connected:
                assert survivor is None
            else:
                assert survivor in (a, b)
                oracle.fuse(survivor, b if survivor == a else a)
        elif kind == "insert":
            x = data.draw(st.sampled_from(alive), label="x")
            y = data.draw(st.sampled_from(alive), label="y")
            closes_cycle = x == y or oracle.reach(y, x)
            assert gc.insert_edge(x, y) is (not closes_cycle)
            if not closes_cycle:
                oracle.out[x].add(y)
        elif kind == "remove":
            current = oracle.edges()
            if not current:
                continue
            x, y = data.draw(st.sampled_from(current), label="edge")
            gc.remove_edge(x, y)
            oracle.out[x].discard(y)
        else:
            x = data.draw(st.sampled_from(alive), label="x")
            y = data.draw(st.sampled_from(alive), label="y")
            assert gc.is_reachable(x, y) == oracle.reach(x, y)
            barrier = [rng.random() < 0.3 for _ in range(n)]
            assert gc.blocked_for_good(x, y, barrier) == oracle.blocked(x, y, barrier)
        _check(gc, oracle)


# --------------------------------------------------------------------------- named cases
def _triangle():
    """::

        a(0) ──────► b(1)
          └──► c(2) ─┘
    """
    gc = GraphCycles([0, 2, 1])
    for x, y in [(0, 1), (0, 2), (2, 1)]:
        gc.insert_edge(x, y)
    return gc


def test_contraction_is_refused_exactly_when_another_path_exists():
    gc = _triangle()
    before = (_edges(gc), list(gc.rank))
    assert gc.contract_edge(0, 1) is None  # a → c → b remains: merging a, b makes a cycle
    assert (_edges(gc), list(gc.rank)) == before  # nothing changed
    survivor = gc.contract_edge(0, 2)  # the only path a →* c is the edge
    assert survivor in (0, 2)
    assert _edges(gc) == [(survivor, 1)]
    assert gc.contract_edge(survivor, 1) in (survivor, 1)  # now the path is direct
    assert sum(gc.alive) == 1


def test_merge_refuses_directly_connected_nodes():
    gc = GraphCycles([0, 1])
    gc.insert_edge(0, 1)
    assert gc.merge(0, 1) is None
    assert gc.alive == [True, True] and gc.has_edge(0, 1)


def test_merge_of_independent_nodes_and_refusal_of_connected_ones():
    """a → x → b, c → d: a and c are independent; a and b are not."""
    gc = GraphCycles([0, 1, 2, 3, 4])
    gc.insert_edge(0, 4)
    gc.insert_edge(4, 1)
    gc.insert_edge(2, 3)
    assert gc.merge(0, 1) is None and gc.merge(1, 0) is None
    assert gc.merge(2, 2) == 2
    survivor = gc.merge(3, 0)  # argument order does not matter
    assert survivor in (0, 3)
    other = 0 if survivor == 3 else 3
    assert not gc.alive[other]
    assert _edges(gc) == sorted([(survivor, 4), (4, 1), (2, survivor)])
    assert gc.rank[2] < gc.rank[survivor] < gc.rank[4] < gc.rank[1]


def test_merge_reorders_nodes_between_the_two():
    """a(0) → x(1), y(2) → b(3); merging a and b puts y before and x after the merged node."""
    gc = GraphCycles([0, 1, 2, 3])
    gc.insert_edge(0, 1)
    gc.insert_edge(2, 3)
    survivor = gc.merge(0, 3)
    assert gc.rank[2] < gc.rank[survivor] < gc.rank[1]


def test_insert_edge_repairs_the_order_or_refuses_a_cycle():
    gc = GraphCycles([0, 1, 2])
    assert gc.insert_edge(2, 0)  # against the initial order: repaired
    assert gc.rank[2] < gc.rank[0]
    assert gc.insert_edge(0, 1)
    assert gc.insert_edge(1, 2) is False  # 2 → 0 → 1 → 2
    assert not gc.has_edge(1, 2) and 1 not in gc.inn[2]
    assert gc.insert_edge(1, 1) is False
    assert gc.insert_edge(2, 0) is True  # an existing edge
    assert gc.is_reachable(2, 1) and not gc.is_reachable(1, 2) and gc.is_reachable(1, 1)


def test_contracting_against_the_order_is_a_programming_error():
    gc = GraphCycles([1, 0])
    with pytest.raises(RuntimeError, match="edge 0->1 contradicts the topological order"):
        gc.contract_edge(0, 1)


def test_blocked_for_good_needs_a_barrier_strictly_inside_a_path():
    """a(0) → h(1) → b(3) and a → k(2) → b: either path through a barrier blocks the pair."""
    gc = GraphCycles([0, 1, 2, 3])
    for x, y in [(0, 1), (1, 3), (0, 2), (2, 3)]:
        gc.insert_edge(x, y)
    assert gc.blocked_for_good(0, 3, [False, True, False, False])
    assert gc.blocked_for_good(0, 3, [False, False, True, False])
    assert not gc.blocked_for_good(0, 3, [True, False, False, True])  # endpoints do not count
    assert not gc.blocked_for_good(3, 0, [True] * 4)  # no path at all


def test_a_long_chain_contracts_without_recursion():
    n = 5000
    gc = GraphCycles(list(range(n)))
    for i in range(n - 1):
        gc.insert_edge(i, i + 1)
    head = 0
    for i in range(1, n):
        head = gc.contract_edge(head, i)
        assert head is not None
    assert sum(gc.alive) == 1
