"""``GraphView``: an indexed, read-only view over a ``GraphDef``.

Passes never edit a GraphDef in place (docs/architecture.md, "The pass contract"). A pass reads
its input through a GraphView (name index, producers, consumers, edge dtypes, topological order)
and writes a new GraphDef. Building the index is linear in nodes + edges and cheap enough for
100k-node graphs (the ``scaling`` section of ``python -m bench`` measures it): node inputs are
parsed into tuples of integers when an edge is first asked for (a reader of names, op types and
attributes never pays for them), and consumer tuples only when asked for.
"""

import collections
import heapq
import itertools

from npu_adapter.graph import types as _types
from npu_adapter.graph.names import parse_input

__all__ = ["GraphView", "LOOP_BACK_EDGE_OPS"]

# Edges leaving these ops are the back edges of TF1 while loops; the original partitioner skips
# them when it looks for cycles (docs/original-adapter.md, 6), and so do we.
LOOP_BACK_EDGE_OPS = frozenset({"NextIteration", "RefNextIteration"})


def _in_producer_order(predecessors, back):
    """True when every node's producers come before it (edges out of ``back[src]`` nodes
    aside), i.e. when index order is a topological order."""
    if back is None:
        return all(not preds or max(preds) < dst for dst, preds in enumerate(predecessors))
    return all(not preds or max(preds) < dst or all(src < dst or back[src] for src in preds)
               for dst, preds in enumerate(predecessors))


def _group_by_source(n, sources, entries):
    """Per node ``0..n-1``, the tuple of ``entries[k]`` whose ``sources[k]`` is that node, in
    their order (``()`` for none)."""
    table = [()] * n
    order = sorted(range(len(sources)), key=sources.__getitem__)  # stable
    for src, group in itertools.groupby(order, key=sources.__getitem__):
        table[src] = tuple(map(entries.__getitem__, group))
    return table


def _adjacency(data, control):
    """Per node, the tuple of the first elements of its ``data`` entries followed by its
    ``control`` entries, without duplicates or -1 (dangling), first occurrences first."""
    table = []
    append = table.append
    for edges, second in zip(data, control):
        if not second and len(edges) <= 1:
            # The common case: at most one neighbour.
            append(() if not edges or edges[0][0] < 0 else (edges[0][0],))
            continue
        found = dict.fromkeys([edge[0] for edge in edges])
        found.update(dict.fromkeys(second))
        found.pop(-1, None)
        append(tuple(found))
    return table


