"""Decode a BinaryFILE ITCH 5.0 stream with itchfeed (PyPI `itchfeed`, import `itch`) and
print JSON: every message's raw fields as itchfeed reads them, per-type counts, and problems.

A message counts as decoded only if itchfeed knows its type, its declared size equals the
framed length, and itchfeed re-encodes it to the identical bytes (so no byte went unread).
The stream is also run through itchfeed's own framing (`parse_stream`) to check its count.

usage: itch_decode.py FILE
"""
import collections
import json
import sys
from importlib.metadata import version

import itch
from itch.parser import MessageParser


def text(value):
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def main(path):
    data = open(path, "rb").read()
    parser = MessageParser()
    messages, problems = [], []
    by_type = collections.Counter()
    offset = 0
    while offset < len(data):
        if offset + 2 > len(data):
            problems.append(f"offset {offset}: truncated length prefix")
            break
        length = int.from_bytes(data[offset:offset + 2], "big")
        raw = data[offset + 2:offset + 2 + length]
        seq = len(messages) + 1
        if len(raw) != length:
            problems.append(f"message {seq}: truncated ({len(raw)} of {length} bytes)")
            break
        offset += 2 + length
        try:
            m = parser.get_message_type(raw)
        except Exception as e:  # noqa: BLE001 - report, keep going
            problems.append(f"message {seq}: {e}")
            messages.append({"type": chr(raw[0]), "error": str(e)})
            continue
        kind = m.message_type.decode()
        by_type[kind] += 1
        if m.message_size != length:
            problems.append(f"message {seq} {kind}: itchfeed size {m.message_size}, framed {length}")
        if m.to_bytes() != raw:
            problems.append(f"message {seq} {kind}: itchfeed re-encodes different bytes")
        fields = {k: text(v) for k, v in vars(m).items()}
        fields["type"] = kind
        messages.append(fields)
    stream_count = sum(1 for _ in parser.parse_stream(data))
    print(json.dumps({
        "decoder": f"itchfeed {version('itchfeed')}",
        "cpp_backend": bool(getattr(itch, "USING_CPP_BACKEND", False)),
        "count": len(messages),
        "stream_count": stream_count,
        "by_type": dict(sorted(by_type.items())),
        "problems": problems,
        "messages": messages,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
