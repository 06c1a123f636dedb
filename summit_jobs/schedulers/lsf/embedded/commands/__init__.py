"""The embedded LSF's commands, one module each (bsub, bjobs, bkill,
jsrun, blaunch, lsid, bqueues, bhosts, bparams, bacct), run by the shims in ../bin. They share the state,
supervisor and task modules of the package above.
"""
