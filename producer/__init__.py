"""rowbus producer package."""
