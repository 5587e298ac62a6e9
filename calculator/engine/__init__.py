"""What vLLM decides: version rules, settings, overheads, the memory budget, the KV cache, the estimate."""
