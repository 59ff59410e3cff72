"""(Not named itch_book.py: that would shadow the package it imports.)

Rebuild the order book of a BinaryFILE ITCH 5.0 stream with itch-book (PyPI `itch-book`)
and print JSON: per symbol, the last depth snapshot (up to 50 levels a side, raw Price(4),
shares, order count) and BBO, plus itch-book's statistics and invariants (missing_ref,
dup_ref, crossed_books, live_orders, malformed, unknown, per-kind counts) and trade count.

usage: rebuild_book.py FILE DATE [UPTO]
  DATE  session date YYYY-MM-DD (itch-book needs it to place timestamps)
  UPTO  only the first UPTO messages of the file (the book as of that sequence number)
"""
import datetime as dt
import json
import os
import sys
import tempfile
from importlib.metadata import version

import itch_book as ib

DEPTH = 50


def prefix(path, upto):
    data = open(path, "rb").read()
    offset = 0
    for _ in range(upto):
        offset += 2 + int.from_bytes(data[offset:offset + 2], "big")
    if offset > len(data):
        sys.exit(f"{path} holds fewer than {upto} messages")
    fd, out = tempfile.mkstemp(suffix=".itch")
    with os.fdopen(fd, "wb") as f:
        f.write(data[:offset])
    return out


def plain(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def main(path, date, upto=None):
    source = prefix(path, upto) if upto is not None else path
    feed = ib.open(source, date=dt.date.fromisoformat(date), price_type="fixed")
    symbols, last_depth, last_bbo, trades = {}, {}, {}, 0
    for batch in feed.batches(tables=("bbo", "depth", "trades", "symbols"), depth=DEPTH):
        for locate, symbol in zip(batch.symbols["locate"], batch.symbols["symbol"]):
            symbols[int(locate)] = plain(symbol).strip()
        depth = batch.depth
        for i in range(len(depth["locate"])):
            last_depth[int(depth["locate"][i])] = {k: plain(v[i]) for k, v in depth.items()}
        bbo = batch.bbo
        for i in range(len(bbo["locate"])):
            last_bbo[int(bbo["locate"][i])] = {k: plain(v[i]) for k, v in bbo.items()}
        trades += len(batch.trades["seq"])
    books = {}
    for locate, symbol in sorted(symbols.items()):
        row = last_depth.get(locate, {})
        sides = {}
        for side in ("bid", "ask"):
            levels = []
            for level in range(DEPTH):
                px = row.get(f"{side}_px_{level:02}", 0)
                if not px:
                    break
                levels.append([px, row[f"{side}_sz_{level:02}"], row[f"{side}_ct_{level:02}"]])
            sides[side + "s"] = levels
        books[symbol] = {"locate": locate, **sides, "bbo": last_bbo.get(locate)}
    if source != path:
        os.unlink(source)
    print(json.dumps({
        "decoder": f"itch-book {version('itch-book')}",
        "stats": {k: plain(v) for k, v in feed.stats.items()},
        "trades": trades,
        "books": books,
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
