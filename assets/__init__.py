"""The Dagster definitions: assets, checks, sensors, schedules, resources and the executor."""
