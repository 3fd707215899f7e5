"""The embedded stack on one machine (`rowbus local up | down | status`), no Docker.

- `stack`: the five services on loopback: up, down, status;
- `services`: how each service is prepared, started, probed and stopped;
- `procs`: processes launched detached, recorded, recognised and stopped by recorded pid;
- `install`: what the stack needs, installed only when missing.
"""
