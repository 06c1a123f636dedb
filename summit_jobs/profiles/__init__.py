"""Machine profiles and the user's settings: the profile schema and its validation, the config
file, the cached parse, and the one precedence rule (option > environment > config file > profile).
Imports nothing of the login side but errors; the trainer's torch-free config for its choice lists.
"""
