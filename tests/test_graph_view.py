"""GraphView: name index, edges, consumers, topological order, rebind/subset, dtypes; names.py.

Graphs are small and drawn next to each test; one 20k-node chain checks that nothing recurses.
"""

import gc
import random
import sys

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import while_loop_v1_graph
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import function_pb2, graph_pb2, node_def_pb2, types_pb2

from npu_adapter.graph import names
from npu_adapter.graph.extract import extract_client_graph
from npu_adapter.graph.types import tensor_bytes
from npu_adapter.graph.view import GraphView
from npu_adapter.testing import GraphBuilder

F32 = types_pb2.DT_FLOAT
F32_REF = types_pb2.DT_FLOAT_REF
RESOURCE = types_pb2.DT_RESOURCE


# --------------------------------------------------------------------------- names.py
@pytest.mark.parametrize("text, expected", [
    ("a", ("a", 0, False)),
    ("a:0", ("a", 0, False)),
    ("scope/a_1:3", ("scope/a_1", 3, False)),
    ("^scope/a", ("scope/a", -1, True)),
    ("a:b", ("a:b", 0, False)),       # a non-numeric suffix is part of the name
    ("a:1:2", ("a:1", 2, False)),     # only the last ":<digits>" is a port
    ("a:", ("a:", 0, False)),
])
def test_parse_input(text, expected):
    assert names.parse_input(text) == expected


@pytest.mark.parametrize("args, text", [
    (("a", 0), "a"), (("a", 2), "a:2"), (("a", 0, True), "^a"), (("a", -1), "^a"),
])
def test_format_input_is_canonical(args, text):
    assert names.format_input(*args) == text


_NAME = st.from_regex(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]{0,12}", fullmatch=True)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(name=_NAME, port=st.integers(0, 1000), control=st.booleans())
def test_parse_and_format_are_inverse(name, port, control):
    text = names.format_input(name, port, control)
    assert names.parse_input(text) == (name, -1 if control else port, control)
    assert names.node_name_of(text) == name
    assert names.is_control_input(text) == control
    assert names.is_valid_node_name(name)


def test_tensor_names():
    assert names.tensor_name("a/b") == "a/b:0"
    assert names.parse_tensor_name("a/b") == ("a/b", 0)
    assert names.parse_tensor_name("a/b:4") == ("a/b", 4)
    with pytest.raises(ValueError, match="'\\^a' names an operation"):
        names.parse_tensor_name("^a")


@pytest.mark.parametrize("name, ok", [
    ("a", True), ("0abc", True), (".hidden", True), ("a/b-c_d.e", True), ("a>b", True),
    ("", False), ("_leading_underscore", False), ("-x", False), ("a b", False), ("a:1", False),
    ("^a", False), ("a\n", False),
])
def test_is_valid_node_name(name, ok):
    assert names.is_valid_node_name(name) is ok


def test_sanitize_filename_never_leaves_a_separator_or_dot():
    for raw in ["../x", "a/b\\c", "..", "", "x y\tz", "ünïcode", "C:\\evil"]:
        safe = names.sanitize_filename(raw)
        assert safe and all(c.isascii() and (c.isalnum() or c in "_-") for c in safe), raw
    assert names.sanitize_filename("ok_name-1") == "ok_name-1"
    assert len(names.sanitize_filename("x" * 500)) == 120
    assert len(names.sanitize_filename("x" * 500, max_length=10)) == 10


def test_unique_name_is_deterministic_and_records_the_name():
    taken = {"a", "a_1"}
    assert names.unique_name("a", taken) == "a_2"
    assert names.unique_name("a", taken) == "a_3"
    assert names.unique_name("b", taken) == "b"
    assert {"a_2", "a_3", "b"} <= taken


# --------------------------------------------------------------------------- index and edges
def _diamond():
    """::

        x ─► a ─► c(Add) ◄─ b ◄─ x
                  ▲ ^ctrl
                  init (NoOp)
        c:0 is consumed twice by d (AddN, N=2)
    """
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.unary("Neg", "b", "x")
    b.op("NoOp", "init")
    b.op("Add", "c", ["a", "b:0", "^init"], T=tf.float32)
    b.op("AddN", "d", ["c", "c"], T=tf.float32, N=2)
    return b.graph_def()


