"""Schedulers: everything that names a scheduler's commands. Each scheduler is a package.
"""
