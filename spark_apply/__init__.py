"""rowbus spark_apply package."""