def test_index_and_lookups():
    gd = _diamond()
    view = GraphView(gd)
    assert len(view) == 6
    assert view.index == {"x": 0, "a": 1, "b": 2, "init": 3, "c": 4, "d": 5}
    assert view.ops == ["Placeholder", "Abs", "Neg", "NoOp", "Add", "AddN"]
    assert "c" in view and "nope" not in view
    assert view.node("c") is view.nodes[4]
    assert view.name(4) == "c" and view.op(4) == "Add"
    with pytest.raises(KeyError):
        view.node("nope")
    assert view.graph_def is gd


def test_inputs_are_parsed_once_into_indices():
    view = GraphView(_diamond())
    assert view.data_inputs[4] == ((1, 0), (2, 0))
    assert view.control_inputs[4] == (3,)
    assert view.data_inputs[5] == ((4, 0), (4, 0))
    assert view.dangling == [] and view.misordered == [] and view.duplicate_names == []
    assert view.parse_node_input("^init") == (3, -1, True)
    assert view.parse_node_input("c:1") == (4, 1, False)
    assert view.parse_node_input("ghost") == (-1, 0, False)


def test_consumers_outputs_predecessors_successors():
    view = GraphView(_diamond())
    assert view.consumers("x") == ["a", "b"]
    assert view.consumers("init") == ["c"]
    assert view.consumers("c") == ["d"]  # deduplicated
    assert view.consumers("d") == []
    assert view.data_outputs[4] == ((5, 0, 0), (5, 1, 0))
    assert view.control_outputs[3] == (4,)
    assert view.predecessors(4) == (1, 2, 3)
    assert view.predecessors(5) == (4,)  # two edges from c, listed once
    assert view.successors(0) == (1, 2)
    assert view.successors(3) == (4,)
    assert view.ancestors([4]) == [0, 1, 2, 3, 4]
    assert view.ancestors([4], stop=lambda i: i == 1) == [0, 1, 2, 3, 4]  # x via b
    assert view.ancestors([1], stop=lambda i: i == 1) == [1]


def test_bad_inputs_are_recorded_not_raised():
    b = GraphBuilder()
    b.placeholder("x")
    b.placeholder("x")  # duplicate
    b.op("Add", "y", ["^x", "x", "ghost:2"], T=tf.float32)  # data after control, dangling
    b.op("Identity", "z", ["^phantom", "y"], T=tf.float32)
    view = GraphView(b.graph_def())
    assert view.index["x"] == 0  # first occurrence
    assert view.duplicate_names == ["x"]
    assert view.misordered == [2, 3]
    assert view.dangling == [(2, "ghost:2"), (3, "^phantom")]
    assert view.data_inputs[2] == ((0, 0), (-1, 2))
    assert view.control_inputs[3] == (-1,)
    assert view.predecessors(2) == (0,)  # dangling producers are left out


# --------------------------------------------------------------------------- order
def test_topological_order_is_fifo_in_graph_def_order():
    """::

        p ─► q ─► r        s (independent)     t ◄─ p, r
    """
    b = GraphBuilder()
    b.placeholder("t_in")
    b.op("Identity", "t", ["p", "r"], T=tf.float32)  # listed before its producers
    b.placeholder("p")
    b.unary("Abs", "q", "p")
    b.placeholder("s")
    b.unary("Abs", "r", "q")
    view = GraphView(b.graph_def())
    order, remaining = view.topological_order()
    assert [view.name(i) for i in order] == ["t_in", "p", "s", "q", "r", "t"]
    assert remaining == []
    assert view.topological_order() is view.topological_order()  # cached
    order, _ = view.topological_order(stable_key=lambda i: view.name(i))
    assert [view.name(i) for i in order] == ["p", "q", "r", "s", "t", "t_in"]


