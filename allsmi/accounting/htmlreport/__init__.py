"""``allsmi report``'s self-contained HTML report (the ``allsmi[report]`` extra).

``data`` computes what the page shows from the export's rows (so that its figures are the
CSV's; ``sums`` adds them up, never across currencies), ``charts`` draws the charts as inline
SVG with pygal, ``page`` lays out the sections and writes the HTML with Jinja2
(``report.html.j2``). See ``docs/report.md``.
"""
