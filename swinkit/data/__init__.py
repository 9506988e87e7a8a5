"""ADE20K data: the MMSeg dataset and pipeline, a synthetic stand-in, and checks.

    dataset.py    ADE20K through MMSeg, with failures that name the sample
    loader.py     the data loader a preset feeds its model with
    synthetic.py  a deterministic synthetic ADE20K in the real on-disk layout
    verify.py     ``verify-data``: decode every file and name the bad ones
    validation.py the validation split a held-out target is measured on
    errors.py     the data layer's errors
"""
