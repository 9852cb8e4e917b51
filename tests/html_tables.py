"""An HTML parser that collects a page's tables (class, rows of (text, cell class)), for the
report's tests and the fresh-clone test."""

from __future__ import annotations

from html.parser import HTMLParser


class Tables(HTMLParser):
    """Every <table>'s rows as lists of (cell text, cell class); and the page's text."""

    def __init__(self):
        super().__init__()
        self.tables, self.text, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"class": dict(attrs).get("class", ""), "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = [[], dict(attrs).get("class", "")]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].append(("".join(self._cell[0]).strip(), self._cell[1]))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell[0].append(data)


def parse(html: str) -> Tables:
    parser = Tables()
    parser.feed(html)
    return parser
