"""Every sensor (one module per sensor)."""

from msgx_dagster.sensors.health import health_sensor
from msgx_dagster.sensors.inbox import inbox_sensor

SENSORS = [inbox_sensor, health_sensor]
