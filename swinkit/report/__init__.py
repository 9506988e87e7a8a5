"""Rendering only: tables, figures and HTML from numbers computed elsewhere. Never imports torch.

    ddp_table.py  one DDP run (``swinkit ddp``): phases, blame, skew, straggler
    text.py       the attribution report as terminal text
    figures.py    its figures as PNG bytes
    page.py       its self-contained HTML page (figures embedded) and the PNGs beside it
    asv_offline/  asv's published page pointed at local copies of its libraries (no CDN)
"""
