"""torch underneath: Horovod and DDP behind one interface (engines), BatchNorm statistics merged
across ranks, and every difference between the oldest supported torch and today's (compat).
"""
