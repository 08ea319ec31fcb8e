"""Configuration: parameter sections and validators, the study layout, checks before the first
node."""
