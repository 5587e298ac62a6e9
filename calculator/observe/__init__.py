"""What a running server says: /metrics, the Live and Fleet clients and readings, PromQL, NVML."""
