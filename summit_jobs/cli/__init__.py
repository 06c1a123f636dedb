"""The command line: click commands and their options, the choice lists --help shows, progress
output. Commands parse and print; what they do lives in the rooms below. May import every login-side room.
"""
