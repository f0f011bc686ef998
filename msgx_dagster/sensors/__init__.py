"""Every sensor (one module per sensor)."""

from msgx_dagster.sensors.inbox import inbox_sensor

SENSORS = [inbox_sensor]
