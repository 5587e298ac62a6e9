"""vLLM capacity planner (public API restored once all modules land)."""