def test_topological_order_is_graph_def_order_when_producers_come_first():
    """A graph listed producers first (as TensorFlow writes it) keeps its own order, where
    Kahn's FIFO would put the independent ``s`` before ``q``; a loop back edge does not count."""
    b = GraphBuilder()
    b.placeholder("p")
    b.unary("Abs", "q", "p")
    b.placeholder("s")
    b.op("Identity", "t", ["q", "s"], T=tf.float32)
    view = GraphView(b.graph_def())
    assert view.topological_order() == ([0, 1, 2, 3], [])
    gd = while_loop_v1_graph()
    order, remaining = GraphView(gd).topological_order()
    names = [n.name for n in gd.node]
    merge, next_iteration = names.index("while/Merge"), names.index("while/NextIteration")
    assert merge < next_iteration  # Merge reads the NextIteration listed after it
    assert order == list(range(len(names))) and remaining == []


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_topological_order_respects_every_edge_for_any_node_order(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 30)
    edges = sorted({(rng.randrange(j), j) for j in range(1, n) for _ in range(rng.randint(0, 2))})
    perm = list(range(n))
    rng.shuffle(perm)  # GraphDef order unrelated to the DAG order
    gd = graph_pb2.GraphDef()
    by_dst = {}
    for src, dst in edges:
        by_dst.setdefault(dst, []).append(src)
    for k in perm:
        node = gd.node.add(name=f"n{k}", op="NoOp")
        node.input.extend(f"^n{s}" for s in by_dst.get(k, []))
    view = GraphView(gd)
    order, remaining = view.topological_order()
    assert remaining == [] and sorted(order) == list(range(n))
    pos = {view.name(i): r for r, i in enumerate(order)}
    assert all(pos[f"n{s}"] < pos[f"n{d}"] for s, d in edges)
    # Deterministic: a fresh view of the same GraphDef gives the same order.
    assert GraphView(gd).topological_order()[0] == order


def test_v1_loop_back_edges_are_skipped():
    gd = while_loop_v1_graph()
    view = GraphView(gd)
    order, remaining = view.topological_order()
    assert remaining == [] and len(order) == len(gd.node)
    pos = {view.name(i): r for r, i in enumerate(order)}
    assert pos["while/Merge"] < pos["while/Add"] < pos["while/NextIteration"]
    assert view.is_back_edge_source(view.index["while/NextIteration"])
    assert view.find_cycle() is None
    # Without skipping, the loop is a cycle through Merge and NextIteration.
    _, remaining = view.topological_order(skip_back_edges=False)
    assert view.index["while/Merge"] in remaining
    cycle = view.find_cycle(skip_back_edges=False)
    assert cycle[0] == cycle[-1] and "while/NextIteration" in cycle and "while/Merge" in cycle


def test_cycles_are_reported_as_remaining_nodes():
    """x ─► a ─► b ─► a (cycle), b ─► c (behind the cycle)."""
    b = GraphBuilder()
    b.placeholder("x")
    b.binary("Add", "a", "x", "b")
    b.unary("Abs", "b", "a")
    b.unary("Abs", "c", "b")
    view = GraphView(b.graph_def())
    order, remaining = view.topological_order()
    assert [view.name(i) for i in order] == ["x"]
    assert [view.name(i) for i in remaining] == ["a", "b", "c"]
    assert view.find_cycle() in (["a", "b", "a"], ["b", "a", "b"])


# --------------------------------------------------------------------------- lazy edges / subset
@pytest.mark.parametrize("first", ["data_inputs", "control_inputs", "dangling", "misordered",
                                   "inputs_past_port_zero", "names"])
def test_the_edges_are_the_same_whichever_is_read_first(first):
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.op("Unique", "u", ["x"], T=tf.float32, out_idx=tf.int32)
    b.op("Identity", "idx", ["u:1", "^x"], T=tf.int32)
    b.op("Identity", "bad", ["^x", "missing"], T=tf.float32)
    gd = b.graph_def()
    view = GraphView(gd)
    value = getattr(view, first)
    if callable(value):
        value()
    assert view.data_inputs == [(), ((0, 0),), ((1, 1),), ((-1, 0),)]
    assert view.control_inputs == [(), (), (0,), (0,)]
    assert view.dangling == [(3, "missing")]
    assert view.misordered == [3]
    assert [i for i, _ in view.inputs_past_port_zero()] == [2]


def test_rebind_shares_the_index_and_sees_the_new_attrs():
    gd = _diamond()
    view = GraphView(gd)
    _ = view.data_outputs, view.topological_order(), view.output_types(4)
    annotated = graph_pb2.GraphDef()
    annotated.CopyFrom(gd)
    annotated.node[4].attr["_note"].s = b"hello"
    fdef = annotated.library.function.add()
    fdef.signature.name = "helper"
    other = view.rebind(annotated)
    assert other.graph_def is annotated
    for name in ("ops", "index", "data_inputs", "control_inputs", "dangling", "misordered",
                 "duplicate_names", "cache", "data_outputs"):
        assert getattr(other, name) is getattr(view, name), name
    assert other.node("c").attr["_note"].s == b"hello"
    assert "_note" not in view.node("c").attr
    assert set(other.functions) == {"helper"} and view.functions == {}
    assert other.topological_order() is view.topological_order()


