"""Rendering only: tables, figures and HTML from numbers computed elsewhere. Never imports torch.

    ddp_table.py    one DDP run (``swinkit ddp``): phases, blame, skew, straggler
    text.py         the attribution report as terminal text
    figures.py      its figures as PNG bytes
    page.py         its self-contained HTML page (figures embedded) and the PNGs beside it
    html.py         the page's building blocks: escaping, tables, embedded figures, its style
    html_run.py     the page's sections on the run: scaling, blame, lost time, straggler, oracle
    html_advice.py  its sections on what to do: recommendations, what-ifs, accumulation, loader
    engine_compare.py  engines side by side: one table, one figure
    validation.py   the ground-truth matrix (``swinkit validate``): text and HTML
    converge.py     steps to a held-out target, efficiency in steps and time, goodput
    precision_lines.py  the lost time's split in two precisions side by side, loader demand
    precision_table.py  the precision table as markdown
    asv_offline/    asv's published page pointed at local copies of its libraries (no CDN)
"""
