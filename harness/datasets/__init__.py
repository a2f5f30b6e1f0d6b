"""The datasets stage: which datasets exist and getting them onto disk, checked, and loaded.

Dependencies run one way: ``prepare`` -> ``download`` -> ``verify`` -> ``beir`` -> ``qrels``,
``checksums``, ``registry`` (and ``core``).
"""
