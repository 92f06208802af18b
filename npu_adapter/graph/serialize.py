"""Deterministic serialisation of GraphDefs (text and binary) and a content fingerprint."""

import hashlib

from google.protobuf import text_format

__all__ = ["to_bytes", "to_text", "fingerprint"]


def to_bytes(graph_def):
    """Binary serialisation with map entries (node attrs) in sorted order."""
    return graph_def.SerializeToString(deterministic=True)


def to_text(message):
    """Text format; protobuf prints map entries sorted by key, so the text is deterministic."""
    return text_format.MessageToString(message)


def fingerprint(graph_def):
    """SHA-256 hex digest of the deterministic binary serialisation."""
    return hashlib.sha256(to_bytes(graph_def)).hexdigest()
