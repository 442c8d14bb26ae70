"""``python -m cli.client``: the four client commands without the rest of ``kernelloop``."""

from cli.client import client_commands

client_commands()
