"""Writes a benchmark's table into a docs page, between its begin and end markers (the rest of the page is kept)."""


def write_between(path: str, begin: str, end: str, text: str) -> None:
    with open(path, encoding="utf-8") as fh:
        doc = fh.read()
    a, b = doc.index(begin) + len(begin), doc.index(end)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(doc[:a] + "\n" + text + "\n" + doc[b:])
