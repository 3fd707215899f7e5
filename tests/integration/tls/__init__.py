"""MySQL connections over TLS against a private MariaDB with TLS on."""
