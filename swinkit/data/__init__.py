"""ADE20K data: the MMSeg dataset and pipeline, a synthetic stand-in, and checks."""
