"""``GraphView``: an indexed, read-only view over a ``GraphDef``.

Passes never edit a GraphDef in place. They read it through a GraphView (name index, producers,
consumers, edge dtypes, topological order) and write a new GraphDef. Building the index is linear
in nodes + edges and cheap enough for 100k-node graphs (see ``bench/bench_graph_view.py``): node
inputs are parsed once, into plain integer lists, and consumer lists are only built when asked for.
"""

import collections
import heapq

from npu_adapter.graph import types as _types
from npu_adapter.graph.names import parse_input

__all__ = ["GraphView", "LOOP_BACK_EDGE_OPS"]

# Edges leaving these ops are the back edges of TF1 while loops; the original partitioner skips
# them when it looks for cycles (spec §2.6), and so do we.
LOOP_BACK_EDGE_OPS = frozenset({"NextIteration", "RefNextIteration"})


class GraphView:
    """Index of a GraphDef's nodes and edges.

    Attributes:
        graph_def: the GraphDef the view was built from (treat as read-only).
        nodes: list of NodeDefs, in GraphDef order; a node is referred to by its index here.
        index: dict node name → index (first occurrence when names are duplicated).
        data_inputs: per node, a list of ``(src_index, src_port)`` per data input slot;
            ``src_index`` is -1 when the producer does not exist (a dangling input).
        control_inputs: per node, a list of producer indices of its control inputs (-1: dangling).
        dangling: list of ``(node_index, input_string)`` for inputs naming a missing node.
        duplicate_names: sorted list of names used by more than one node.
        functions: dict function name → FunctionDef of the library.
    """

    __slots__ = (
        "graph_def",
        "nodes",
        "index",
        "data_inputs",
        "control_inputs",
        "dangling",
        "duplicate_names",
        "functions",
        "_data_outputs",
        "_control_outputs",
        "_out_types",
        "_in_types",
    )

    def __init__(self, graph_def):
        self.graph_def = graph_def
        nodes = list(graph_def.node)
        self.nodes = nodes
        index = {}
        duplicates = set()
        for i, node in enumerate(nodes):
            name = node.name
            if name in index:
                duplicates.add(name)
            else:
                index[name] = i
        self.index = index
        self.duplicate_names = sorted(duplicates)
        data_inputs = []
        control_inputs = []
        dangling = []
        get = index.get
        for i, node in enumerate(nodes):
            data = []
            ctrl = []
            for text in node.input:
                if text[0] == "^":
                    src = get(text[1:], -1)
                    ctrl.append(src)
                else:
                    # Fast path of names.parse_input (kept inline: this loop runs once per edge).
                    name, sep, port = text.rpartition(":")
                    if sep and port.isdigit():
                        src = get(name, -1)
                        data.append((src, int(port)))
                    else:
                        src = get(text, -1)
                        data.append((src, 0))
                if src < 0:
                    dangling.append((i, text))
            data_inputs.append(data)
            control_inputs.append(ctrl)
        self.data_inputs = data_inputs
        self.control_inputs = control_inputs
        self.dangling = dangling
        self.functions = {f.signature.name: f for f in graph_def.library.function}
        self._data_outputs = None
        self._control_outputs = None
        self._out_types = {}
        self._in_types = {}

    # ----------------------------------------------------------------------------- lookups
    def __len__(self):
        return len(self.nodes)

    def __contains__(self, name):
        return name in self.index

    def node(self, name):
        """The NodeDef called ``name`` (KeyError if absent)."""
        return self.nodes[self.index[name]]

    def name(self, i):
        """Name of node ``i``."""
        return self.nodes[i].name

    def op(self, i):
        """Op type of node ``i``."""
        return self.nodes[i].op

    # ----------------------------------------------------------------------------- consumers
    def _build_outputs(self):
        n = len(self.nodes)
        data_out = [[] for _ in range(n)]
        ctrl_out = [[] for _ in range(n)]
        for dst, inputs in enumerate(self.data_inputs):
            for slot, (src, port) in enumerate(inputs):
                if src >= 0:
                    data_out[src].append((dst, slot, port))
        for dst, inputs in enumerate(self.control_inputs):
            for src in inputs:
                if src >= 0:
                    ctrl_out[src].append(dst)
        self._data_outputs = data_out
        self._control_outputs = ctrl_out

    @property
    def data_outputs(self):
        """Per node, a list of ``(dst_index, dst_slot, src_port)`` of its data consumers."""
        if self._data_outputs is None:
            self._build_outputs()
        return self._data_outputs

    @property
    def control_outputs(self):
        """Per node, a list of indices of nodes that have a control input on it."""
        if self._control_outputs is None:
            self._build_outputs()
        return self._control_outputs

    def consumers(self, name):
        """Sorted names of the nodes that consume ``name`` through a data or control edge."""
        i = self.index[name]
        found = {self.nodes[d].name for d, _, _ in self.data_outputs[i]}
        found.update(self.nodes[d].name for d in self.control_outputs[i])
        return sorted(found)

    def predecessors(self, i):
        """Indices of the producers of node ``i`` (data and control), without duplicates."""
        found = dict.fromkeys(src for src, _ in self.data_inputs[i] if src >= 0)
        found.update(dict.fromkeys(src for src in self.control_inputs[i] if src >= 0))
        return list(found)

    def successors(self, i):
        """Indices of the consumers of node ``i`` (data and control), without duplicates."""
        found = dict.fromkeys(dst for dst, _, _ in self.data_outputs[i])
        found.update(dict.fromkeys(self.control_outputs[i]))
        return list(found)

    # ----------------------------------------------------------------------------- dtypes
    def output_types(self, i):
        """Output dtypes of node ``i`` (list) or None when unknown; cached."""
        cache = self._out_types
        if i not in cache:
            cache[i] = _types.node_output_types(self.nodes[i], self.functions)
        return cache[i]

    def input_types(self, i):
        """Data-input dtypes of node ``i`` (list) or None when unknown; cached."""
        cache = self._in_types
        if i not in cache:
            cache[i] = _types.node_input_types(self.nodes[i], self.functions)
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
        return self.nodes[i].op in LOOP_BACK_EDGE_OPS

    def topological_order(self, *, skip_back_edges=True, stable_key=None):
        """Node indices in a deterministic topological order.

        Ties are broken by GraphDef position (or by ``stable_key(i)`` when given), so the result
        depends only on the graph, never on hashing. Edges out of ``NextIteration`` are ignored
        when ``skip_back_edges`` (v1 while loops). Returns ``(order, remaining)`` where
        ``remaining`` lists the nodes on or behind a cycle (empty for a DAG).
        """
        n = len(self.nodes)
        indegree = [0] * n
        succ = [[] for _ in range(n)]
        for dst in range(n):
            for src in self.predecessors(dst):
                if skip_back_edges and self.nodes[src].op in LOOP_BACK_EDGE_OPS:
                    continue
                indegree[dst] += 1
                succ[src].append(dst)
        key = stable_key or (lambda i: i)
        ready = [(key(i), i) for i in range(n) if indegree[i] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, i = heapq.heappop(ready)
            order.append(i)
            for j in succ[i]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    heapq.heappush(ready, (key(j), j))
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
                        return [self.nodes[k].name for k in cycle]
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
        if skip_back_edges and self.nodes[i].op in LOOP_BACK_EDGE_OPS:
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