class GraphView:
    """Index of a GraphDef's nodes and edges.

    Attributes:
        graph_def: the GraphDef the view was built from (treat as read-only).
        nodes: list of NodeDefs, in GraphDef order, made when first read (see the property);
            a node is referred to by its index here.
        names: list of node names, in GraphDef order (a plain list: cheaper than NodeDef reads).
        ops: list of op types, in GraphDef order.
        index: dict node name → index (first occurrence when names are duplicated).
        data_inputs: per node, a tuple of ``(src_index, src_port)`` per data input slot;
            ``src_index`` is -1 when the producer does not exist (a dangling input).
        control_inputs: per node, a tuple of producer indices of its control inputs (-1:
            dangling).
        dangling: list of ``(node_index, input_string)`` for inputs naming a missing node.
        misordered: sorted indices of the nodes listing a data input after a control input
            (invalid; reported by ``verify_graph``).
        duplicate_names: sorted list of names used by more than one node.
        functions: dict function name → FunctionDef of the library.

    The four edge attributes are parsed from the node inputs when one of them is first read.
    The per-node entries of the edge tables (inputs, outputs, predecessors, successors) are
    tuples of ints, the empty ones all the same ``()``: the garbage collector stops tracking
    such tuples, so an index of 100k nodes does not add a few hundred thousand containers to
    every full collection of the process while a rewrite runs.
    """

    __slots__ = (
        "graph_def",
        "_nodes",
        "names",
        "ops",
        "index",
        "_data_inputs",
        "_control_inputs",
        "_dangling",
        "_misordered",
        "duplicate_names",
        "functions",
        "_data_outputs",
        "_control_outputs",
        "_out_types",
        "_in_types",
        "cache",
    )

    def __init__(self, graph_def):
        self.graph_def = graph_def
        self._nodes = None  # (see the nodes property)
        # Names and op types as plain lists: reading NodeDef fields from Python is slow, and the
        # passes ask for them in their inner loops.
        names = []
        ops = []
        for node in graph_def.node:
            names.append(node.name)
            ops.append(node.op)
        self.names = names
        self.ops = ops
        index = dict(zip(names, range(len(names))))
        duplicates = set()
        if len(index) != len(names):
            index = {}
            for i, name in enumerate(names):
                if name in index:
                    duplicates.add(name)
                else:
                    index[name] = i
        self.index = index
        self.duplicate_names = sorted(duplicates)
        self._data_inputs = None  # parsed on first use (see _parse_inputs)
        self._control_inputs = None
        self._dangling = None
        self._misordered = None
        self.functions = {f.signature.name: f for f in graph_def.library.function}
        self._data_outputs = None
        self._control_outputs = None
        self._out_types = {}
        self._in_types = {}
        # Derived structures (topological order, loop frames, Const sizes, ...) computed once
        # per view: what the structure and the dtype, frame and Const attributes decide, so a
        # rebound view may share them (see rebind).
        self.cache = {}

    def _parse_inputs(self):
        """Parse every node's inputs into the four edge attributes (once)."""
        data_inputs = []
        control_inputs = []
        dangling = []
        misordered = []
        ported = []  # nodes with an input "name:<port>" (port 0 written out included)
        get = self.index.get
        for i, node in enumerate(self.graph_def.node):
            data = []
            ctrl = None
            for text in node.input:
                # Inline fast paths of names.parse_input: this loop runs once per edge.
                src = get(text)
                if src is not None:  # "name": output 0 (the common case)
                    if ctrl is not None:
                        misordered.append(i)
                    data.append((src, 0))
                    continue
                if text[0] == "^":
                    src = get(text[1:], -1)
                    if ctrl is None:
                        ctrl = [src]
                    else:
                        ctrl.append(src)
                else:
                    if ctrl is not None:
                        misordered.append(i)
                    name, sep, port = text.rpartition(":")
                    if sep and port.isdigit():
                        src = get(name, -1)
                        data.append((src, int(port)))
                        if ported[-1:] != [i]:
                            ported.append(i)
                    else:
                        src = -1
                        data.append((src, 0))
                if src < 0:
                    dangling.append((i, text))
            data_inputs.append(tuple(data) if data else ())
            control_inputs.append(tuple(ctrl) if ctrl is not None else ())
        self._data_inputs = data_inputs
        self._control_inputs = control_inputs
        self._dangling = dangling
        self._misordered = sorted(set(misordered))
        self.cache.setdefault("ported", ported)

    @property
    def nodes(self):
        """The NodeDefs, in GraphDef order (a list, made when first read).

        Each NodeDef read from Python is an object the garbage collector tracks: a list of them
        for a 100k-node graph lives through the collections a rewrite triggers and makes each
        full collection longer. So the list is made only for a reader of many nodes; the index
        itself, the dtypes and :meth:`node_at` read single nodes from the GraphDef.
        """
        nodes = self._nodes
        if nodes is None:
            nodes = self._nodes = list(self.graph_def.node)
        return nodes

    def node_at(self, i):
        """The NodeDef of node ``i`` (without making the :attr:`nodes` list)."""
        nodes = self._nodes
        return nodes[i] if nodes is not None else self.graph_def.node[i]

    @property
    def data_inputs(self):
        """Per node, ``(src_index, src_port)`` per data input slot (see the class docstring)."""
        if self._data_inputs is None:
            self._parse_inputs()
        return self._data_inputs

    @property
    def control_inputs(self):
        """Per node, the producer indices of its control inputs (-1: dangling)."""
        if self._control_inputs is None:
            self._parse_inputs()
        return self._control_inputs

    @property
    def dangling(self):
        """``(node_index, input_string)`` of every input naming a missing node."""
        if self._dangling is None:
            self._parse_inputs()
        return self._dangling

    @property
    def misordered(self):
        """Sorted indices of the nodes listing a data input after a control input."""
        if self._misordered is None:
            self._parse_inputs()
        return self._misordered

    def rebind(self, graph_def):
        """The view of ``graph_def``, a graph with this view's structure: the same nodes, in the
        same order, with the same op types and inputs, and the same attributes but for ones
        that decide no dtype, no Const's dtype or shape and no loop frame (a pass's
        annotations, such as the placement and the cluster name; the data of Consts set aside
        by ``strip_payloads``).

        Shares every index structure and cache, so it costs next to nothing: a pass that only
        annotates its input hands the next pass its index this way
        (``PassResult.view``; ``VerifyInstrument`` checks the structure is the same)."""
        if self._data_inputs is None:
            self._parse_inputs()  # (once, for both views)
        other = GraphView.__new__(GraphView)
        other.graph_def = graph_def
        other._nodes = None
        for slot in ("names", "ops", "index", "_data_inputs", "_control_inputs", "_dangling",
                     "_misordered", "duplicate_names", "_data_outputs", "_control_outputs",
                     "_out_types", "_in_types", "cache"):
            setattr(other, slot, getattr(self, slot))
        other.functions = {f.signature.name: f for f in graph_def.library.function}
        return other

    def subset(self, graph_def, kept):
        """The view of ``graph_def``, whose nodes are this view's nodes ``kept`` (sorted indices),
        unchanged and in the same order — what extracting a client graph without feed
        substitutions produces. Built by renumbering, without parsing any input again."""
        n = len(self.ops)
        # Old index -> new index as a list, -1 for nodes left out; the extra last entry maps a
        # dangling producer (-1) to -1 again.
        new_of = [-1] * (n + 1)
        for new, old in enumerate(kept):
            new_of[old] = new
        other = GraphView.__new__(GraphView)
        other.graph_def = graph_def
        other._nodes = None
        names = self.names
        other.names = [names[old] for old in kept]
        other.ops = [self.ops[old] for old in kept]
        if self.duplicate_names:
            other.index = {}
            for new, name in enumerate(other.names):
                other.index.setdefault(name, new)  # first occurrence, as __init__
            present = set(other.names)
            other.duplicate_names = [d for d in self.duplicate_names if d in present]
        else:
            other.index = dict(zip(other.names, range(len(kept))))
            other.duplicate_names = []
        # Empty input tuples (a quarter of a model's nodes are Consts; most nodes have no
        # control input) are shared rather than rebuilt.
        data_inputs = self.data_inputs
        other._data_inputs = [tuple([(new_of[src], port) for src, port in inputs]) if inputs
                              else inputs for inputs in [data_inputs[old] for old in kept]]
        control_inputs = self.control_inputs
        other._control_inputs = [tuple([new_of[src] for src in inputs]) if inputs else inputs
                                 for inputs in [control_inputs[old] for old in kept]]
        other._dangling = [(new_of[i], text) for i, text in self.dangling if new_of[i] >= 0]
        other._misordered = [new_of[i] for i in self.misordered if new_of[i] >= 0]
        other.functions = {f.signature.name: f for f in graph_def.library.function}
        other._data_outputs = None
        other._control_outputs = None
        other._out_types = {new_of[old]: types for old, types in self._out_types.items()
                            if new_of[old] >= 0}
        other._in_types = {new_of[old]: types for old, types in self._in_types.items()
                           if new_of[old] >= 0}
        other.cache = {}
        table = self.cache.get("predecessors")
        if table is not None:
            # Renumber the shared adjacency instead of rebuilding it (order is preserved).
            other.cache["predecessors"] = [
                tuple([new_of[p] for p in preds if new_of[p] >= 0]) if preds else preds
                for preds in [table[old] for old in kept]]
        key = ("topological_order", True)
        if key in self.cache:
            # A topological order restricted to a node subset is one of the induced subgraph;
            # GraphDef order (see compute_topological_order) stays GraphDef order.
            order, remaining = self.cache[key]
            if not remaining and order == list(range(n)):
                other.cache[key] = (list(range(len(kept))), [])
            else:
                other.cache[key] = ([new_of[i] for i in order if new_of[i] >= 0],
                                    [new_of[i] for i in remaining if new_of[i] >= 0])
        sizes = self.cache.get("const_bytes")
        if sizes is not None:
            other.cache["const_bytes"] = {new_of[old]: size for old, size in sizes.items()
                                          if new_of[old] >= 0}
        return other

    # ----------------------------------------------------------------------------- lookups
    def __len__(self):
        return len(self.ops)

    def op_types(self):
        """The set of op types of the graph's nodes (cached)."""
        found = self.cache.get("op_types")
        if found is None:
            found = self.cache["op_types"] = frozenset(self.ops)
        return found

    def inputs_past_port_zero(self):
        """``(index, data inputs)`` of the nodes that may read an output port other than 0, in
        order (the inputs as in :attr:`data_inputs`): for a view built from a GraphDef, the
        nodes with an input written with a port (known from the parse), else those with an input
        past port 0 (found by a scan)."""
        data_inputs = self.data_inputs  # (the parse records the nodes with a port)
        ported = self.cache.get("ported")
        if ported is None:
            ported = self.cache["ported"] = [i for i, inputs in enumerate(data_inputs)
                                             if any(port for _, port in inputs)]
        return [(i, data_inputs[i]) for i in ported]

    def const_bytes(self):
        """Node index → size in bytes of the value of every ``Const`` holding one
        (:func:`~npu_adapter.graph.types.tensor_bytes`; cached, read-only)."""
        sizes = self.cache.get("const_bytes")
        if sizes is None:
            sizes = self.cache["const_bytes"] = _types.const_sizes(self.graph_def.node,
                                                                        self.ops)
        return sizes

    def __contains__(self, name):
        return name in self.index

    def node(self, name):
        """The NodeDef called ``name`` (KeyError if absent)."""
        return self.node_at(self.index[name])

    def name(self, i):
        """Name of node ``i``."""
        return self.names[i]

    def op(self, i):
        """Op type of node ``i``."""
        return self.ops[i]

    # ----------------------------------------------------------------------------- consumers
    def _build_outputs(self):
        n = len(self.ops)
        # The edges grouped by producer (a stable sort keeps them in consumer order), one tuple
        # per producer: no list per node is built on the way.
        sources = []
        entries = []
        for dst, inputs in enumerate(self.data_inputs):
            for slot, (src, port) in enumerate(inputs):
                if src >= 0:
                    sources.append(src)
                    entries.append((dst, slot, port))
        self._data_outputs = _group_by_source(n, sources, entries)
        sources = []
        entries = []
        for dst, inputs in enumerate(self.control_inputs):
            for src in inputs:
                if src >= 0:
                    sources.append(src)
                    entries.append(dst)
        self._control_outputs = _group_by_source(n, sources, entries)

    @property
    def data_outputs(self):
        """Per node, a tuple of ``(dst_index, dst_slot, src_port)`` of its data consumers."""
        if self._data_outputs is None:
            self._build_outputs()
        return self._data_outputs

    @property
    def control_outputs(self):
        """Per node, a tuple of indices of nodes that have a control input on it."""
        if self._control_outputs is None:
            self._build_outputs()
        return self._control_outputs

    def consumers(self, name):
        """Sorted names of the nodes that consume ``name`` through a data or control edge."""
        i = self.index[name]
        names = self.names
        found = {names[d] for d, _, _ in self.data_outputs[i]}
        found.update(names[d] for d in self.control_outputs[i])
        return sorted(found)

    def predecessors(self, i):
        """Indices of the producers of node ``i`` (data and control), without duplicates (a
        tuple)."""
        return self.predecessor_table()[i]

    def predecessor_table(self):
        """:meth:`predecessors` of every node, as one list indexed by node (shared, read-only;
        for loops over every node, which need not pay a method call per node)."""
        table = self.cache.get("predecessors")
        if table is None:
            table = self.cache["predecessors"] = _adjacency(self.data_inputs,
                                                            self.control_inputs)
        return table

    def successors(self, i):
        """Indices of the consumers of node ``i`` (data and control), without duplicates (a
        tuple)."""
        table = self.cache.get("successors")
        if table is None:
            table = self.cache["successors"] = _adjacency(self.data_outputs,
                                                          self.control_outputs)
        return table[i]

    # ----------------------------------------------------------------------------- dtypes
    def output_types(self, i):
        """Output dtypes of node ``i`` (a tuple) or None when unknown; cached.

        Tuples of ints, like the edge tables: a cache entry per node that a pass asks about
        (in mix mode, most nodes) lives through the full collections of a rewrite, and the
        garbage collector stops tracking such tuples where it would visit a list each time."""
        cache = self._out_types
        if i not in cache:
            types = _types.node_output_types(self.node_at(i), self.functions)
            cache[i] = tuple(types) if types is not None else None
        return cache[i]

    def input_types(self, i):
        """Data-input dtypes of node ``i`` (a tuple) or None when unknown; cached (as
        :meth:`output_types`)."""
        cache = self._in_types
        if i not in cache:
            types = _types.node_input_types(self.node_at(i), self.functions)
            cache[i] = tuple(types) if types is not None else None
        return cache[i]

    def edge_type(self, dst, slot):
        """Dtype of data input ``slot`` of node ``dst`` as the consumer declares it.

        Falls back to the producer's output type when the consumer's OpDef is unknown; returns
        None when neither is known.
        """
        in_types = self.input_types(dst)
        if in_types is not None and slot < len(in_types):
            return in_types[slot]
        src, port = self.data_inputs[dst][slot]
        if src >= 0:
            out_types = self.output_types(src)
            if out_types is not None and port < len(out_types):
                return out_types[port]
        return None

    def source_type(self, dst, slot):
        """Dtype of the producer output feeding input ``slot`` of ``dst`` (None if unknown)."""
        src, port = self.data_inputs[dst][slot]
        if src >= 0:
            out_types = self.output_types(src)
            if out_types is not None and port < len(out_types):
                return out_types[port]
        return None

    # ----------------------------------------------------------------------------- order
    def is_back_edge_source(self, i):
        """True when edges out of node ``i`` are TF1 while-loop back edges."""
        return self.ops[i] in LOOP_BACK_EDGE_OPS

    def topological_rank(self):
        """Position of every node in :meth:`topological_order` (back edges of TF1 loops left
        out), as a tuple indexed by node; cached."""
        rank = self.cache.get("topological_rank")
        if rank is None:
            order, _ = self.topological_order(skip_back_edges=True)
            rank = [0] * len(self.ops)
            for position, i in enumerate(order):
                rank[i] = position
            self.cache["topological_rank"] = rank = tuple(rank)
        return rank

    def topological_order(self, *, skip_back_edges=True, stable_key=None):
        """Cached :meth:`compute_topological_order` (see there)."""
        if stable_key is not None:
            return self.compute_topological_order(skip_back_edges=skip_back_edges,
                                                  stable_key=stable_key)
        key = ("topological_order", skip_back_edges)
        if key not in self.cache:
            self.cache[key] = self.compute_topological_order(skip_back_edges=skip_back_edges)
        return self.cache[key]

    def compute_topological_order(self, *, skip_back_edges=True, stable_key=None,
                                  predecessors=None):
        """Node indices in a deterministic topological order.

        Without ``stable_key`` the order is GraphDef order itself when every node comes after
        its producers (graphs TensorFlow writes list nodes in creation order, which is one),
        else Kahn's with a FIFO queue seeded in GraphDef order; with ``stable_key``, Kahn's with
        ties broken by ``stable_key(i)``. Either way the result depends only on the graph,
        never on hashing. Edges out of ``NextIteration`` are ignored when ``skip_back_edges``
        (v1 while loops). ``predecessors``: a table shaped like :meth:`predecessor_table` to
        order by instead (the graph's edges plus edges a caller adds). Returns ``(order,
        remaining)`` where ``remaining`` lists the nodes on or behind a cycle (empty for a DAG).
        """
        n = len(self.ops)
        back = [skip_back_edges and op in LOOP_BACK_EDGE_OPS for op in self.ops]
        table = self.predecessor_table() if predecessors is None else predecessors
        any_back = any(back)
        if stable_key is None and _in_producer_order(table, back if any_back else None):
            # Already a topological order: one pass over the edges instead of Kahn's.
            return list(range(n)), []
        indegree = [0] * n
        succ = [[] for _ in range(n)]
        for dst, preds in enumerate(table):
            if not preds:
                continue
            if any_back:
                preds = [src for src in preds if not back[src]]
            indegree[dst] = len(preds)
            for src in preds:
                succ[src].append(dst)
        order = []
        if stable_key is None:
            # FIFO Kahn seeded in GraphDef order: deterministic and cheaper than a heap.
            order = [i for i in range(n) if indegree[i] == 0]
            head = 0
            while head < len(order):
                i = order[head]
                head += 1
                for j in succ[i]:
                    indegree[j] -= 1
                    if indegree[j] == 0:
                        order.append(j)
        else:
            ready = [(stable_key(i), i) for i in range(n) if indegree[i] == 0]
            heapq.heapify(ready)
            while ready:
                _, i = heapq.heappop(ready)
                order.append(i)
                for j in succ[i]:
                    indegree[j] -= 1
                    if indegree[j] == 0:
                        heapq.heappush(ready, (stable_key(j), j))
        remaining = [i for i in range(n) if indegree[i] > 0]
        return order, remaining

    def find_cycle(self, *, skip_back_edges=True):
        """One cycle as a list of node names (first node repeated at the end), or None.

        Iterative DFS (no recursion limit on deep graphs), deterministic start order.
        """
        _, remaining = self.topological_order(skip_back_edges=skip_back_edges)
        if not remaining:
            return None
        candidates = set(remaining)
        state = {}  # 1 = on stack, 2 = done
        for start in remaining:
            if state.get(start):
                continue
            stack = [(start, iter(self._succ_for_cycle(start, candidates, skip_back_edges)))]
            path = [start]
            state[start] = 1
            while stack:
                node, it = stack[-1]
                advanced = False
                for nxt in it:
                    st = state.get(nxt)
                    if st == 1:
                        cycle = path[path.index(nxt):] + [nxt]
                        return [self.names[k] for k in cycle]
                    if st is None:
                        state[nxt] = 1
                        path.append(nxt)
                        stack.append(
                            (nxt, iter(self._succ_for_cycle(nxt, candidates, skip_back_edges)))
                        )
                        advanced = True
                        break
                if not advanced:
                    state[node] = 2
                    path.pop()
                    stack.pop()
        return None

    def _succ_for_cycle(self, i, candidates, skip_back_edges):
        if skip_back_edges and self.ops[i] in LOOP_BACK_EDGE_OPS:
            return []
        return [j for j in self.successors(i) if j in candidates]

    # ----------------------------------------------------------------------------- closure
    def ancestors(self, seeds, *, stop=None):
        """Indices reachable backwards from ``seeds`` (inclusive) through data and control inputs.

        ``stop(i)`` may return True to not expand node ``i``'s inputs (it is still included).
        Returned as a sorted list.
        """
        seen = set()
        queue = collections.deque()
        for s in seeds:
            if s not in seen:
                seen.add(s)
                queue.append(s)
        while queue:
            i = queue.popleft()
            if stop is not None and stop(i):
                continue
            for src in self.predecessors(i):
                if src not in seen:
                    seen.add(src)
                    queue.append(src)
        return sorted(seen)

    def parse_node_input(self, text):
        """Resolve an input string to ``(src_index, port, is_control)`` (src -1 if missing)."""
        name, port, is_control = parse_input(text)
        return self.index.get(name, -1), port, is_control
