"""The building blocks of layercache's HTML pages (the probing report's and the model comparison's): one style
sheet, escaped text, numbers as the tables print them, a table, and a figure embedded as PNG data.

Each page is one self-contained file: the style sheet is inline and each figure a ``data:image/png;base64`` image
with alt text, so nothing is fetched when it opens.
"""

from __future__ import annotations

import base64
import html

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1180px;
       color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.table-box { max-width: 100%; overflow-x: auto; margin: 0.8em 0; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f5f5f5; } td.text, th.text { text-align: left; }
td.best { font-weight: bold; background: #eef6ee; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; max-width: 900px; }
.meta { color: #555; } .note { color: #8a5a00; }
@media (max-width: 800px) { body { padding: 0 0.5em; } table { font-size: 0.7em; }
                             th, td { padding: 0.15em 0.25em; } }
h2 .about { font-size: 0.6em; font-weight: normal; color: #8a5a00; white-space: normal; }
td .about { font-size: 0.85em; color: #8a5a00; }
"""


def escaped(value) -> str:
    """``value`` as text, HTML-escaped."""
    return html.escape(str(value))


def number_cell(value, digits: int = 3) -> str:
    """A number to ``digits`` decimals; one that rounds to zero is 0 (never ``-0.000``); None is a dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        text = f"{value:.{digits}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text
    return escaped(value)


def html_table(header: list[str], rows: list[list[str]], text_columns: int = 1, best: dict | None = None) -> str:
    """An HTML table; the first ``text_columns`` columns are left-aligned; ``best`` marks (row, col) cells."""
    best = best or {}
    head = "".join(f'<th class="{"text" if i < text_columns else ""}">{escaped(h)}</th>' for i, h in enumerate(header))
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            if c < text_columns and "<" not in cell:  # a long name (negation_scope) may wrap after "_"
                cell = cell.replace("_", "_<wbr>")
            classes = " ".join(x for x in ("text" if c < text_columns else "", "best" if best.get((r, c)) else "") if x)
            cells.append(f'<td class="{classes}">{cell}</td>' if classes else f"<td>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    # a table wider than the page (the summary at 700 px) scrolls in its own box instead of being cut
    return f'<div class="table-box"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def figure_html(spec, png: bytes) -> str:
    """A ``<figure>`` with the PNG embedded, ``spec.title`` as its alt text and ``spec.caption`` under it; its id is
    ``figure-KEY``."""
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="figure-{spec.key}"><img src="data:image/png;base64,{data}" alt="{escaped(spec.title)}" '
            f'data-figure="{spec.key}"><figcaption>{escaped(spec.caption)}</figcaption></figure>')
