"""FastAPI service: translates HTTP to calls on edge/ objects."""