def _assert_same_structure(a, b):
    assert a.ops == b.ops
    assert a.index == b.index
    assert a.data_inputs == b.data_inputs
    assert a.control_inputs == b.control_inputs
    assert a.dangling == b.dangling
    assert a.misordered == b.misordered
    assert a.duplicate_names == b.duplicate_names
    assert a.data_outputs == b.data_outputs
    assert a.control_outputs == b.control_outputs
    assert [n.name for n in a.nodes] == [n.name for n in b.nodes]
    assert a.topological_order() == b.topological_order()


def _subset_case(duplicate):
    """x ─► a ─► c ◄─ ghost (dangling), ^init ─► c; c ─► d; ``unused`` is dropped."""
    b = GraphBuilder()
    b.placeholder("x")
    b.unary("Abs", "a", "x")
    b.unary("Neg", "unused", "x")
    b.op("NoOp", "init")
    b.op("Add", "c", ["a", "ghost", "^init"], T=tf.float32)
    b.op("Identity", "d", ["c"], T=tf.float32)
    b.op("Identity", "d" if duplicate else "e", ["a"], T=tf.float32)
    gd = b.graph_def()
    kept = [0, 1, 3, 4, 5, 6]
    sub_gd = graph_pb2.GraphDef()
    sub_gd.node.extend(gd.node[i] for i in kept)
    return gd, sub_gd, kept


@pytest.mark.parametrize("warm", [False, True])
def test_subset_equals_a_fresh_view_of_the_kept_nodes(warm):
    gd, sub_gd, kept = _subset_case(duplicate=False)
    view = GraphView(gd)
    if warm:  # the cached order and dtypes must be carried over correctly
        view.topological_order()
        for i in range(len(view)):
            view.output_types(i)
    sub = view.subset(sub_gd, kept)
    _assert_same_structure(sub, GraphView(sub_gd))
    assert sub.output_types(sub.index["c"]) == (F32,)
    assert sub.output_types(sub.index["init"]) == ()


def test_subset_index_keeps_the_first_of_duplicated_names():
    gd, sub_gd, kept = _subset_case(duplicate=True)
    sub = GraphView(gd).subset(sub_gd, kept)
    fresh = GraphView(sub_gd)
    assert sub.duplicate_names == fresh.duplicate_names == ["d"]
    assert sub.index == fresh.index


def test_extraction_reuses_the_view_by_subsetting():
    gd = _diamond()
    view = GraphView(gd)
    view.topological_order()
    client = extract_client_graph(gd, fetches=["c:0"], view=view)
    assert [n.name for n in client.graph_def.node] == ["x", "a", "b", "init", "c"]
    _assert_same_structure(client.view, GraphView(client.graph_def))


