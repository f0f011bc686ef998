"""The msgx command (``msgx = msgx_engine.cli.main:main``): ``main.py`` builds the parser from one
module per command group, each with its own ``register(sub)``; ``common.py`` holds what several
share. This file imports none of them, so a group module may import a sibling without a cycle."""
