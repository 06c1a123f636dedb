"""The data pipeline: datasets over tar shards, clip sampling, transforms, the distributed
sampler, and device-side JPEG decoding. Imports the contract modules (trainer/*.py) only.
"""
