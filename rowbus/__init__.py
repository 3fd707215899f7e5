"""rowbus application shell: CLI, typed configuration, the embedded local stack, doctor.

The components sit beside it at the repository root and install under this namespace through
links here (`tests/unit/test_layout.py` checks them); the shell itself:

- `cli`: the `rowbus` command line (the only module that configures logging);
- `commands`: one module per command;
- `config`, `config_errors`: the typed configuration and its one-line errors;
- `reference`: the configuration reference (docs/configuration.md) from the settings models;
- `exceptions`: the shell's errors;
- `jobs`: the apply job's whole configuration, built from the settings;
- `tree`: a child command as its own process group, stopped whole on a signal;
- `waiting`: waiting on a condition with a deadline;
- `local`: the embedded stack (`rowbus local`);
- `doctor`: which guarantees hold on the configured services (`rowbus doctor`);
- `verify`: the sink against its sources (`rowbus verify`);
- `status`: readers, apply jobs and DDL locks on one screen (`rowbus status`);
- `demo`, `demo_iceberg`: the whole platform on the embedded stack (`rowbus demo`), and its
  Iceberg part;
- `workloads`: the reference workloads W1, W2, W3;
- `testing`: public test doubles;
- `protocol`, `clients`, `merge`, `routing`, `shard_ddl`: the engine's components (links);
- `producer`, `consumers`, `spark_apply`: the reader, the SDK, the apply job (links).
"""

__version__ = "0.1.0"