# --------------------------------------------------------------------------- dtypes
def _typed_graph():
    b = GraphBuilder()
    b.op("VariableV2", "v", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.op("Identity", "read", ["v"], T=tf.float32)
    b.op("Assign", "assign", ["v", "read"], T=tf.float32)
    b.op("VarHandleOp", "h", dtype=tf.float32, shape=[2], container="", shared_name="h")
    b.op("ReadVariableOp", "rv", ["h"], dtype=tf.float32)
    b.op("Unpack", "parts", ["read"], T=tf.float32, num=2, axis=0)
    b.op("IdentityN", "idn", ["parts", "parts:1", "rv"], T=[tf.float32, tf.float32, tf.float32])
    b.op("NotARegisteredOp", "mystery", ["read"])
    b.op("GeOp", "geop", ["read"], Tin=[tf.float32], Tout=[tf.int32, tf.float32])
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = "my_fn"
    fdef.signature.input_arg.add(name="a", type=F32)
    fdef.signature.output_arg.add(name="b", type=types_pb2.DT_INT64)
    b.add_function(fdef)
    b.op("my_fn", "call", ["read"])
    return b.graph_def()


@pytest.mark.parametrize("name, outputs, inputs", [
    ("v", [F32_REF], []),
    ("read", [F32], [F32]),
    ("assign", [F32_REF], [F32_REF, F32]),
    ("h", [RESOURCE], []),
    ("rv", [F32], [RESOURCE]),
    ("parts", [F32, F32], [F32]),              # number_attr
    ("idn", [F32, F32, F32], [F32, F32, F32]),  # type_list_attr
    ("mystery", None, None),
    ("geop", [types_pb2.DT_INT32, F32], [F32]),
    ("call", [types_pb2.DT_INT64], [F32]),      # library function signature
])
def test_node_dtypes(name, outputs, inputs):
    view = GraphView(_typed_graph())
    i = view.index[name]
    assert view.output_types(i) == (None if outputs is None else tuple(outputs))
    assert view.input_types(i) == (None if inputs is None else tuple(inputs))


def test_cached_dtypes_are_not_tracked_by_the_garbage_collector():
    # The caches live through a rewrite's full collections (mix mode fills them for most nodes):
    # entries the collector tracks would be visited again by each of them.
    view = GraphView(_typed_graph())
    cached = [view.output_types(i) for i in range(len(view))]
    cached += [view.input_types(i) for i in range(len(view))]
    gc.collect()
    assert [t for t in cached if t is not None and gc.is_tracked(t)] == []


def test_edge_types_ref_and_resource():
    view = GraphView(_typed_graph())
    read, assign, rv, mystery = (view.index[n] for n in ("read", "assign", "rv", "mystery"))
    # Identity declares a plain float input; the producer's output is a ref.
    assert view.edge_type(read, 0) == F32
    assert view.source_type(read, 0) == F32_REF
    assert view.edge_type(assign, 0) == F32_REF
    assert view.edge_type(rv, 0) == RESOURCE
    # Unknown consumer: fall back to the producer's output type.
    assert view.edge_type(mystery, 0) == F32


def test_dtype_of_a_dangling_edge_is_unknown():
    b = GraphBuilder()
    b.op("NotARegisteredOp", "m", ["ghost"])
    view = GraphView(b.graph_def())
    assert view.edge_type(0, 0) is None and view.source_type(0, 0) is None


# --------------------------------------------------------------------------- big graphs
def _chain(n, close_cycle=False):
    gd = graph_pb2.GraphDef()
    first = gd.node.add(name="n0", op="Placeholder")
    first.attr["dtype"].type = F32
    for i in range(1, n):
        node = gd.node.add(name=f"n{i}", op="Identity")
        node.input.append(f"n{i - 1}")
        node.attr["T"].type = F32
    if close_cycle:
        gd.node[1].op = "Add"
        gd.node[1].input.append(f"n{n - 1}")
    return gd


def test_a_20k_node_chain_indexes_without_recursion():
    # A recursive walk over a 20k-deep chain would exceed Python's default recursion limit.
    assert sys.getrecursionlimit() < 20000
    gd = _chain(20000)
    view = GraphView(gd)
    order, remaining = view.topological_order()
    assert order == list(range(20000)) and remaining == []
    assert view.find_cycle() is None
    assert len(view.ancestors([19999])) == 20000
    assert view.consumers("n0") == ["n1"]
    cyclic = GraphView(_chain(20000, close_cycle=True))
    cycle = cyclic.find_cycle()
    assert len(cycle) == 20000 and cycle[0] == cycle[-1]


def test_a_20k_node_graph_verifies_and_extracts():
    from npu_adapter.graph.verify import verify_graph

    gd = _chain(20000)
    assert verify_graph(gd) == []
    client = extract_client_graph(gd, fetches=["n10000:0"])
    assert len(client.graph_def.node) == 10001
    assert all(n.name == f"n{i}" for i, n in enumerate(client.graph_def.node))


# --------------------------------------------------------------------------- may_have_dtype
def _typed_node(op, **attrs):
    node = node_def_pb2.NodeDef(name="n", op=op)
    for key, value in attrs.items():
        if isinstance(value, list):
            node.attr[key].list.type.extend(value)
        elif isinstance(value, int):
            node.attr[key].type = value
        else:
            node.attr[key].CopyFrom(value)
    return node


@pytest.mark.parametrize("op, attrs", [
    ("Identity", {"T": RESOURCE}),
    ("Identity", {"T": F32}),
    ("Add", {"T": F32}),
    ("VarHandleOp", {"dtype": F32}),
    ("ReadVariableOp", {"dtype": F32}),
    ("AssignVariableOp", {"dtype": F32}),
    ("IdentityN", {"T": [F32, RESOURCE]}),
    ("IdentityN", {"T": [F32, F32]}),
    ("Switch", {"T": RESOURCE}),
    ("ZerosLike", {}),  # T missing: the types cannot be told, so no resource either
    ("Const", {"dtype": F32}),
])
def test_may_have_dtype_agrees_with_the_expanded_types(op, attrs):
    from npu_adapter.graph.types import may_have_dtype, node_input_types, node_output_types

    node = _typed_node(op, **attrs)
    resource = frozenset({RESOURCE, RESOURCE + 100})
    expanded = (node_input_types(node) or []) + (node_output_types(node) or [])
    has = any(t in resource for t in expanded)
    # From the attrs alone, the same answer as the expanded input and output lists.
    assert may_have_dtype(node, resource) == has


def test_an_op_whose_opdef_allows_no_resource_is_decided_by_its_type():
    from npu_adapter.graph.types import may_have_dtype, rules_out_dtypes

    resource = frozenset({RESOURCE, RESOURCE + 100})
    # Add's T allows numeric types only: no attr needs reading.
    assert rules_out_dtypes("Add", resource)
    assert rules_out_dtypes("MatMul", resource)
    # A node that says otherwise is not a valid node (TensorFlow refuses it at import).
    assert not may_have_dtype(_typed_node("Add", T=RESOURCE), resource)
    # Ops whose T allows any dtype, or with a resource argument, are read node by node.
    assert not rules_out_dtypes("Identity", resource)
    assert not rules_out_dtypes("Switch", resource)
    assert not rules_out_dtypes("ReadVariableOp", resource)
    assert not rules_out_dtypes("NoSuchOp", resource)
    # The float types are allowed for Add's T: not ruled out.
    assert not rules_out_dtypes("Add", frozenset({F32}))


def test_may_have_dtype_is_conservative_for_unknown_ops_and_cluster_nodes():
    from npu_adapter.graph.types import may_have_dtype

    resource = frozenset({RESOURCE})
    assert may_have_dtype(node_def_pb2.NodeDef(name="u", op="NoSuchOp"), resource)
    assert may_have_dtype(node_def_pb2.NodeDef(name="g", op="GeOp"), resource)


def test_invalid_node_names_agrees_with_the_check_per_name():
    from npu_adapter.graph.names import invalid_node_names, is_valid_node_name

    names = ["a", "scope/b_1", ".x", "ok/>", "", "b\nc", "_x", "x:y", "a\n", "-y", "é"]
    assert invalid_node_names(names) == [n for n in names if not is_valid_node_name(n)]
    assert invalid_node_names(["a", "b/c", "d.e-f>g"]) == []
    assert invalid_node_names([]) == []


def test_const_bytes_are_the_tensor_sizes_and_follow_a_subset():
    b = GraphBuilder()
    b.const("big", np.zeros([64, 64], np.float32))
    b.const("small", np.float32(1.0))
    b.const("text", np.array([b"abc", b"de"]))
    b.op("Add", "sum", ["big", "small"], T=tf.float32)
    b.op("Neg", "unused", ["small"], T=tf.float32)
    graph_def = b.graph_def()
    view = GraphView(graph_def)
    expected = {i: tensor_bytes(graph_def.node[i].attr["value"].tensor)
                for i in range(len(graph_def.node)) if graph_def.node[i].op == "Const"}
    assert view.const_bytes() == expected
    assert expected[view.index["big"]] == 64 * 64 * 4
    client = extract_client_graph(graph_def, ["sum:0"], view=view)
    sub = client.view
    assert sub.const_bytes() == {sub.index[name]: expected[view.index[name]]
                                 for name in ("big", "small")}
    assert GraphView(client.graph_def).const_bytes() == sub.const_bytes()


def test_ports_past_zero_are_the_same_from_the_parse_and_from_a_scan():
    b = GraphBuilder()
    b.placeholder("x", tf.float32, [4])
    b.op("Unique", "u", ["x"], T=tf.float32, out_idx=tf.int32)
    b.op("Identity", "idx", ["u:1"], T=tf.int32)
    b.op("Identity", "val", ["u:0"], T=tf.float32)
    b.op("Abs", "bad", ["x:3"], T=tf.float32)  # x has one output
    b.op("Neg", "unused", ["x"], T=tf.float32)
    graph_def = b.graph_def()
    view = GraphView(graph_def)
    parsed = [i for i, _ in view.inputs_past_port_zero()]
    assert [view.names[i] for i in parsed] == ["idx", "val", "bad"]
    client = extract_client_graph(graph_def, ["idx:0", "val:0", "bad:0"], view=view)
    scanned = [client.view.names[i] for i, _ in client.view.inputs_past_port_zero()]
    assert scanned == ["idx", "bad"]  # ("u:0" reads port 0: only a parse lists it)
    from npu_adapter.graph.verify import verify_graph

    kinds = [(v.kind, v.node) for v in verify_graph(client.graph_def, view=client.view)]
    assert kinds == [(v.kind, v.node) for v in verify_graph(client.graph_def)]
    assert ("port_out_of_range", "bad") in kinds
