"""Runs after planning: submission and the run records, the runs index, each job's state
(lifecycle), status, reports, plots, comparisons and late fusion. Side effects go through hosts.
"""
