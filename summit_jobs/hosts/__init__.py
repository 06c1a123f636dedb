"""Every side effect on a host (commands, files, SSH with verified host keys) and the preflight
checks of a site (doctor). Imports profiles and the scheduler's parsers, never planning or runs.
"""
