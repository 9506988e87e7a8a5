"""Errors the data layer raises: each names the file and the sample index."""


class DataError(ValueError):
    """A data root or sample that cannot be used; the message says which and what to do."""


class CorruptSampleError(DataError):
    def __init__(self, index: int, path: str, reason: str):
        super().__init__(f"sample {index}: {path}: {reason}")
        self.index, self.path, self.reason = index, path, reason
