"""Graph dumps and inspection (being built; see issue "dump_graphs and inspection")."""

from npu_adapter.instruments import DumpInstrument

__all__ = ["rewrite_dump_instruments"]


def rewrite_dump_instruments(dump_dir, graph_num, environ=None):
    """Instruments ``rewrite`` adds for dumping: per-pass graphs in ``dump_dir`` (if given)."""
    if not dump_dir:
        return []
    return [DumpInstrument(dump_dir, run_name=f"graph_{graph_num}")]
