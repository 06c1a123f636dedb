"""summit-jobs: video-model training runs on IBM LSF GPU clusters (Summit's CSM form and today's slot form)
and on Slurm GPU clusters.

The login-node side lives here and never imports torch (start-up must stay fast);
the compute-node side is the separate ``trainer`` package.
"""

__version__ = "0.1.0"
