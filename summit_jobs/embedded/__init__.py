"""The embedded single-machine LSF: bsub, bjobs, bkill and jsrun for the ``local`` profile."""
