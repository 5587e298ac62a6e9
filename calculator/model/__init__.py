"""What the checkpoint is: config.json, architecture, weight inventory, quantization, weight bytes."""
