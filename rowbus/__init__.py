"""rowbus application shell: CLI, typed configuration, the embedded local stack, doctor."""

__version__ = "0.1.0"
