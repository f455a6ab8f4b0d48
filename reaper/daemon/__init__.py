"""The long-running process: scheduler, policy, health, gauges, the HTTP port."""
