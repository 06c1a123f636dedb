"""The papers' methods: multigrid schedules, AAVG model averaging with adaptive batch size, LARS,
the optimiser and the learning-rate schedules. multigrid is torch-free: the login side plans with it.
"""
