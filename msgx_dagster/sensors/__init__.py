"""Every sensor (one module per sensor)."""

from msgx_dagster.sensors.health import health_sensor
from msgx_dagster.sensors.inbox import inbox_sensor
from msgx_dagster.sensors.run_workers import run_worker_sensor

SENSORS = [inbox_sensor, health_sensor, run_worker_sensor]
