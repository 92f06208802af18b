"""Cycle-safe node contraction on a DAG with an incremental topological order.

This is the structure the original partitioner borrows from TF XLA (``graphcycles``): every node
has a rank, and the ranks always form a topological order. Inserting an edge that goes "backwards"
in the order repairs it locally with the Pearce–Kelly algorithm, which only visits nodes whose rank
lies between the two endpoints; reachability queries are likewise bounded by rank. There is no
transitive closure and no unbounded search per edge, so contracting the edges of a 100k-node graph
stays near-linear in practice.

Contracting ``a → b`` merges ``b`` into ``a`` only when there is no other path from ``a`` to ``b``
(otherwise the merged node would sit on a cycle). :meth:`GraphCycles.merge` merges two nodes with
no path between them at all (used to fuse independent clusters).
"""

__all__ = ["GraphCycles"]


class GraphCycles:
    """A DAG over node ids ``0..n-1`` supporting edge insertion, contraction and merging.

    Args:
        ranks: an initial topological order as a list ``rank[node]`` (a permutation of ``0..n-1``)
            consistent with every edge that will be inserted; edges that contradict it are still
            accepted (the order is repaired) unless they close a cycle.
    """

    __slots__ = ("rank", "out", "inn", "alive")

    def __init__(self, ranks):
        n = len(ranks)
        self.rank = list(ranks)
        self.out = [set() for _ in range(n)]
        self.inn = [set() for _ in range(n)]
        self.alive = [True] * n

    def has_edge(self, x, y):
        """True when the edge ``x → y`` exists."""
        return y in self.out[x]

    def insert_edge(self, x, y):
        """Add ``x → y``; returns False (and adds nothing) when it would close a cycle."""
        if x == y:
            return False
        out = self.out[x]
        if y in out:
            return True
        out.add(y)
        self.inn[y].add(x)
        rank = self.rank
        if rank[x] < rank[y]:
            return True
        # Pearce–Kelly: find the affected region between rank[y] and rank[x] and reorder it.
        forward = self._forward(y, rank[x], stop=x)
        if forward is None:
            out.discard(y)
            self.inn[y].discard(x)
            return False
        backward = self._backward(x, rank[y])
        forward.sort(key=rank.__getitem__)
        backward.sort(key=rank.__getitem__)
        moved = backward + forward
        slots = sorted(rank[v] for v in moved)
        for v, r in zip(moved, slots):
            rank[v] = r
        return True

    def remove_edge(self, x, y):
        """Remove ``x → y`` if present."""
        self.out[x].discard(y)
        self.inn[y].discard(x)

    def _forward(self, start, upper, stop):
        """Nodes reachable from ``start`` with rank < ``upper``; None if ``stop`` is reached."""
        rank = self.rank
        seen = {start}
        stack = [start]
        found = [start]
        out = self.out
        while stack:
            v = stack.pop()
            for w in out[v]:
                if w == stop:
                    return None
                if w not in seen and rank[w] < upper:
                    seen.add(w)
                    stack.append(w)
                    found.append(w)
        return found

    def _backward(self, start, lower):
        rank = self.rank
        seen = {start}
        stack = [start]
        found = [start]
        inn = self.inn
        while stack:
            v = stack.pop()
            for w in inn[v]:
                if w not in seen and rank[w] > lower:
                    seen.add(w)
                    stack.append(w)
                    found.append(w)
        return found

    def is_reachable(self, x, y):
        """True when there is a path ``x →* y`` (``x == y`` counts)."""
        if x == y:
            return True
        rank = self.rank
        ry = rank[y]
        if rank[x] > ry:
            return False
        seen = {x}
        stack = [x]
        out = self.out
        while stack:
            v = stack.pop()
            for w in out[v]:
                if w == y:
                    return True
                if w not in seen and rank[w] < ry:
                    seen.add(w)
                    stack.append(w)
        return False

    def contract_edge(self, a, b):
        """Merge ``b`` into ``a`` along the edge ``a → b`` unless another path ``a →* b`` exists.

        Returns the id of the merged node (``a`` or ``b``: the one with more edges survives, to
        copy less), or None when the contraction would create a cycle (nothing changes then).
        """
        self.remove_edge(a, b)
        if self.is_reachable(a, b):
            self.insert_edge(a, b)
            return None
        return self._merge_into_larger(a, b)

    def merge(self, a, b):
        """Merge two nodes with no path between them in either direction.

        Returns the surviving id, or None (nothing changes) when one reaches the other.
        """
        if a == b:
            return a
        if self.is_reachable(a, b) or self.is_reachable(b, a):
            return None
        return self._merge_into_larger(a, b)

    def _merge_into_larger(self, a, b):
        if len(self.inn[b]) + len(self.out[b]) > len(self.inn[a]) + len(self.out[a]):
            a, b = b, a
        outs = self.out[b]
        ins = self.inn[b]
        self.out[b] = set()
        self.inn[b] = set()
        for y in outs:
            self.inn[y].discard(b)
        for y in ins:
            self.out[y].discard(b)
        self.alive[b] = False
        for y in sorted(outs, key=self.rank.__getitem__):
            if y != a and not self.insert_edge(a, y):
                raise RuntimeError("contraction created a cycle")  # cannot happen: checked
        for y in sorted(ins, key=self.rank.__getitem__):
            if y != a and not self.insert_edge(y, a):
                raise RuntimeError("contraction created a cycle")
        return a
