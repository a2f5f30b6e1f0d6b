"""Experiments as files: a list of steps (eval, evaluate, compare, qa-eval, table, report, reproduce) with
shared parameters, run by ``harness run``; UltraRAG parameter files are read as experiments too."""
