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

    ``out[v]`` and ``inn[v]`` hold the successors and predecessors of ``v`` as the keys of a
    dict (values None) used as a set: a dict of ints is not tracked by the garbage collector,
    where a set always is, and a graph of 100k nodes has two of them per node. No result
    depends on their order.
    """

    __slots__ = ("rank", "out", "inn", "alive")

    def __init__(self, ranks):
        n = len(ranks)
        self.rank = list(ranks)
        self.out = [{} for _ in range(n)]
        self.inn = [{} for _ in range(n)]
        self.alive = [True] * n

    @classmethod
    def from_successors(cls, ranks, successors):
        """The DAG with edges ``i → j`` for ``j`` in ``successors[i]``, which must all respect
        ``ranks`` (no reordering is done; this is the fast way to build a large graph)."""
        self = cls.__new__(cls)
        n = len(ranks)
        self.rank = list(ranks)
        self.out = [dict.fromkeys(s) for s in successors]
        inn = [[] for _ in range(n)]
        for i, succ in enumerate(successors):
            for j in succ:
                inn[j].append(i)
        self.inn = [dict.fromkeys(p) for p in inn]
        self.alive = [True] * n
        return self

    @classmethod
    def from_edge_sets(cls, ranks, out_sets, in_sets):
        """The DAG whose node ``i`` has successors ``out_sets[i]`` and predecessors
        ``in_sets[i]`` (dicts used as sets, see the class docstring: the same edges seen from
        both ends, all respecting ``ranks``). They are taken over, not copied: the caller must
        not use them afterwards."""
        self = cls.__new__(cls)
        self.rank = list(ranks)
        self.out = out_sets
        self.inn = in_sets
        self.alive = [True] * len(ranks)
        return self

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
        out[y] = None
        self.inn[y][x] = None
        rank = self.rank
        if rank[x] < rank[y]:
            return True
        # Pearce–Kelly: find the affected region between rank[y] and rank[x] and reorder it.
        forward = self._forward(y, rank[x], stop=x)
        if forward is None:
            del out[y]
            del self.inn[y][x]
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
        self.out[x].pop(y, None)
        self.inn[y].pop(x, None)

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

    def blocked_for_good(self, a, b, barrier):
        """True when some path ``a →* b`` passes through a node with ``barrier[node]`` true.

        Used after a refused contraction: a path through a node that can never be merged
        (a host node) blocks the pair forever, however the two clusters grow; a path through
        other clusters only blocks it until those are merged in. Searches the nodes ranked
        between ``a`` and ``b`` once, tracking whether a barrier was passed.
        """
        rank = self.rank
        rb = rank[b]
        out = self.out
        seen = {(a, False)}
        stack = [(a, False)]
        while stack:
            v, passed = stack.pop()
            for w in out[v]:
                if w == b:
                    if passed:
                        return True
                    continue
                if rank[w] >= rb:
                    continue
                state = (w, passed or barrier[w])
                if state not in seen:
                    seen.add(state)
                    stack.append(state)
        return False

    def contract_edge(self, a, b):
        """Merge ``b`` into ``a`` along the edge ``a → b`` unless another path ``a →* b`` exists.

        Returns the id of the merged node (``a`` or ``b``: the one with more edges survives, to
        copy less), or None when the contraction would create a cycle (nothing changes then).
        """
        rank = self.rank
        if rank[a] > rank[b]:  # cannot happen for a DAG edge; keep the structure honest
            raise RuntimeError(f"edge {a}->{b} contradicts the topological order")
        self.out[a].pop(b, None)
        self.inn[b].pop(a, None)
        survivor = self._try_fuse(a, b)
        if survivor is None:
            self.insert_edge(a, b)  # restore: the graph is as before the call
        return survivor

    def merge(self, a, b):
        """Merge two nodes with no path between them in either direction.

        Returns the surviving id, or None (nothing changes) when one reaches the other.
        """
        if a == b:
            return a
        rank = self.rank
        if rank[a] > rank[b]:
            a, b = b, a
        if b in self.out[a]:
            return None  # a direct edge is a path
        return self._try_fuse(a, b)

    def _try_fuse(self, a, b):
        """Fuse ``a`` and ``b`` (rank[a] < rank[b], no direct edge between them left) unless a
        path ``a →* b`` exists; returns the survivor or None."""
        rank = self.rank
        ra, rb = rank[a], rank[b]
        # Any path a →* b enters b through a predecessor ranked above a, and leaves a through a
        # successor ranked below b. If either set is empty there is no path, and the merged node
        # can simply take a's (resp. b's) rank: no search, no reordering.
        # (Plain loops: this runs once per contracted edge, and most sets hold one or two ids.)
        for p in self.inn[b]:
            if rank[p] > ra:
                break
        else:
            return self._fuse(a, b, None, None, keep=ra)
        for x in self.out[a]:
            if rank[x] < rb:
                break
        else:
            return self._fuse(a, b, None, None, keep=rb)
        forward = self._forward(a, rb, stop=b)
        if forward is None:
            return None
        return self._fuse(a, b, forward[1:], self._backward(b, ra)[1:])

    def _fuse(self, a, b, forward, backward, keep=None):
        """Merge ``a`` and ``b`` (rank[a] < rank[b], no path a →* b left) in one reordering.

        ``forward``: nodes reachable from ``a`` with rank < rank[b]; ``backward``: nodes reaching
        ``b`` with rank > rank[a]. The two sets are disjoint (else a path a →* b would exist).
        The affected rank slots are reassigned as: backward nodes, the merged node, forward
        nodes — each group keeping its relative order — which keeps every edge pointing forward
        (one Pearce–Kelly reordering for the whole merge instead of one per moved edge). With
        ``keep`` the caller has shown no reordering is needed and the merged node takes that
        rank.
        """
        rank = self.rank
        out, inn = self.out, self.inn
        if len(inn[b]) + len(out[b]) > len(inn[a]) + len(out[a]):
            survivor, dead = b, a
        else:
            survivor, dead = a, b
        if keep is not None:
            rank[survivor] = keep
        else:
            slots = sorted([rank[a], rank[b]] + [rank[v] for v in forward] +
                           [rank[v] for v in backward])
            backward.sort(key=rank.__getitem__)
            forward.sort(key=rank.__getitem__)
            for v, r in zip(backward + [survivor] + forward, slots):
                rank[v] = r
        out_s, inn_s = out[survivor], inn[survivor]
        for y in out[dead]:
            in_y = inn[y]
            in_y.pop(dead, None)
            if y != survivor:
                out_s[y] = None
                in_y[survivor] = None
        for y in inn[dead]:
            out_y = out[y]
            out_y.pop(dead, None)
            if y != survivor:
                inn_s[y] = None
                out_y[survivor] = None
        out_s.pop(dead, None)
        inn_s.pop(dead, None)
        out[dead] = {}
        inn[dead] = {}
        self.alive[dead] = False
        return survivor
