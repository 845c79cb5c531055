"""calculet-agent: the program on a target's host that holds only the server's URL and the target's token.

It registers the host, pulls its target's runs over the API, fetches their inputs by digest into a cache,
runs the runner in the sandbox (`sandbox`), and posts each run's outcome signed with the host's key. It
imports nothing of Django or of the server's packages; the server reads its verdict from what is posted.
"""

__version__ = "0.1.0"
