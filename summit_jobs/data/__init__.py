"""Data preparation: datalists of the public datasets, packing into verified tar shards, optical
flow, synthetic data, and staging (hop 1 from the archive here, hop 2 onto every node's NVMe).
"""
