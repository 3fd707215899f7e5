"""rowbus consumers package."""
