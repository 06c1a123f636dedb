"""IBM LSF: command lines and parsers of bsub, bjobs, bkill (client), the embedded LSF's
state folder (home), the `summit-jobs lsf` commands (cli), and the embedded single-machine LSF itself.
"""
