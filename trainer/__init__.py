"""The compute-node side: what `jsrun` launches on every rank (`python -m trainer`).

Independent of the CLI's scheduler code. Modules that the login node also uses
(``shards``, ``stage``) import neither torch nor anything from ``summit_jobs``.
"""
