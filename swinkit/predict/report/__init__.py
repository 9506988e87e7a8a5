"""The predictor's rendering only: text from numbers computed elsewhere. Never imports torch.

    text.py        the held-out prediction and the thesis projection as text
    scorecard.py   ``swinkit scorecard`` as text
"""
